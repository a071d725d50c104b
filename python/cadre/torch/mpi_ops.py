"""Horovod's collective operations on torch tensors, over cadre's engine: the names of
horovod.torch.mpi_ops.

The asynchronous forms, their integer handles (``poll``/``synchronize``) and everything that
talks to the engine are submission.py's; this module adds the synchronous forms, which are
differentiable when their input requires grad (differentiable.py) and apply a ``compression``.
The modules stack without a circle: basics <- adasum <- submission <- differentiable, sparse <-
mpi_ops.

Errors have Horovod 0.28's types: what Horovod's C++ side refuses (mismatches across ranks, a
dead peer, shutdown, a joined rank, bad roots or splits, an unsupported op or dtype for an
operation, a rank outside the process set, a collective before init) raises
HorovodInternalError, a RuntimeError; a tensor type that is not supported, a duplicate pending
name, and both ``average`` and ``op`` given raise ValueError; Adasum where Horovod has no
implementation (process sets, sizes that are not powers of two) raises NotImplementedError.

This module also carries the names of horovod.torch.mpi_ops that scripts import directly (init,
rank, size, ..., ProcessSet, HorovodInternalError, handle_average_backwards_compatibility).
"""
import sys
import types

import torch

from cadre.torch import differentiable, submission
from cadre.torch.basics import (  # noqa: F401  (Horovod's mpi_ops exports these names)
    HorovodInternalError, ProcessSet, add_process_set, ccl_built, cross_rank, cross_size,
    cuda_built, ddl_built, global_process_set, gloo_built, gloo_enabled, is_homogeneous,
    is_initialized, local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported,
    nccl_built, rank, remove_process_set, rocm_built, shutdown, size, start_timeline,
    stop_timeline)
from cadre.torch.compression import Compression  # noqa: F401
from cadre.torch.sparse import sparse_allreduce, sparse_allreduce_async  # noqa: F401
from cadre.torch.startup import init  # noqa: F401
from cadre.torch.submission import (  # noqa: F401
    Adasum, Average, Max, Min, Product, Sum, _auto_name, _check_tensor, _resolve_op,
    allgather_async, allreduce_, allreduce_async, allreduce_async_, alltoall_async, barrier,
    broadcast_async, broadcast_async_, grouped_allgather_async, grouped_allreduce_async,
    grouped_allreduce_async_, grouped_reducescatter_async, handle_average_backwards_compatibility,
    join, poll, reducescatter_async, synchronize)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    compression = compression or Compression.none
    _check_tensor(tensor)  # before compress, which expects a tensor
    compressed, ctx = compression.compress(tensor)
    if differentiable.wanted(compressed):
        out = differentiable.allreduce(compressed, _resolve_op(average, op), name,
                                       prescale_factor, postscale_factor, process_set)
        return compression.decompress(out, ctx)
    out = allreduce_(compressed.clone(memory_format=torch.contiguous_format), average, name, op,
                     prescale_factor, postscale_factor, process_set)
    return compression.decompress(out, ctx)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    compression = compression or Compression.none
    for t in tensors:
        _check_tensor(t)
    pairs = [compression.compress(t) for t in tensors]
    if any(differentiable.wanted(c) for c, _ in pairs):
        outs = differentiable.grouped_allreduce([c for c, _ in pairs], _resolve_op(average, op),
                                                name, prescale_factor, postscale_factor,
                                                process_set)
        return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outs, pairs)]
    outs = synchronize(grouped_allreduce_async_([c.clone() for c, _ in pairs], average, name, op,
                                                prescale_factor, postscale_factor, process_set))
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outs, pairs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's tensor along the first dimension (which may differ by rank)."""
    if differentiable.wanted(tensor):
        return differentiable.allgather(tensor, name, process_set)
    return synchronize(allgather_async(tensor, name, process_set))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    if any(differentiable.wanted(t) for t in tensors):
        name = _auto_name("grouped_allgather", name, process_set)
        return [allgather(t, "%s.%d" % (name, i), process_set) for i, t in enumerate(tensors)]
    return synchronize(grouped_allgather_async(tensors, name, process_set))


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    if differentiable.wanted(tensor):
        return differentiable.broadcast(tensor, root_rank, name, process_set)
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Rank r sends splits[j] rows to rank j (an even split when splits is None). Returns the
    received rows in rank order, and the rows received from each rank when splits is given."""
    if differentiable.wanted(tensor):
        output, received = differentiable.alltoall(tensor, splits, name, process_set)
    else:
        output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
    return output if splits is None else (output, received)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    compression = compression or Compression.none
    _check_tensor(tensor)
    compressed, ctx = compression.compress(tensor)
    if differentiable.wanted(compressed):
        out = differentiable.reducescatter(compressed, name, op, process_set, prescale_factor,
                                           postscale_factor)
    else:
        out = synchronize(reducescatter_async(compressed, name, op, process_set,
                                              prescale_factor, postscale_factor))
    return compression.decompress(out, ctx)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    compression = compression or Compression.none
    pairs = [compression.compress(t) for t in tensors]
    compressed = [c for c, _ in pairs]
    if any(differentiable.wanted(c) for c in compressed):
        outs = differentiable.grouped_reducescatter(compressed, name, op, process_set,
                                                    prescale_factor, postscale_factor)
    else:
        outs = synchronize(grouped_reducescatter_async(compressed, name, op, process_set,
                                                       prescale_factor, postscale_factor))
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outs, pairs)]


class _MpiOpsModule(types.ModuleType):
    """``mpi_ops._enqueue`` is submission's, read or replaced: the one call into the engine, which
    tests wrap to log the submissions (tests/gpu_staging_checks.py) as they did when it lived
    here."""

    @property
    def _enqueue(self):
        return submission._enqueue

    @_enqueue.setter
    def _enqueue(self, fn):
        submission._enqueue = fn


sys.modules[__name__].__class__ = _MpiOpsModule
