"""hvd.elastic's state objects: State (the protocol), ObjectState (plain values), TorchState
(models, optimizers, LR schedulers, ElasticSampler, plus plain values).

Horovod keeps a commit in memory only, since its driver keeps the surviving processes. Under
``cadre run --max-restarts`` the runner starts new processes instead, so a commit is also
written, by rank 0, to ``$CHECKPOINT_DIR/hvd-elastic-state.pt`` (atomically: a reader sees the
previous commit or this one), and the first ``sync`` of a restarted process starts from it.
"""
import copy
import io
import json
import os

import torch

from cadre.torch import functions, objects
from cadre.torch.basics import HostsUpdatedInterrupt, is_initialized, rank
from cadre.torch.elastic.sampler import ElasticSampler

COMMIT_FILE = "hvd-elastic-state.pt"


def runner_restarts():
    """Whether `cadre run` restarts this job when a learner fails (its max_restarts > 0)."""
    return int(os.environ.get("CADRE_MAX_RESTARTS") or 0) > 0


def runner_update():
    """What `cadre run` announced for an elastic job (its CADRE_ELASTIC_UPDATES file): a dict
    {"learners": N, "exit_code": C} once lost learners may come back, else None."""
    path = os.environ.get("CADRE_ELASTIC_UPDATES")
    if not path:
        return None
    try:
        with open(path) as f:
            update = json.load(f)
    except (OSError, ValueError):
        return None  # not written yet, or (never, it is replaced atomically) half written
    if not isinstance(update, dict) or "learners" not in update or "exit_code" not in update:
        return None
    return update


def commit_file():
    """Where commits are written, or None when nothing would read them."""
    folder = os.environ.get("CHECKPOINT_DIR")
    if not folder or not runner_restarts():
        return None
    return os.path.join(folder, COMMIT_FILE)


def _write_atomically(path, obj):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    buf = io.BytesIO()
    torch.save(obj, buf)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, buf.getvalue())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


class State:
    """What hvd.elastic.run keeps consistent across ranks: ``save``/``restore``/``sync``/
    ``reset`` are the subclass's; ``commit`` saves (and, under restarts, writes the commit)."""

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks = []
        self.commits = 0  # commits so far, counted across restarts
        self.runner_update = None  # what made check_host_updates raise, under `cadre run`

    def register_reset_callbacks(self, callbacks):
        """Functions called after every reset (a new set of ranks), e.g. to rescale the LR."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):
        """Horovod's driver notification; cadre's runner announces through a file instead (see
        check_host_updates), so this is kept only for code that calls it."""

    def commit(self):
        """Saves the state as the one to go back to, writes it for restarted processes, then
        checks for host updates."""
        self.save()
        self.commits += 1
        path = commit_file()
        if path is not None and self._rank() == 0:
            _write_atomically(path, {"commits": self.commits, "state": self.saved_state()})
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank when the set of hosts changed.

        Under ``cadre run --min-nodes`` a change is lost learners coming back: the runner
        announces it, rank 0 reads the announcement and broadcasts it (so that every rank
        raises at the same commit, as Horovod's driver notifications are synced), and
        ``hvd.elastic.run`` then ends the process for the runner to start the job again on
        more learners from this commit. Lost learners are not announced: the runner restarts
        the job without them. Outside an elastic job this does nothing, not even a
        collective."""
        if not os.environ.get("CADRE_ELASTIC_UPDATES"):
            return
        update = runner_update() if self._rank() == 0 else None
        update = self._bcast_object(update)
        if update is not None:
            self.runner_update = update
            raise HostsUpdatedInterrupt(False)

    def resume_from_commit_file(self):
        """Loads the last commit written by an earlier start of this job, if any; True if so."""
        path = commit_file()
        if path is None or not os.path.exists(path):
            return False
        # Rank 0 wrote it: its CUDA tensors load where this rank has CUDA (objects.py).
        saved = torch.load(path, map_location=objects._map_location)
        self.load_saved_state(saved["state"])
        self.commits = saved["commits"]
        self.restore()
        return True

    # What a commit holds, for the commit file.
    def saved_state(self):
        raise NotImplementedError()

    def load_saved_state(self, saved):
        raise NotImplementedError()

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def reset(self):
        pass


