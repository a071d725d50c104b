"""cadre.torch: Horovod's PyTorch API (``import cadre.torch as hvd``) on cadre's engine.

``import horovod.torch as hvd`` gives this same module through the ``horovod`` shim package, so
Horovod scripts run unchanged under ``cadre run --framework pytorch-horovod``.
"""
from cadre.torch.basics import (  # noqa: F401
    HorovodInternalError, HostsUpdatedInterrupt, ProcessSet, add_process_set, ccl_built,
    cross_rank, cross_size, cuda_built, ddl_built, global_process_set, gloo_built, gloo_enabled,
    is_homogeneous, is_initialized, local_rank, local_size, mpi_built, mpi_enabled,
    mpi_threads_supported, nccl_built, rank, remove_process_set, rocm_built, shutdown, size,
    start_timeline, stop_timeline)
from cadre.torch.compression import Compression  # noqa: F401
from cadre.torch.functions import (  # noqa: F401
    allgather_object, broadcast_object, broadcast_optimizer_state, broadcast_parameters)
from cadre.torch.mpi_ops import (  # noqa: F401
    Adasum, Average, Max, Min, Product, Sum, allgather, allgather_async, allreduce, allreduce_,
    allreduce_async, allreduce_async_, alltoall, alltoall_async, barrier, broadcast, broadcast_,
    broadcast_async, broadcast_async_, grouped_allgather, grouped_allgather_async,
    grouped_allreduce, grouped_allreduce_, grouped_allreduce_async, grouped_allreduce_async_,
    grouped_reducescatter, grouped_reducescatter_async, join, poll, reducescatter,
    reducescatter_async, synchronize)
from cadre.torch.optimizer import DistributedOptimizer  # noqa: F401
from cadre.torch.sparse import sparse_allreduce, sparse_allreduce_async  # noqa: F401
from cadre.torch.startup import init  # noqa: F401
from cadre.torch.sync_batch_norm import SyncBatchNorm  # noqa: F401
from cadre.torch import elastic  # noqa: F401,E402
