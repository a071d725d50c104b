"""Process-level state of Horovod mode: the engines (init() itself is startup.py), shutdown,
ranks, process sets, capability queries.

Ranks come from the learner contract that ``cadre run`` sets (CADRE_RANK, CADRE_SIZE, ...,
CADRE_STORE, CADRE_JOB_TOKEN); Horovod's HOROVOD_* names are accepted too. A script started by
hand, without a launcher, is one rank of size 1 (as Horovod without mpirun).

Each process set owns one engine (a C++ object with its own background thread); the global set
is process set 0. Process sets are added in the same order on every rank, as in Horovod.
"""
import atexit
import os
import threading

from cadre import _core
from cadre.torch import devices, nccl_path


class HorovodInternalError(RuntimeError):
    """A collective failed: a peer died or stalled, ranks disagreed, or the engine shut down.

    The message names the rank at fault. After a peer failure the engine is broken; call
    ``shutdown()`` and ``init()`` again (elastic users) or exit.
    """


class HostsUpdatedInterrupt(RuntimeError):
    """hvd.elastic: the set of hosts changed. ``hvd.elastic.run`` resets and calls the training
    function again, without rolling the state back; ``skip_sync`` skips the sync from rank 0
    (Horovod sets it when hosts were only added)."""

    def __init__(self, skip_sync=False):
        super().__init__(skip_sync)
        self.skip_sync = skip_sync


def _env_int(names, default=None):
    return _env_int_named(names, (None, default))[1]


def _env_int_named(names, default=(None, None)):
    """(the first of `names` that is set, its value as an int), or `default`."""
    for name in names:
        value = os.environ.get(name)
        if value not in (None, ""):
            try:
                return name, int(value)
            except ValueError:
                raise ValueError("%s=%r is not an integer" % (name, value)) from None
    return default


# What MPI launchers (mpirun, mpiexec, horovodrun's MPI mode) tell each process they start.
_MPI_SIZES = ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MV2_COMM_WORLD_SIZE"]


def _check_launcher():
    """Refuses a process that another launcher started as one of several without cadre's
    contract (`mpirun -np 4 python3 train.py`): each would otherwise train alone as a job of
    size 1, silently."""
    name, size = _env_int_named(_MPI_SIZES)
    if size is not None and size > 1:
        raise ValueError("this process is one of %d started by an MPI launcher (%s=%d), not by "
                         "`cadre run`: cadre does not join MPI jobs. Start the script with "
                         "`cadre run -n LEARNERS --framework pytorch-horovod -- python3 ...` "
                         "(or `cadre run --backend mpi` on an MPI cluster)" % (size, name, size))


class ProcessSet:
    """A subset of the job's ranks that runs collectives among themselves (Horovod's API).

    Create with the global ranks it holds, then register it on every rank (members and
    non-members alike, in the same order): at ``hvd.init(process_sets=[...])`` or later with
    ``hvd.add_process_set``. Collectives on a set still name roots by global rank.
    """

    def __init__(self, ranks_or_comm=None):
        if ranks_or_comm is not None and not hasattr(ranks_or_comm, "__iter__"):
            raise ValueError("ProcessSet should be initialized with a list of process ranks "
                             "(cadre has no MPI communicators)")
        self.ranks = None if ranks_or_comm is None else sorted(int(r) for r in ranks_or_comm)
        self.process_set_id = None
        self._engine = None

    def _registered(self):
        """Whether the set is registered. The global set is Horovod's process set 0 from the
        start, so before init() (or after shutdown()) asking it raises as Horovod does."""
        if self is global_process_set:
            _require_init()
        return self.process_set_id is not None

    def size(self):
        """The number of ranks, or None while the set is not registered (as Horovod)."""
        if not self._registered():
            return None
        return len(self.ranks)

    def rank(self):
        """This process's rank within the set (-1 when it is not a member), or None while the
        set is not registered. Roots of collectives are global ranks, not this one."""
        if not self._registered():
            return None
        me = _state().rank
        return self.ranks.index(me) if me in self.ranks else -1

    def included(self):
        """Whether this process is a member, or None while the set is not registered."""
        if not self._registered():
            return None
        return _state().rank in self.ranks

    def engine(self):
        """The set's engine; raises ValueError on a rank that is not a member."""
        if self.process_set_id is None:
            raise ValueError("process set %r is not registered (add_process_set)" % (self.ranks,))
        if self._engine is None:
            raise ValueError("rank %d is not a member of process set %d (ranks %s)"
                             % (_state().rank, self.process_set_id, self.ranks))
        return self._engine

    def __repr__(self):
        return "ProcessSet(process_set_id=%r, ranks=%r)" % (self.process_set_id, self.ranks)


