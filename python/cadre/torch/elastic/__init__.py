"""``hvd.elastic``: Horovod 0.28's elastic training API on cadre.

A script keeps its training state in a :class:`TorchState` (model, optimizer, sampler, plain
values such as ``epoch`` and ``batch``), commits it every so often, and wraps its training
function in :func:`run`::

    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...
            state.commit()

    train(state)

As in Horovod, ``run`` first syncs the state from rank 0, a ``HorovodInternalError`` (a peer
died, ranks disagreed) rolls the state back to the last commit, and ``HostsUpdatedInterrupt``
resets without rolling back. What differs is who replaces the lost worker: under
``cadre run --max-restarts N [--min-nodes M]`` the runner stops the job when a learner dies and
starts it again (on fewer learners while at least M remain), so every commit is also written to
``$CHECKPOINT_DIR`` and ``run`` resumes from it in the restarted processes. When the lost
learners may come back (``--rejoin-after``), a commit raises ``HostsUpdatedInterrupt`` on every
rank; ``run`` then ends the process with the exit code the runner asked for, and the runner
starts the job again on every learner from that commit. Without restarts
(a job started by hand, ``max_restarts`` 0) a ``HorovodInternalError`` restores the last commit,
restarts the engine and calls the function again, as Horovod does. See docs/horovod.md.
"""
import functools
import os
import sys

from cadre.torch.basics import HorovodInternalError, HostsUpdatedInterrupt, shutdown
from cadre.torch.elastic.sampler import ElasticSampler
from cadre.torch.elastic.state import (ObjectState, State, TorchState,  # noqa: F401
                                       get_handler_registry, runner_restarts,
                                       runner_update, set_handler_registry)
from cadre.torch.startup import init

__all__ = ["TorchState", "ElasticSampler", "run", "State", "ObjectState"]


def _reset():
    shutdown()
    init()


def _leave_for_rejoin(update, state, when):
    print("cadre: hvd.elastic: lost learners are coming back; leaving %s for `cadre run` to "
          "go on with %d learners from commit %d" % (when, update["learners"], state.commits),
          file=sys.stderr, flush=True)
    try:
        shutdown()
    except Exception:  # noqa: BLE001 - the peers are leaving too; nothing is left to stop
        pass
    sys.exit(int(update["exit_code"]))


def run(func):
    """Decorator for the elastic training function; its first argument is the State.

    Do not make the decorated call itself a collective: the state is synced before ``func``
    runs, and a rank that joins later syncs there too."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        state.resume_from_commit_file()
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HorovodInternalError as e:
                update = runner_update()
                if update is not None:
                    # A rejoin was announced: the peer that broke this collective may have
                    # left for it (the job starts again from the last commit either way).
                    _leave_for_rejoin(update, state, "after %s" % e)
                if runner_restarts():
                    # The runner is replacing this job's processes; the restarted ones resume
                    # from the last commit, written to CHECKPOINT_DIR.
                    print("cadre: hvd.elastic: %s; `cadre run` restarts the job from commit %d"
                          % (e, state.commits), file=sys.stderr, flush=True)
                    raise
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                if state.runner_update is not None:
                    # The commit that raised this is on disk; the runner starts the job again
                    # on more learners from it.
                    _leave_for_rejoin(state.runner_update, state, "at this commit")
                skip_sync = e.skip_sync
            _reset()
            state.on_reset()

    return wrapper


def restart_count():
    """Which start of the job this is (0 first, then 1, 2, ... after restarts and rejoins): the
    runner's CADRE_RESTART_COUNT."""
    return int(os.environ.get("CADRE_RESTART_COUNT") or 0)
