"""cadre.ddl: IBM DDL's API for PyTorch (``import cadre.ddl as ddl``), DDL mode (``pytorch-ddl``).

Start from single-process code and add::

    ddl.init()                                   # ranks from `cadre run`; DDL_OPTIONS honoured
    model, optimizer = ddl.wrap(model, optimizer)  # same start on every rank, gradients averaged
    ... shard the data by ddl.rank() / ddl.size() ...

The collectives run on cadre's engine: with several slots per learner the allreduce is
hierarchical (reduce-scatter among the learner's slots over shared memory, one ring per slot
across learners, allgather inside), see options.py for ``-mode``. When CUDA exists, each process is
pinned to GPU ``local_rank() % device_count`` at init (under ``cadre run`` that is the slot's own
GPU); tensors on a GPU are reduced by cadre.torch without blocking the caller: staged through
page-locked host memory on a side stream, or by NCCL where it can be used (docs/gpu.md).

Names follow IBM DDL: init, rank, size, local_rank, num_hosts, bcast, allreduce_n, grads_reduce.
"""
import os
import sys
import time
import types

import torch

import cadre.torch as _hvd
from cadre.torch import closure as _closure
from cadre.torch import submission as _submission
from cadre.ddl import options as _options

__all__ = ["init", "is_initialized", "rank", "size", "local_rank", "local_size", "num_hosts",
           "host_rank", "device", "bcast", "allreduce_n", "grads_reduce", "wrap", "shutdown",
           "cuda_built", "nccl_built"]

# Capability queries (callable before init): CUDA tensors are taken when this PyTorch has CUDA;
# nccl_built() is the NCCL_VERSION_CODE of its NCCL (False without), as cadre.torch answers.
cuda_built = _hvd.cuda_built
nccl_built = _hvd.nccl_built


class _State:
    opts = None
    device = torch.device("cpu")
    calls = 0          # grads_reduce calls since init
    reduce_s = 0.0     # seconds spent in them since the last dump
    reduce_bytes = 0


_S = _State()


def init(options=None):
    """Joins the job. `options` is a DDL options string (see cadre.ddl.options); DDL_OPTIONS is
    read first and `options` overrides it. Idempotent; a second call with other options raises."""
    opts = _options.from_environment(options)
    if _S.opts is not None:
        if opts != _S.opts:
            raise ValueError("cadre.ddl is already initialised with other options (%r)" % (_S.opts,))
        return
    if _hvd.is_initialized():
        raise ValueError("cadre.ddl.init() must come before cadre.torch.init() in one process: "
                         "the allreduce algorithm is fixed when the engine starts")
    # The engine's communicator reads its algorithm from the environment when it is created.
    os.environ["CADRE_ALLREDUCE_ALGORITHM"] = opts.algorithm
    if opts.host_grid():
        os.environ["CADRE_HOST_GRID"] = "x".join(map(str, opts.host_grid()))
    _hvd.init()
    try:
        _options.check_topology(opts, _hvd.local_size(), _hvd.cross_size())
    except ValueError:
        _hvd.shutdown()
        raise
    if torch.cuda.is_available():
        index = _hvd.local_rank() % torch.cuda.device_count()
        torch.cuda.set_device(index)
        _S.device = torch.device("cuda", index)
    _S.opts = opts
    _S.calls, _S.reduce_s, _S.reduce_bytes = 0, 0.0, 0


def is_initialized():
    return _S.opts is not None


def _require():
    if _S.opts is None:
        raise ValueError("cadre.ddl has not been initialised; call ddl.init() first")


def shutdown():
    """Leaves the job (pending operations fail on every rank). init() may be called again."""
    _hvd.shutdown()
    _S.opts = None
    _S.device = torch.device("cpu")


def rank():
    _require()
    return _hvd.rank()


def size():
    _require()
    return _hvd.size()


def local_rank():
    """This process's slot within its learner (host)."""
    _require()
    return _hvd.local_rank()


def local_size():
    _require()
    return _hvd.local_size()


def num_hosts():
    """Number of learners (hosts) in the job."""
    _require()
    return _hvd.cross_size()


def host_rank():
    """Index of this process's learner (host), 0-based."""
    _require()
    return _hvd.cross_rank()


def device():
    """The device this process is pinned to: its GPU when CUDA exists, else the CPU."""
    _require()
    return _S.device


def _staged(tensors):
    """What to reduce in place for `tensors`: the tensor itself when it is contiguous (on the CPU
    or a GPU: cadre.torch stages GPU tensors itself), else a contiguous copy on its device, to
    be written back."""
    out = []
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            raise TypeError("expected torch.Tensor, got %s" % type(t).__name__)
        out.append(t if t.is_contiguous() else t.detach().contiguous())
    return out


