"""hvd.init(): the engines (basics.py), then the GPU path of CUDA allreduces (nccl_path.py), which
every rank decides together through one allgather of objects (objects.py), then the static
process sets. Above basics and objects, so that neither imports the other late."""
import os
import socket

from cadre.torch import basics, nccl_path
from cadre.torch.basics import global_process_set
from cadre.torch.objects import allgather_object


def init(comm=None, process_sets=None):
    """Starts this process's engine. Idempotent. ``comm`` (an MPI communicator) is not
    supported: cadre's ranks come from the launcher's environment.

    ``process_sets``: Horovod's static process sets, a list of ProcessSet objects (or rank
    lists) registered now, in order, with ids 1, 2, ... (a set of every rank is the global set,
    id 0); or "dynamic" (sets added later with add_process_set, which cadre always allows)."""
    if not basics._start(comm, process_sets):
        return
    _setup_gpu_path()
    basics._add_initial_process_sets(process_sets)


def _setup_gpu_path():
    """Decides, with the other ranks, whether CUDA allreduces take the NCCL path
    (nccl_path.py); a refusal CADRE_NCCL=1 asked to raise stops this rank's engine."""
    s = basics._state()
    try:
        nccl_path.setup(global_process_set._engine, s.rank, s.size, s.local_rank, s.local_size,
                        os.environ.get("CADRE_HOST") or socket.gethostname(), basics._timeout_s(),
                        allgather_object)
    except BaseException:
        basics.shutdown()
        raise
