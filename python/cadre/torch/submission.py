"""Submissions to cadre's engine and their handles: the layer under mpi_ops (Horovod's names),
differentiable (the autograd functions), sparse and the optimizers, which all build on it and
none of which it imports.

Tensors go to the engine as (data pointer, shape, dtype) of contiguous CPU memory; each handle
keeps its tensors alive until it completes. Tensors on a GPU are staged through host memory
(cuda_staging.py) or, for allreduces where NCCL can be used, reduced on the GPU (nccl_path.py);
results land on the tensor's own device. ``*_async`` functions return an integer handle for
``poll``/``synchronize``, as Horovod's do. This module alone owns the registry of those handles;
what a handle returns is decided when it is registered (op=Adasum registers an allgather whose
result is the Adasum reduction of the gathered rows: adasum.py has the arithmetic).

Errors have Horovod 0.28's types (mpi_ops.py lists them).
"""
import itertools
import threading
import warnings
import weakref

import torch

from cadre import _core
from cadre.torch import adasum, cuda_staging, devices, nccl_path
from cadre.torch.basics import HorovodInternalError, _STATE, global_process_set



def _reduce_op(value):
    """The op constant whose value is `value` (unpickling an op gives the constant back)."""
    return _OPS_BY_VALUE[value]


class _ReduceOp(int):
    """A reduction op: an int equal to Horovod's constant (its C++ ReduceOp enum: Average 0,
    Sum 1, Adasum 2, Min 3, Max 4, Product 5), so `op=1` is Sum as in Horovod; it prints as
    its name, so messages say op=Sum rather than op=1."""

    def __new__(cls, value, name):
        op = super().__new__(cls, value)
        op._name = name
        return op

    def __repr__(self):
        return self._name

    __str__ = __repr__

    def __reduce__(self):
        return _reduce_op, (int(self),)


Average = _ReduceOp(0, "Average")
Sum = _ReduceOp(1, "Sum")
Adasum = _ReduceOp(2, "Adasum")
Min = _ReduceOp(3, "Min")
Max = _ReduceOp(4, "Max")
Product = _ReduceOp(5, "Product")
_OPS_BY_VALUE = {int(op): op for op in (Average, Sum, Adasum, Min, Max, Product)}

# The engine's codes, exported by the extension from the C++ enums (engine/request.h,
# comm/types.h) rather than written down again here.
_OP_ALLREDUCE = _core.OPS["allreduce"]
_OP_ALLGATHER = _core.OPS["allgather"]
_OP_BROADCAST = _core.OPS["broadcast"]
_OP_ALLTOALL = _core.OPS["alltoall"]
_OP_REDUCESCATTER = _core.OPS["reducescatter"]
_OP_BARRIER = _core.OPS["barrier"]
_REDUCE = {Sum: _core.REDUCE_OPS["sum"], Average: _core.REDUCE_OPS["sum"],
           Min: _core.REDUCE_OPS["min"], Max: _core.REDUCE_OPS["max"],
           Product: _core.REDUCE_OPS["product"]}
# Every element type of the engine, each of which is a torch dtype of the same name: the types
# Horovod's PyTorch binding takes.
_DTYPES = {getattr(torch, name): code for name, code in _core.DTYPES.items()}

_handles = {}
_handles_lock = threading.Lock()
_next_handle = itertools.count(1)
_noname = weakref.WeakKeyDictionary()  # ProcessSet -> counter of generated names


def _internal(message):
    return HorovodInternalError(message)


class _Pending:
    """What synchronize() needs to finish one operation."""

    def __init__(self, core, keep, finish):
        self.core = core          # _core.Handle
        self.keep = keep          # tensors that must outlive the operation
        self.finish = finish      # callable(core_handle) -> result


def _register(pending):
    h = next(_next_handle)
    with _handles_lock:
        _handles[h] = pending
    return h


