"""Horovod's reduction of sparse (COO) tensors: every rank's indices and values are allgathered
(as ``<name>.indices`` and ``<name>.values``) and form one sparse tensor holding every rank's
entries, divided by the set's size for op=Average. Entries at the same index are not summed
until the caller coalesces (or uses the tensor densely), as in Horovod.

``sparse_allreduce_async`` returns Horovod's kind of handle: a callable that waits and returns
the result; ``hvd.synchronize`` and ``hvd.poll`` take it too.
"""
import torch

from cadre.torch import submission as ops
from cadre.torch.basics import HorovodInternalError, global_process_set


class SparseHandle:
    """The two allgathers of one sparse allreduce; calling it waits and returns the result."""

    def __init__(self, tensor, op, process_set, indices_handle, values_handle):
        self._tensor = tensor
        self._op = op
        self._size = process_set.size()
        self._handles = (indices_handle, values_handle)
        self._result = None

    def poll(self):
        return self._result is not None or all(ops.poll(h) for h in self._handles)

    def __call__(self):
        if self._result is None:
            indices_handle, values_handle = self._handles
            values = ops.synchronize(values_handle)
            indices = ops.synchronize(indices_handle)
            if self._op == ops.Average:
                values = values / self._size
            t = self._tensor
            if indices.dim() == 0 or values.dim() == 0:
                self._result = torch.Tensor().type_as(t).resize_as_(t)
            else:
                self._result = torch.sparse_coo_tensor(indices.t(), values, t.shape)
        return self._result


def sparse_allreduce_async(tensor, name, op=ops.Average, process_set=global_process_set):
    if not isinstance(tensor, torch.Tensor) or not tensor.is_sparse:
        # RuntimeError, as torch raises it for Horovod (a dense tensor has no _indices()).
        raise RuntimeError("sparse_allreduce_async takes a sparse (COO) tensor, got %s"
                           % (tensor.type() if isinstance(tensor, torch.Tensor)
                              else type(tensor).__name__))
    if op not in (ops.Average, ops.Sum):
        raise HorovodInternalError("sparse allreduce supports Average and Sum, not %r" % (op,))
    name = ops._auto_name("sparse_allreduce", name, process_set)
    # Allgather concatenates along the first dimension: the indices travel as [nnz, ndim].
    indices = tensor._indices().t().contiguous()
    values = tensor._values().contiguous()
    indices_handle = ops.allgather_async(indices, "%s.indices" % name, process_set)
    values_handle = ops.allgather_async(values, "%s.values" % name, process_set)
    return SparseHandle(tensor, op, process_set, indices_handle, values_handle)


def sparse_allreduce(tensor, name=None, op=ops.Average, process_set=global_process_set):
    """The synchronous form of sparse_allreduce_async."""
    return sparse_allreduce_async(tensor, name, op, process_set)()
