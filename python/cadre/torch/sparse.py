"""sparse_allreduce_async: Horovod's reduction of sparse (COO) gradients — every rank's
indices and values are allgathered and summed (coalesced) locally, so the result is the sum, or
the average with op=Average, of the ranks' sparse tensors."""
import torch

from cadre.torch import mpi_ops
from cadre.torch.basics import global_process_set


def sparse_allreduce_async(tensor, name, op=mpi_ops.Average, process_set=global_process_set):
    if not tensor.is_sparse:
        raise ValueError("sparse_allreduce_async needs a sparse tensor")
    if op not in (mpi_ops.Average, mpi_ops.Sum):
        raise ValueError("sparse_allreduce_async supports Average and Sum")
    t = tensor.coalesce()
    indices = t.indices().t().contiguous()  # [nnz, ndim]: rows are gathered
    values = t.values().contiguous()
    hi = mpi_ops.allgather_async(indices, name + ".indices", process_set)
    hv = mpi_ops.allgather_async(values, name + ".values", process_set)
    group = mpi_ops._group([hi, hv])
    pending = mpi_ops._handles[group]
    inner = pending.finish
    size = process_set.size()

    def finish(core):
        all_indices, all_values = inner(core)
        out = torch.sparse_coo_tensor(all_indices.t(), all_values, tensor.shape).coalesce()
        if op == mpi_ops.Average:
            out = out / size
        return out

    pending.finish = finish
    return group
