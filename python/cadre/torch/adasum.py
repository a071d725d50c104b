"""The Adasum reduction (Maleki et al., "Scaling Distributed Training with Adaptive Summation"),
as Horovod's op=hvd.Adasum: gradients are combined pairwise along a binary tree over the ranks,
adasum(a, b) = (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b, so that parallel components are
averaged and orthogonal ones added. Here every rank gathers all contributions (allgather) and
evaluates the same tree in float64, so all ranks get bit-identical results; that costs size x the
memory of the tensor, which suits the moderate rank counts this mode runs at.
"""
import torch


def _combine(a, b):
    dot = torch.dot(a, b)
    anorm, bnorm = torch.dot(a, a), torch.dot(b, b)
    acoeff = 1.0 - dot / (2.0 * anorm) if anorm > 0 else 1.0
    bcoeff = 1.0 - dot / (2.0 * bnorm) if bnorm > 0 else 1.0
    return acoeff * a + bcoeff * b


def adasum_reduce(vectors):
    """Reduces a list of 1-d float64 tensors along the binary tree (rank 2i with 2i+1, ...)."""
    level = list(vectors)
    while len(level) > 1:
        nxt = [_combine(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def _adasum_async(tensor, output, name, process_set):
    from cadre.torch import mpi_ops

    if not tensor.is_floating_point():
        raise ValueError("Adasum needs a floating-point tensor, got %s" % tensor.dtype)
    flat = tensor.detach().reshape(1, -1).contiguous()
    gathered_handle = mpi_ops.allgather_async(flat, name, process_set)
    pending = mpi_ops._handles[gathered_handle]
    inner_finish = pending.finish

    def finish(core):
        rows = inner_finish(core).to(torch.float64)
        reduced = adasum_reduce(list(rows.unbind(0)))
        output.copy_(reduced.reshape(tensor.shape).to(output.dtype))
        return output

    pending.finish = finish
    pending.keep = pending.keep + (tensor, output)
    return gathered_handle