def _write_back(tensors, staged):
    for t, s in zip(tensors, staged):
        if s is not t:
            with torch.no_grad():
                t.copy_(s)


def bcast(tensor, root=0):
    """Replaces `tensor` on every rank by rank `root`'s value (in place); returns it."""
    _require()
    if not 0 <= int(root) < _hvd.size():
        raise ValueError("bcast root %r is not a rank of this job (size %d)" % (root, _hvd.size()))
    (buf,) = _staged([tensor])
    with torch.no_grad():
        _hvd.broadcast_(buf, int(root), name=None)
    _write_back([tensor], [buf])
    return tensor


def _reduce_op(op):
    ops = {"sum": _hvd.Sum, "avg": _hvd.Average, "average": _hvd.Average}
    if not isinstance(op, str) and op in (_hvd.Sum, _hvd.Average):
        return op  # cadre.torch's constants
    key = op.lower() if isinstance(op, str) else op
    if key not in ops:
        raise ValueError("allreduce_n op %r: use 'sum' or 'avg'" % (op,))
    return ops[key]


def allreduce_n(tensors, op="avg", name=None):
    """Reduces every tensor of the list across all ranks, in place, as one group; returns the list.
    op: 'sum' or 'avg'. Every rank passes tensors of the same shapes and dtypes in the same order."""
    _require()
    tensors = list(tensors)
    staged = _staged(tensors)
    with torch.no_grad():
        _hvd.grouped_allreduce_(staged, op=_reduce_op(op), name=name)
    _write_back(tensors, staged)
    return tensors


def _group_by_bytes(tensors, limit):
    """Consecutive runs of `tensors` of at most `limit` bytes each (a larger tensor goes alone)."""
    groups, current, used = [], [], 0
    for t in tensors:
        nbytes = t.numel() * t.element_size()
        if current and used + nbytes > limit:
            groups.append(current)
            current, used = [], 0
        current.append(t)
        used += nbytes
    if current:
        groups.append(current)
    return groups


def _gradients(source):
    """The gradients to reduce: of every parameter that requires one or has one. A parameter
    that backward did not reach on this rank gets a zero gradient first, as Horovod's
    DistributedOptimizer gives it: another rank may have one, and every rank must submit the
    same tensors (a rank that skipped it would leave the others waiting for it)."""
    if isinstance(source, torch.nn.Module):
        params = list(source.parameters())
    else:
        params = list(source)
    grads = []
    for p in params:
        if getattr(p, "grad", None) is None:
            if not getattr(p, "requires_grad", False):
                continue
            p.grad = torch.zeros_like(p)
        grads.append(p.grad)
    return grads


def grads_reduce(model_or_params, average=True):
    """Allreduces the gradients of a model (or of an iterable of parameters) across all ranks, in
    groups of at most DDL_GROUP_SIZE bytes submitted together, and waits for them. A parameter
    that requires a gradient but got none on this rank (a branch this rank's batch did not take)
    counts as zeros and gets the reduced gradient like the others; parameters that require none
    are skipped."""
    _require()
    grads = _gradients(model_or_params)
    start = time.perf_counter()
    op = _hvd.Average if average else _hvd.Sum
    handles, pending = [], []
    for k, group in enumerate(_group_by_bytes(grads, _S.opts.group_size)):
        staged = _staged(group)
        with torch.no_grad():
            handles.append(_hvd.grouped_allreduce_async_(staged, op=op, name="ddl.grads.%d" % k))
        pending.append((group, staged))
    _submission._synchronize_all(handles)
    for group, staged in pending:
        _write_back(group, staged)
    _account(time.perf_counter() - start, sum(g.numel() * g.element_size() for g in grads),
             len(handles))


def _account(seconds, nbytes, groups):
    _S.calls += 1
    _S.reduce_s += seconds
    _S.reduce_bytes += nbytes
    every = _S.opts.dump_iter
    if every and _S.calls % every == 0:
        if _hvd.rank() == 0:
            mib = _S.reduce_bytes / float(1 << 20)
            print("ddl: iter %d: grads_reduce of %.1f MiB in %.1f ms over the last %d iter(s) "
                  "(%d group(s) per iter, %s)"
                  % (_S.calls, mib, _S.reduce_s * 1e3, every, groups, _S.opts.algorithm),
                  file=sys.stderr, flush=True)
        _S.reduce_s, _S.reduce_bytes = 0.0, 0