def _auto_name(kind, name, process_set):
    """`name`, or a generated one. Generated names are counted per process set: ranks outside
    a set do not run its operations, so with one counter the members' next generated global
    name would differ from the other ranks' and the operation would never match."""
    if name is not None:
        return name
    ps = process_set or global_process_set
    with _handles_lock:
        counter = _noname.setdefault(ps, itertools.count())
        return "%s.noname.%d" % (kind, next(counter))


def _type_name(tensor):
    """Horovod's name for the tensor's type (torch.cuda.HalfTensor); torch has none for some
    devices (meta), which are then named by dtype and device."""
    try:
        return tensor.type()
    except RuntimeError:
        return "%s on device '%s'" % (tensor.dtype, tensor.device)


def _dtype_code(tensor):
    try:
        return _DTYPES[tensor.dtype]
    except KeyError:
        # Horovod's own words and type for a tensor type it has no operation for.
        raise ValueError("Tensor type %s is not supported." % _type_name(tensor)) from None


def _check_tensor(tensor):
    """Refuses, before anything is submitted, what no engine path can take: a tensor on a
    device other than the CPU and CUDA (meta, mps, ...), a sparse one, a dtype without an
    operation. (The engine reads CPU memory; CUDA tensors are staged or go through NCCL.)"""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("expected a torch.Tensor, got %s" % type(tensor).__name__)
    if tensor.device.type != "cpu" and devices.device_of(tensor) is None:
        raise ValueError("Tensor type %s is not supported: cadre.torch works on CPU and CUDA "
                         "tensors" % _type_name(tensor))
    if tensor.is_sparse:
        raise ValueError("Tensor type %s is not supported: use sparse_allreduce_async or "
                         "sparse_as_dense=True" % _type_name(tensor))
    _dtype_code(tensor)


def _engine(process_set):
    """The process set's engine; HorovodInternalError before init and on a rank outside the
    set, as Horovod's C++ side refuses those."""
    ps = process_set or global_process_set
    if not _STATE.initialized:
        raise _internal("Horovod has not been initialized; use hvd.init().")
    if ps.process_set_id is None:
        raise _internal("process set %r is not registered (hvd.add_process_set or "
                        "hvd.init(process_sets=...))" % (ps.ranks,))
    if ps._engine is None:
        raise _internal("rank %d is not a member of process set %d (ranks %s)"
                        % (_STATE.rank, ps.process_set_id, ps.ranks))
    return ps._engine


def _set_rank(root_rank, process_set):
    """The rank inside `process_set` of the global rank `root_rank`: Horovod's root_rank is a
    global rank, also with process sets."""
    ps = process_set or global_process_set
    root = int(root_rank)
    if ps.process_set_id == 0:
        return root  # the engine checks the range
    if root not in ps.ranks:
        raise _internal("root_rank %d is not a member of process set %d (ranks %s)"
                        % (root, ps.process_set_id, ps.ranks))
    return ps.ranks.index(root)


def _enqueue(engine, op, name, buf, group=None, **kw):
    """Submits `buf` (contiguous CPU) to the engine. A duplicate pending name raises ValueError
    (from the binding); every other refusal HorovodInternalError. `group` is (group name, index,
    number of tensors) for a member of a grouped operation: the engine fails the whole group on
    every rank when the ranks' numbers differ, instead of waiting for the missing members."""
    code = _dtype_code(buf)
    if group is not None:
        kw.update(group=group[0], group_index=group[1], group_size=group[2])
    try:
        return engine.enqueue(op, name, buf.data_ptr(), list(buf.shape), code, **kw)
    except _core.CadreError as e:
        raise _internal(str(e)) from e


def _staged_pending(device, engine, op, name, source, write_back=None, finish=None, **kw):
    """An operation on a device tensor, staged through host memory; its result (see
    cuda_staging.StagedOp.result) is on the tensor's device."""
    job = cuda_staging.submit(device, source, lambda host: _enqueue(engine, op, name, host, **kw),
                              write_back)
    return _Pending(job, (), finish or (lambda j: j.result()))


