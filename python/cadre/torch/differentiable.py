"""Differentiable collectives: what allreduce, grouped_allreduce, allgather, broadcast, alltoall
and reducescatter do when their input requires grad (Horovod's are autograd functions; mpi_ops
routes here only then, so the common no-grad call pays nothing for it).

The backward passes follow Horovod 0.28's definitions, so that scripts get the gradients they
got with Horovod:
- allreduce: the gradient is allreduced with the same op and scale factors — exact for Sum and
  Average, where every rank's loss depends on the one reduced tensor. Min, Max and Product have
  no such gradient: backward raises instead of returning a wrong one.
- allgather: the gradient averaged over the ranks, then this rank's rows.
- broadcast: the gradient averaged over the ranks on the root rank (a global rank, also with
  process sets), zeros elsewhere.
- alltoall: the gradient travels back along the received splits.
- reducescatter (Sum, Average): the allgather of the output gradients, times the set's size for
  Sum, times prescale and postscale (Horovod's HorovodReducescatter.backward); likewise each
  tensor of grouped_reducescatter.
Backward collectives get automatic names, so every rank must run backward through the same
collectives in the same order — as with Horovod. They are differentiable in turn when the
gradient requires grad (double backward), as mpi_ops' synchronous forms are.

Built on submission.py (the engine's submissions and handles) only; mpi_ops routes here.
"""
import torch

from cadre.torch import submission as ops
from cadre.torch.basics import rank


def wanted(tensor):
    """True when a collective on `tensor` must be recorded for backward."""
    return torch.is_tensor(tensor) and tensor.requires_grad and torch.is_grad_enabled()


def _allreduce_sync(tensor, op, prescale, postscale, process_set):
    """What mpi_ops.allreduce(tensor, op=...) returns."""
    if wanted(tensor):
        return allreduce(tensor, ops._resolve_op(None, op), None, prescale, postscale,
                         process_set)
    return ops.allreduce_(tensor.clone(memory_format=torch.contiguous_format), None, None, op,
                          prescale, postscale, process_set)


def _grouped_allreduce_sync(tensors, op, prescale, postscale, process_set):
    """What mpi_ops.grouped_allreduce(tensors, op=...) returns."""
    for t in tensors:
        ops._check_tensor(t)
    if any(wanted(t) for t in tensors):
        return grouped_allreduce(tensors, ops._resolve_op(None, op), None, prescale, postscale,
                                 process_set)
    return ops.synchronize(ops.grouped_allreduce_async_([t.clone() for t in tensors], None, None,
                                                        op, prescale, postscale, process_set))


def _allgather_sync(tensor, process_set):
    """What mpi_ops.allgather(tensor) returns."""
    if wanted(tensor):
        return allgather(tensor, None, process_set)
    return ops.synchronize(ops.allgather_async(tensor, None, process_set))


def _no_gradient(what, op):
    raise RuntimeError("cadre.torch: %s with op=%s has no gradient (only Sum and Average, as "
                       "in Horovod, have one); detach the input or reduce with Sum/Average"
                       % (what, op))