class ObjectState(State):
    """Plain picklable values, given as keyword arguments and read back as attributes."""

    def __init__(self, bcast_object, get_rank, **kwargs):
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = {k: getattr(self, k) for k in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def saved_state(self):
        return {"objects": copy.deepcopy(self._saved_state)}

    def load_saved_state(self, saved):
        self._saved_state = saved["objects"]

    def _set_attrs(self):
        for k, v in self._saved_state.items():
            setattr(self, k, v)


class StateHandler:
    """Save/restore/sync of one kind of object held by a TorchState."""

    def __init__(self, value):
        self.value = value
        self.saved = None
        self.save()

    def set_value(self, value):
        self.value = value
        self.save()

    def save(self):
        self.saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self.saved)

    def sync(self):
        raise NotImplementedError()


class ModelStateHandler(StateHandler):
    def sync(self):
        functions.broadcast_parameters(self.value.state_dict(), root_rank=0)


class OptimizerStateHandler(StateHandler):
    def sync(self):
        functions.broadcast_optimizer_state(self.value, root_rank=0)


class LRSchedulerStateHandler(StateHandler):
    def sync(self):
        self.value.load_state_dict(functions.broadcast_object(self.value.state_dict()))


class SamplerStateHandler(StateHandler):
    def save(self):
        # Every rank's progress; processed_num counts all ranks' batches, so rank 0's will do,
        # but agree on it so that a commit is the same everywhere.
        state = copy.deepcopy(self.value.state_dict())
        state["processed_num"] = max(
            s["processed_num"] for s in functions.allgather_object(self.value.state_dict())) \
            if is_initialized() else state["processed_num"]
        self.saved = state

    def sync(self):
        self.value.load_state_dict(functions.broadcast_object(self.value.state_dict()))


_handler_registry = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (torch.optim.lr_scheduler._LRScheduler, LRSchedulerStateHandler),
    (ElasticSampler, SamplerStateHandler),
]


def get_handler_registry():
    return _handler_registry


def set_handler_registry(registry):
    global _handler_registry
    _handler_registry = registry


def _handler_for(value):
    for kind, handler in _handler_registry:
        if isinstance(value, kind):
            return handler(value)
    return None


class TorchState(ObjectState):
    """The state of PyTorch training: ``model`` and ``optimizer`` (either may be None) and any
    keyword arguments; models, optimizers, LR schedulers and ElasticSamplers among them are
    saved through their state_dict and synced by broadcast, other values as plain objects.

    Assigning a new model or optimizer (``state.model = m``) saves it at once, as Horovod."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        handlers, plain = {}, {}
        for k, v in kwargs.items():
            handler = _handler_for(v)
            if handler is not None:
                handlers[k] = handler
            else:
                plain[k] = v
        self._handlers = handlers
        for k, handler in handlers.items():
            setattr(self, k, handler.value)
        super().__init__(bcast_object=functions.broadcast_object, get_rank=rank, **plain)

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers")
        # A replacement (not the first assignment, made from the handler's own value) is saved.
        if handlers is not None and name in handlers and name in self.__dict__:
            handlers[name].set_value(value)
        super().__setattr__(name, value)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        for handler in self._handlers.values():
            handler.sync()
        super().sync()

    def saved_state(self):
        saved = super().saved_state()
        saved["handlers"] = {k: h.saved for k, h in self._handlers.items()}
        return saved

    def load_saved_state(self, saved):
        super().load_saved_state(saved)
        for k, value in saved.get("handlers", {}).items():
            if k in self._handlers:
                self._handlers[k].saved = value