def _staged(device, engine, op, name, source, write_back=None, finish=None, **kw):
    """Registers _staged_pending's operation."""
    return _register(_staged_pending(device, engine, op, name, source, write_back, finish, **kw))


def handle_average_backwards_compatibility(op, average):
    """Horovod's resolution of the deprecated `average` flag against `op`."""
    if op is not None:
        if average is not None:
            raise ValueError("The op parameter supersedes average. Please provide only one of "
                             "them.")
        return op
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed in "
                      "v1.0", DeprecationWarning)
        return Average if average else Sum
    return Average


def _resolve_op(average, op):
    op = handle_average_backwards_compatibility(op, average)
    # Horovod's ops are plain ints (op=1 is Sum there too): its binding refuses anything else
    # with TypeError, and its C++ side an int that is no op.
    if not isinstance(op, int):
        raise TypeError("op must be hvd.Average, Sum, Adasum, Min, Max or Product (an int), not "
                        "%r" % (op,))
    if int(op) not in _OPS_BY_VALUE:
        raise _internal("unsupported reduction op %r (Average, Sum, Adasum, Min, Max, Product)"
                        % (op,))
    return _OPS_BY_VALUE[int(op)]


def _scales(op, dtype, prescale_factor, postscale_factor, set_size):
    """(prescale, postscale) as the engine applies them: Average is a sum whose postscale is
    divided by the set's size (Horovod's arithmetic, integers included). bool has no average
    and no scaling, as in Horovod."""
    pre, post = float(prescale_factor), float(postscale_factor)
    if op == Average:
        post /= set_size
    if dtype == torch.bool and (op == Average or pre != 1.0 or post != 1.0):
        raise _internal("bool tensors cannot be averaged or scaled (op=%s, prescale_factor=%s, "
                        "postscale_factor=%s)" % (op, prescale_factor, postscale_factor))
    return pre, post


# ---------------------------------------------------------------- allreduce

def _allreduce_into(tensor, output, name, op, prescale_factor, postscale_factor, process_set,
                    batchable=False, group=None):
    """Reduces `tensor` into `output` (may be the same tensor); returns a handle. `batchable`
    lets the engine wait briefly for more such submissions (DistributedOptimizer's gradients);
    `group` as _enqueue's."""
    _check_tensor(tensor)
    engine = _engine(process_set)
    name = _auto_name("allreduce", name, process_set)
    if op == Adasum:
        return _adasum_async(tensor, output, name, process_set, prescale_factor,
                             postscale_factor)
    pre, post = _scales(op, tensor.dtype, prescale_factor, postscale_factor, engine.size)
    device = devices.device_of(tensor)
    if device is not None:
        kw = dict(reduce_op=_REDUCE[op], prescale=pre, postscale=post, batchable=batchable,
                  group=group)
        path = nccl_path.path_for(engine)
        if path is None or not path.accepts(tensor, _REDUCE[op]):
            return _staged(device, engine, _OP_ALLREDUCE, name, tensor, output, **kw)
        job = path.submit(tensor, output, _REDUCE[op], pre, post, lambda buf: _enqueue(
            engine, _OP_ALLREDUCE, name, buf, external=True, **kw))
        return _register(_Pending(job, (), lambda j: j.result()))
    buf = output if output.is_contiguous() else output.contiguous()
    if buf.data_ptr() != tensor.data_ptr():
        buf.copy_(tensor)
    core = _enqueue(engine, _OP_ALLREDUCE, name, buf, reduce_op=_REDUCE[op], prescale=pre,
                    postscale=post, batchable=batchable, group=group)

    def finish(_core_handle):
        if buf is not output:
            output.copy_(buf)
        return output

    return _register(_Pending(core, (tensor, output, buf), finish))