global_process_set = ProcessSet()


class _State:
    def __init__(self):
        self.lock = threading.RLock()
        self.initialized = False
        self.rank = 0
        self.size = 1
        self.local_rank = 0
        self.local_size = 1
        self.cross_rank = 0
        self.cross_size = 1
        self.process_sets = {}
        self.global_aliases = []  # sets of every rank given to init(): the global set's engine
        self.next_set_id = 1
        self.generation = 0


_STATE = _State()


def _state():
    return _STATE


def _backend_for(size):
    if size == 1:
        return "local"
    return os.environ.get("CADRE_ENGINE_BACKEND", "auto")


# A year: past that a timeout is a mistake (and past the engine's clock range, undefined).
_MAX_TIMEOUT_S = 365 * 86400


def _timeout_s():
    """CADRE_TIMEOUT_SECONDS (else HOROVOD_GLOO_TIMEOUT_SECONDS): seconds above 0. Zero, a
    negative number, nan or inf would make every wait time out at once (a confusing "cannot
    reach the store") or never, so they are refused naming the variable."""
    name = "CADRE_TIMEOUT_SECONDS"
    value = os.environ.get(name)
    if not value:
        name = "HOROVOD_GLOO_TIMEOUT_SECONDS"
        value = os.environ.get(name)
    if not value:
        return 60.0
    try:
        seconds = float(value)
    except ValueError:
        seconds = None
    if seconds is None or not 0 < seconds <= _MAX_TIMEOUT_S:
        raise ValueError("%s=%r is not a number of seconds above 0 (at most %d)"
                         % (name, value, _MAX_TIMEOUT_S))
    return seconds


def _make_engine(rank, size, prefix, env_timeline):
    """env_timeline: whether HOROVOD_TIMELINE applies (the global set's engine only: every
    engine's rank 0 would write that one file)."""
    try:
        return _core.Engine(_backend_for(size), rank, size, _timeout_s(), prefix, env_timeline)
    except _core.CadreError as e:
        raise HorovodInternalError("cadre: could not start the engine for rank %d of %d: %s"
                                   % (rank, size, e)) from e


def _start(comm=None, process_sets=None):
    """The first half of init() (startup.py): checks the arguments and starts the global set's
    engine. Returns False when this process was initialized already (init() then does
    nothing)."""
    if process_sets is not None and process_sets != "dynamic" and \
            not isinstance(process_sets, (list, tuple)):
        raise ValueError("process_sets must be a list of ProcessSet objects or \"dynamic\", "
                         "not %r" % (process_sets,))
    if comm is not None:
        raise ValueError("cadre.torch.init(comm=...) is not supported: ranks come from `cadre run`")
    s = _STATE
    with s.lock:
        if s.initialized:
            return False
        size_name, size = _env_int_named(["CADRE_SIZE", "HOROVOD_SIZE"], (None, 1))
        if size_name is None:
            _check_launcher()
        rank = _env_int(["CADRE_RANK", "HOROVOD_RANK"], 0)
        if not 0 <= rank < size:
            raise ValueError("rank %d is out of range for size %d (CADRE_RANK/CADRE_SIZE)"
                             % (rank, size))
        s.rank, s.size = rank, size
        s.local_rank = _env_int(["CADRE_LOCAL_RANK", "HOROVOD_LOCAL_RANK"], rank)
        s.local_size = _env_int(["CADRE_LOCAL_SIZE", "HOROVOD_LOCAL_SIZE"], size)
        s.cross_rank = _env_int(["CADRE_CROSS_RANK", "HOROVOD_CROSS_RANK"], 0)
        s.cross_size = _env_int(["CADRE_CROSS_SIZE", "HOROVOD_CROSS_SIZE"], 1)
        if size > 1 and not os.environ.get("CADRE_STORE"):
            # HOROVOD_SIZE alone: horovodrun (Gloo) or a hand-made environment.
            raise ValueError("%s=%d but CADRE_STORE is not set: start the job with "
                             "`cadre run`" % (size_name, size))
        s.generation += 1
        global_process_set.ranks = list(range(size))
        global_process_set.process_set_id = 0
        global_process_set._engine = _make_engine(rank, size, "hvd.%d.0" % s.generation,
                                                  env_timeline=True)
        s.process_sets = {0: global_process_set}
        s.next_set_id = 1
        s.initialized = True
    return True