class _BackwardReducer:
    """Reduces a wrapped model's gradients when each backward pass through it ends, as
    DistributedDataParallel does: what a script does between ``backward()`` and ``step()``
    (clipping the gradient norm, reading or scaling the gradients) sees the averaged gradients,
    and ``step()`` finds them ready.

    Several backward passes before a step (gradient accumulation) reduce each pass's part once:
    an average is linear, so the gradients already averaged pass through unchanged; a sum
    subtracts them first and adds them back (``_base``). ``step()`` reduces the gradients itself
    when no backward pass reached the model on this rank (the other ranks' passes wait for it
    there), so every rank reduces the same groups once per step either way."""

    def __init__(self, model, average):
        self.model = model
        self.average = average
        self.queued = False   # a callback waits for the end of the current backward pass
        self.reduced = False  # the gradients were reduced since the last step
        self._base = None     # sum: the gradients as last reduced, while accumulating
        for p in model.parameters():
            if p.requires_grad:
                p.register_hook(self._on_gradient)

    def _on_gradient(self, grad):
        if not self.queued:
            self.queued = True
            # Runs once the whole backward pass is over, the gradients accumulated in p.grad.
            torch.autograd.Variable._execution_engine.queue_callback(self._on_backward_end)
        return None

    def _on_backward_end(self):
        self.queued = False
        self.reduce()

    def reduce(self):
        grads = _gradients(self.model)
        base = self._base if self.reduced and not self.average else None
        if base is not None:
            if len(base) != len(grads):
                raise RuntimeError("cadre.ddl.wrap: the model's parameters that take gradients "
                                   "changed between two backward passes of one step")
            with torch.no_grad():
                for g, b in zip(grads, base):
                    g.sub_(b)
        grads_reduce(self.model, average=self.average)
        if base is not None:
            with torch.no_grad():
                for g, b in zip(grads, base):
                    g.add_(b)
        if not self.average:
            self._base = [g.detach().clone() for g in grads]
        self.reduced = True

    def start_step(self):
        """Forgets the reductions of the step that ends (step(), or the optimizer's
        zero_grad())."""
        self.reduced = False
        self._base = None


def wrap(model, optimizer, average=True):
    """The one-line integration: moves `model` to device(), gives every rank rank 0's parameters,
    buffers and optimizer state, and reduces (averages, or sums with average=False) the
    gradients at the end of every backward pass through the model, as DistributedDataParallel
    does, so that gradient clipping and anything else between ``backward()`` and ``step()``
    acts on the reduced gradients. Returns (model, optimizer)."""
    _require()
    for what, obj in (("model", model), ("optimizer", optimizer)):
        # A second reducer would reduce every gradient twice (a sum n times too large).
        if getattr(obj, "_cadre_ddl_wrapped", False):
            raise ValueError("ddl.wrap: this %s is already wrapped; wrap it once" % what)
    model = model.to(_S.device)
    model._cadre_ddl_wrapped = optimizer._cadre_ddl_wrapped = True
    for t in model.state_dict().values():
        bcast(t, 0)
    if isinstance(optimizer, torch.optim.LBFGS):
        # No step without a closure to initialize its state with, and nothing Horovod's
        # broadcast_optimizer_state handles: the state_dict travels whole.
        optimizer.load_state_dict(_hvd.broadcast_object(optimizer.state_dict(), 0,
                                                        name="ddl.wrap.optimizer_state"))
    else:
        _hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    reducer = _BackwardReducer(model, average)
    step = optimizer.step
    zero_grad = optimizer.zero_grad

    def reduce_evaluation():
        # A backward pass through the model reduced the gradients when it ended; a rank whose
        # closure did not reach the model reduces them here, as the other ranks did theirs.
        if not reducer.reduced:
            reducer.reduce()

    def evaluate_closure(closure):
        # Every evaluation computes the gradients afresh (torch's closures clear them first).
        def evaluate():
            reducer.start_step()
            return closure()
        return _closure.reducing_closure(evaluate, reduce_evaluation,
                                         _hvd.Average if average else _hvd.Sum,
                                         _hvd.global_process_set, "ddl.closure_loss")

    def reducing_step(self, closure=None):
        if closure is not None:
            # The wrapped optimizer evaluates it as often as it needs (LBFGS: several times),
            # each evaluation with its gradients and its loss reduced across the ranks.
            try:
                return step(evaluate_closure(closure))
            finally:
                reducer.start_step()
        reduce_evaluation()
        reducer.start_step()
        return step()

    def resetting_zero_grad(self, *args, **kwargs):
        reducer.start_step()
        return zero_grad(*args, **kwargs)

    # Bound methods, as the ones they replace: torch's LR schedulers made afterwards wrap
    # optimizer.step through its __self__ and __func__.
    optimizer.step = types.MethodType(reducing_step, optimizer)
    optimizer.zero_grad = types.MethodType(resetting_zero_grad, optimizer)
    return model, optimizer