def _adasum_async(tensor, output, name, process_set, prescale_factor, postscale_factor):
    """op=Adasum: every rank allgathers the (prescaled) contributions and reduces the rows along
    Adasum's tree (adasum.py), so that all ranks get bit-identical results in `output`. Each
    contribution is gathered in its own shape under a leading dimension of 1, so that ranks
    whose shapes differ fail at negotiation (naming them) as Horovod's Adasum allreduce does,
    even when the element counts agree."""
    engine = _engine(process_set)
    adasum.check_supported(tensor.dtype, process_set, engine.size)
    row = adasum.scale_like_horovod(tensor.detach().reshape((1,) + tuple(tensor.shape)),
                                    float(prescale_factor))
    gathered = _allgather_pending(row.contiguous(), name, process_set)
    rows_of = gathered.finish

    def finish(core):
        rows = rows_of(core)
        reduced = adasum.adasum_reduce(list(rows.reshape(rows.shape[0], tensor.numel()).unbind(0)))
        reduced = adasum.scale_like_horovod(reduced, float(postscale_factor))
        output.copy_(reduced.reshape(tensor.shape))
        return output

    return _register(_Pending(gathered.core, gathered.keep + (tensor, output), finish))


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    op = _resolve_op(average, op)
    return _allreduce_into(tensor, tensor.clone(memory_format=torch.contiguous_format), name, op,
                           prescale_factor, postscale_factor, process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    op = _resolve_op(average, op)
    return _allreduce_into(tensor, tensor, name, op, prescale_factor, postscale_factor,
                           process_set)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    op = _resolve_op(average, op)
    if (op is not Adasum and isinstance(tensor, torch.Tensor) and tensor.device.type == "cpu"
            and devices.device_of(tensor) is None and not tensor.is_sparse
            and tensor.dtype in _DTYPES and tensor.is_contiguous()):
        # The common case (a small metric, a latency-bound step) in one call to the engine: no
        # handle to register and synchronize. Same results and errors as the general path.
        engine = _engine(process_set)
        pre, post = _scales(op, tensor.dtype, prescale_factor, postscale_factor, engine.size)
        try:
            engine.allreduce_sync(_auto_name("allreduce", name, process_set), tensor.data_ptr(),
                                  tensor.shape, _DTYPES[tensor.dtype], _REDUCE[op], pre, post)
        except _core.CadreError as e:
            raise _internal(str(e)) from e
        return tensor
    return synchronize(allreduce_async_(tensor, None, name, op, prescale_factor,
                                        postscale_factor, process_set))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Submits the tensors together so that the engine negotiates and fuses them as one group.
    Returns one handle whose result is the list of outputs."""
    op = _resolve_op(average, op)
    _check_members(tensors)
    name = _auto_name("grouped_allreduce", name, process_set)
    if not tensors:
        return _empty_group(_OP_ALLREDUCE, name, process_set)
    hs = [_allreduce_into(t, t.clone(memory_format=torch.contiguous_format), "%s.%d" % (name, i),
                          op, prescale_factor, postscale_factor, process_set,
                          group=(name, i, len(tensors)))
          for i, t in enumerate(tensors)]
    return _group(hs)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    op = _resolve_op(average, op)
    _check_members(tensors)
    name = _auto_name("grouped_allreduce", name, process_set)
    if not tensors:
        return _empty_group(_OP_ALLREDUCE, name, process_set)
    hs = [_allreduce_into(t, t, "%s.%d" % (name, i), op, prescale_factor, postscale_factor,
                          process_set, group=(name, i, len(tensors)))
          for i, t in enumerate(tensors)]
    return _group(hs)


def _check_members(tensors, rank_zero_what=None):
    """Refuses a group before any of its members is submitted: a refusal half-way would leave
    the members before it pending on this rank while the other ranks wait for the rest."""
    for t in tensors:
        _check_tensor(t)
        _dtype_code(t)
        if rank_zero_what is not None:
            _rank_zero_check(t, rank_zero_what)


def _empty_group(op_code, name, process_set):
    """What an empty group submits: a marker of no elements (index 0 of 0), so that ranks whose
    groups are not empty fail at once instead of waiting for members this rank will never
    submit. When every rank's group is empty the markers run, and the result is []."""
    buf = torch.empty(0)
    core = _enqueue(_engine(process_set), op_code, name + ".0", buf, group=(name, 0, 0))
    return _register(_Pending(core, (buf,), lambda c: []))


class _GroupCore:
    """A handle over several handles: done when all are."""

    def __init__(self, handles):
        self.handles = handles


def _group(handles):
    with _handles_lock:
        parts = [_handles[h] for h in handles]

    def finish(_):
        return _synchronize_all(handles)

    return _register(_Pending(_GroupCore(handles), parts, finish))


def _synchronize_all(handles):
    """Outputs of every handle. When one fails, the rest are still waited for before its error
    is raised: a caller that goes on after the error may reuse their names at once, which the
    engine refuses while an operation of that name is in flight."""
    outputs, error = [], None
    for h in handles:
        try:
            outputs.append(synchronize(h))
        except Exception as e:  # noqa: BLE001 (re-raised below, after the others finish)
            outputs.append(None)
            error = error or e
    if error is not None:
        raise error
    return outputs


# ---------------------------------------------------------------- allgather / broadcast / ...

def _engine_output(core, dtype):
    out = torch.empty(core.output_shape, dtype=dtype)
    core.copy_output(out.data_ptr(), core.output_nbytes)
    return out


def _rank_zero_check(tensor, what):
    if tensor.dim() == 0:
        raise _internal("Rank zero tried to %s a rank-zero tensor." % what)


def _allgather_pending(tensor, name, process_set, group=None):
    _check_tensor(tensor)
    engine = _engine(process_set)
    _rank_zero_check(tensor, "allgather")
    name = _auto_name("allgather", name, process_set)
    device = devices.device_of(tensor)
    if device is not None:
        return _staged_pending(device, engine, _OP_ALLGATHER, name, tensor, group=group)
    buf = tensor.contiguous()
    core = _enqueue(engine, _OP_ALLGATHER, name, buf, group=group)
    return _Pending(core, (buf,), lambda c: _engine_output(c, tensor.dtype))


def allgather_async(tensor, name=None, process_set=global_process_set):
    return _register(_allgather_pending(tensor, name, process_set))


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    _check_members(tensors, "allgather")
    name = _auto_name("grouped_allgather", name, process_set)
    if not tensors:
        return _empty_group(_OP_ALLGATHER, name, process_set)
    return _group([_register(_allgather_pending(t, "%s.%d" % (name, i), process_set,
                                                (name, i, len(tensors))))
                   for i, t in enumerate(tensors)])


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """root_rank is a global rank (a member of process_set), as in Horovod."""
    _check_tensor(tensor)
    engine = _engine(process_set)
    root = _set_rank(root_rank, process_set)
    name = _auto_name("broadcast", name, process_set)
    device = devices.device_of(tensor)
    if device is not None:
        return _staged(device, engine, _OP_BROADCAST, name, tensor, tensor, root=root)
    buf = tensor if tensor.is_contiguous() else tensor.contiguous()
    core = _enqueue(engine, _OP_BROADCAST, name, buf, root=root)

    def finish(_):
        if buf is not tensor:
            tensor.copy_(buf)
        return tensor

    return _register(_Pending(core, (tensor, buf), finish))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    return broadcast_async_(tensor.clone(memory_format=torch.contiguous_format), root_rank, name,
                            process_set)


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    _check_tensor(tensor)
    engine = _engine(process_set)
    _rank_zero_check(tensor, "alltoall")
    split_list = [] if splits is None else [int(s) for s in
                                            (splits.tolist() if torch.is_tensor(splits)
                                             else splits)]
    name = _auto_name("alltoall", name, process_set)
    device = devices.device_of(tensor)
    if device is not None:
        return _staged(device, engine, _OP_ALLTOALL, name, tensor, splits=split_list,
                       finish=lambda j: (j.result(), torch.tensor(j.core.received_splits,
                                                                  dtype=torch.int32)))
    buf = tensor.contiguous()
    core = _enqueue(engine, _OP_ALLTOALL, name, buf, splits=split_list)

    def finish(c):
        out = _engine_output(c, tensor.dtype)
        return out, torch.tensor(c.received_splits, dtype=torch.int32)

    return _register(_Pending(core, (buf,), finish))


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Reduces across ranks and returns this rank's block of rows (the first rows % size ranks
    get one more row). Sum and Average as in Horovod (scale factors with its arithmetic: the
    engine scales each rank's input and the reduced block); Min, Max and Product as well."""
    return _reducescatter_into(tensor, name, op, process_set, prescale_factor, postscale_factor)


def _reducescatter_into(tensor, name, op, process_set, prescale_factor, postscale_factor,
                        group=None):
    _check_tensor(tensor)
    op = _resolve_op(None, op)
    if op == Adasum:
        raise _internal("Reducescatter does not support Adasum; use Sum or Average")
    engine = _engine(process_set)
    _rank_zero_check(tensor, "reducescatter")
    pre, post = _scales(op, tensor.dtype, prescale_factor, postscale_factor, engine.size)
    name = _auto_name("reducescatter", name, process_set)
    device = devices.device_of(tensor)
    if device is not None:
        return _staged(device, engine, _OP_REDUCESCATTER, name, tensor, reduce_op=_REDUCE[op],
                       prescale=pre, postscale=post, group=group)
    buf = tensor.contiguous()
    core = _enqueue(engine, _OP_REDUCESCATTER, name, buf, reduce_op=_REDUCE[op], prescale=pre,
                    postscale=post, group=group)
    return _register(_Pending(core, (buf,), lambda c: _engine_output(c, tensor.dtype)))


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    _check_members(tensors, "reducescatter")
    name = _auto_name("grouped_reducescatter", name, process_set)
    if not tensors:
        return _empty_group(_OP_REDUCESCATTER, name, process_set)
    return _group([_reducescatter_into(t, "%s.%d" % (name, i), op, process_set, prescale_factor,
                                       postscale_factor, (name, i, len(tensors)))
                   for i, t in enumerate(tensors)])


def barrier(process_set=global_process_set):
    """Returns once every rank of the process set has called barrier()."""
    engine = _engine(process_set)
    try:
        core = engine.enqueue(_OP_BARRIER, _auto_name("barrier", None, process_set), 0, [], 0)
    except _core.CadreError as e:
        raise _internal(str(e)) from e
    synchronize(_register(_Pending(core, (), lambda c: None)))


def join(device=-1):
    """Tells the other ranks this rank has no more batches: until every rank has joined, its
    engine contributes zeros to their sum/average allreduces (their other collectives fail).
    Returns the rank that joined last."""
    engine = _engine(global_process_set)
    try:
        core = engine.join()
    except _core.CadreError as e:
        raise _internal(str(e)) from e
    return synchronize(_register(_Pending(core, (), lambda c: c.join_rank)))


# ---------------------------------------------------------------- handles

def poll(handle):
    """True when the operation behind `handle` has completed (without waiting)."""
    if callable(handle):  # sparse_allreduce_async's handle
        return handle.poll()
    with _handles_lock:
        pending = _handles.get(handle)
    if pending is None:
        raise ValueError("unknown or already synchronized handle %r" % (handle,))
    if isinstance(pending.core, _GroupCore):
        return all(poll(h) for h in pending.core.handles)
    return pending.core.done()


def synchronize(handle):
    """Waits for the operation and returns its output; raises HorovodInternalError when it
    failed (the message names the ranks involved). Also takes sparse_allreduce_async's
    callable handle (Horovod's users call it; either works)."""
    if callable(handle):
        return handle()
    with _handles_lock:
        pending = _handles.pop(handle, None)
    if pending is None:
        raise ValueError("unknown or already synchronized handle %r" % (handle,))
    core = pending.core
    if not isinstance(core, _GroupCore):
        # Short waits keep Ctrl-C responsive; the GIL is released inside wait().
        while not core.wait(0.2):
            pass
        try:
            core.check()
        except _core.CadreError as e:
            raise _internal(str(e)) from e
    return pending.finish(core)