def _add_initial_process_sets(process_sets):
    """The last step of init(): Horovod's static process sets, registered in order."""
    s = _STATE
    if isinstance(process_sets, (list, tuple)):
        for ps in process_sets:
            ps = ps if isinstance(ps, ProcessSet) else ProcessSet(ps)
            if ps.ranks == global_process_set.ranks:
                # Horovod maps a set of every rank to the global set.
                ps.process_set_id, ps._engine = 0, global_process_set._engine
                s.global_aliases.append(ps)
            elif ps.process_set_id is None:
                add_process_set(ps)


def shutdown():
    """Stops every engine of this process; pending operations on every rank fail."""
    s = _STATE
    with s.lock:
        if not s.initialized:
            return
        nccl_path.forget(global_process_set._engine)
        for ps in s.process_sets.values():
            if ps._engine is not None:
                ps._engine.shutdown()
                ps._engine = None
            ps.process_set_id = None
        for ps in s.global_aliases:
            ps.process_set_id, ps._engine = None, None
        s.process_sets = {}
        s.global_aliases = []
        s.initialized = False


atexit.register(shutdown)


def is_initialized():
    return _STATE.initialized


def _require_init():
    if not _STATE.initialized:
        raise ValueError("Horovod has not been initialized; use hvd.init().")


def size():
    _require_init()
    return _STATE.size


def rank():
    _require_init()
    return _STATE.rank


def local_size():
    _require_init()
    return _STATE.local_size


def local_rank():
    _require_init()
    return _STATE.local_rank


def cross_size():
    _require_init()
    return _STATE.cross_size


def cross_rank():
    _require_init()
    return _STATE.cross_rank


def is_homogeneous():
    _require_init()
    return _STATE.local_size * _STATE.cross_size == _STATE.size


def add_process_set(process_set):
    """Registers a process set (a ProcessSet or a list of ranks) on this rank; every rank must
    call it, in the same order. Returns the ProcessSet."""
    _require_init()
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    s = _STATE
    with s.lock:
        if ps.process_set_id is not None:
            raise ValueError("%r is already registered" % (ps,))
        if not ps.ranks or any(r < 0 or r >= s.size for r in ps.ranks) or \
                len(set(ps.ranks)) != len(ps.ranks):
            raise ValueError("process set ranks %r must be distinct ranks in [0, %d)"
                             % (ps.ranks, s.size))
        for other in s.process_sets.values():
            if other.ranks == ps.ranks and other.process_set_id != 0:
                raise ValueError("a process set with ranks %s already exists" % ps.ranks)
        ps.process_set_id = s.next_set_id
        s.next_set_id += 1
        if s.rank in ps.ranks:
            ps._engine = _make_engine(ps.ranks.index(s.rank), len(ps.ranks),
                                      "hvd.%d.%d" % (s.generation, ps.process_set_id),
                                      env_timeline=False)
        s.process_sets[ps.process_set_id] = ps
    return ps


def remove_process_set(process_set):
    """Unregisters a process set (every rank, same order). Returns True when it was registered."""
    s = _STATE
    with s.lock:
        if process_set.process_set_id in (None, 0):
            return False
        s.process_sets.pop(process_set.process_set_id, None)
        if process_set._engine is not None:
            process_set._engine.shutdown()
            process_set._engine = None
        process_set.process_set_id = None
        return True


def start_timeline(file_path, mark_cycles=False):
    """Writes Horovod's timeline (Chrome-trace JSON in Horovod's layout) to file_path. Call it
    on every rank; rank 0 writes, as Horovod's coordinator does."""
    _require_init()
    global_process_set.engine().start_timeline(str(file_path), bool(mark_cycles))


def stop_timeline():
    _require_init()
    global_process_set.engine().stop_timeline()


# Capability queries, callable before init(), answering for this build.
def mpi_built():
    return False


def mpi_enabled():
    return False


def mpi_threads_supported():
    return False


def gloo_built():
    # The truth: cadre has no Gloo (nor MPI); its own TCP/shared-memory core does the work.
    # Horovod scripts that branch on gloo_enabled()/mpi_enabled() take their "neither" path
    # (see docs/horovod.md).
    return False


def gloo_enabled():
    return False


def nccl_built():
    """Horovod's answer: NCCL_VERSION_CODE when allreduces of CUDA tensors can go through NCCL
    (the NCCL of the installed PyTorch, nccl_path.py); else False, which equals Horovod's 0."""
    return devices.nccl_version_code() or False


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    """True when the installed PyTorch has CUDA: collectives then take CUDA tensors (staged
    through host memory, or NCCL's allreduce, see docs/gpu.md)."""
    return devices.cuda_built()


def rocm_built():
    return False