class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, op, name, prescale, postscale, process_set):
        ctx.args = (op, prescale, postscale, process_set)
        out = tensor.clone(memory_format=torch.contiguous_format)
        return ops.synchronize(ops._allreduce_into(tensor, out, name, op, prescale, postscale,
                                                   process_set))

    @staticmethod
    def backward(ctx, grad):
        op, prescale, postscale, process_set = ctx.args
        if op in (ops.Min, ops.Max, ops.Product):
            _no_gradient("allreduce", op)
        g = _allreduce_sync(grad.contiguous(), op, prescale, postscale, process_set)
        return g, None, None, None, None, None


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, op, name, prescale, postscale, process_set, *tensors):
        ctx.args = (op, prescale, postscale, process_set)
        return tuple(ops.synchronize(ops.grouped_allreduce_async(
            list(tensors), None, name, op, prescale, postscale, process_set)))

    @staticmethod
    def backward(ctx, *grads):
        op, prescale, postscale, process_set = ctx.args
        if op in (ops.Min, ops.Max, ops.Product):
            _no_gradient("grouped_allreduce", op)
        gs = _grouped_allreduce_sync([g.contiguous() for g in grads], op, prescale, postscale,
                                     process_set)
        return (None, None, None, None, None) + tuple(gs)


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.shape, ctx.process_set = tensor.shape, process_set
        return ops.synchronize(ops.allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        ps = ctx.process_set
        rows = ctx.shape[0] if len(ctx.shape) else 1
        g = _allreduce_sync(grad.contiguous(), ops.Average, 1.0, 1.0, ps)
        counts = _allgather_sync(torch.tensor([rows], dtype=torch.int64), ps)
        offset = int(counts[:ps.rank()].sum())
        return g.narrow(0, offset, rows).reshape(ctx.shape), None, None


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank, ctx.process_set = root_rank, process_set
        return ops.synchronize(ops.broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        g = _allreduce_sync(grad.contiguous(), ops.Average, 1.0, 1.0, ctx.process_set)
        if rank() != ctx.root_rank:
            g = torch.zeros_like(g)
        return g, None, None, None


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        out, received = ops.synchronize(ops.alltoall_async(tensor, splits, name, process_set))
        ctx.received, ctx.process_set = received, process_set
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, _received_grad):
        g, _ = ops.synchronize(ops.alltoall_async(
            grad.contiguous(), ctx.received.tolist(), None, ctx.process_set))
        return g, None, None, None


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale, postscale):
        ctx.args = (op, process_set, prescale, postscale)
        return ops.synchronize(ops.reducescatter_async(tensor, name, op, process_set, prescale,
                                                       postscale))

    @staticmethod
    def backward(ctx, grad):
        op, process_set, prescale, postscale = ctx.args
        return _reducescatter_grad(grad, op, process_set, prescale, postscale), \
            None, None, None, None, None


def _reducescatter_grad(grad, op, process_set, prescale, postscale):
    if op not in (ops.Sum, ops.Average):
        _no_gradient("reducescatter", op)
    scale = (process_set.size() if op == ops.Sum else 1) * prescale * postscale
    grad = grad.contiguous()
    return _allgather_sync(grad * scale if scale != 1 else grad, process_set)


class _GroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, prescale, postscale, *tensors):
        ctx.args = (op, process_set, prescale, postscale)
        return tuple(ops.synchronize(ops.grouped_reducescatter_async(
            list(tensors), name, op, process_set, prescale, postscale)))

    @staticmethod
    def backward(ctx, *grads):
        op, process_set, prescale, postscale = ctx.args
        return (None, None, None, None, None) + tuple(
            _reducescatter_grad(g, op, process_set, prescale, postscale) for g in grads)


def allreduce(tensor, op, name, prescale, postscale, process_set):
    return _Allreduce.apply(tensor, op, name, prescale, postscale, process_set)


def grouped_allreduce(tensors, op, name, prescale, postscale, process_set):
    return list(_GroupedAllreduce.apply(op, name, prescale, postscale, process_set, *tensors))


def allgather(tensor, name, process_set):
    return _Allgather.apply(tensor, name, process_set)


def broadcast(tensor, root_rank, name, process_set):
    return _Broadcast.apply(tensor, root_rank, name, process_set)


def alltoall(tensor, splits, name, process_set):
    return _Alltoall.apply(tensor, splits, name, process_set)


def reducescatter(tensor, name, op, process_set, prescale, postscale):
    return _Reducescatter.apply(tensor, name, op, process_set, prescale, postscale)


def grouped_reducescatter(tensors, name, op, process_set, prescale, postscale):
    return list(_GroupedReducescatter.apply(name, op, process_set, prescale, postscale, *tensors))
