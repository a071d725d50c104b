# The rest of horovod.torch's API, run as N ranks by `cadre run` (see test_torch_api.py):
# capability queries before init, the ranks the runner gave, errors (mismatches on every rank,
# duplicate names, bad arguments: torch_job_api_errors.py) with the engine usable afterwards,
# objects, process sets, Adasum, sparse allreduce, SyncBatchNorm, the timeline, and shutdown
# followed by init again.
import contextlib
import json
import os

import torch

import horovod.torch as hvd
import torch_job_api_errors
from hvd_suite import Suite
from torch_job_api_errors import close, engine_still_works, mismatch

# Before init: what the capability queries answer, and what rank() does.
BEFORE_INIT = {"initialized": hvd.is_initialized(), "mpi_built": hvd.mpi_built(),
               "mpi_enabled": hvd.mpi_enabled(), "nccl_built": hvd.nccl_built(),
               "gloo_built": hvd.gloo_built(), "gloo_enabled": hvd.gloo_enabled(),
               "ddl_built": hvd.ddl_built(), "ccl_built": hvd.ccl_built(),
               "cuda_built": hvd.cuda_built(), "rocm_built": hvd.rocm_built(),
               "mpi_threads_supported": hvd.mpi_threads_supported()}
try:
    hvd.rank()
    BEFORE_INIT["rank"] = "no error"
except ValueError as e:
    BEFORE_INIT["rank"] = str(e)
# Horovod refuses a DistributedOptimizer before init (it asks the global process set, which
# raises): one made then would never average, and the ranks would drift apart unnoticed.
_model = torch.nn.Linear(2, 1)
for _what, _ask in [
        ("optimizer", lambda: hvd.DistributedOptimizer(
            torch.optim.SGD(_model.parameters(), lr=0.1),
            named_parameters=_model.named_parameters())),
        ("global_set_included", hvd.global_process_set.included),
        ("global_set_size", hvd.global_process_set.size)]:
    try:
        BEFORE_INIT[_what] = "no error: %r" % (_ask(),)
    except ValueError as e:
        BEFORE_INIT[_what] = str(e)

hvd.init()
r, n = hvd.rank(), hvd.size()
suite = Suite(r)


@suite.check("capabilities_before_init")
def _():
    b = BEFORE_INIT
    assert b["initialized"] is False, b
    for key in ("rank", "optimizer", "global_set_included", "global_set_size"):
        assert "not been initialized" in b[key], (key, b[key])
    # The truth: cadre has neither MPI nor Gloo (nor GPUs here).
    for key in ("mpi_built", "mpi_enabled", "gloo_built", "gloo_enabled", "nccl_built",
                "ddl_built", "ccl_built", "cuda_built", "rocm_built", "mpi_threads_supported"):
        assert b[key] is False, (key, b[key])
    assert hvd.is_initialized()


@suite.check("ranks_match_the_runner")
def _():
    # rank = (LEARNER_ID - 1) * slots + local rank (the learner contract).
    learners, learner = int(os.environ["NUM_LEARNERS"]), int(os.environ["LEARNER_ID"])
    assert hvd.cross_size() == learners and hvd.cross_rank() == learner - 1, (
        hvd.cross_size(), hvd.cross_rank(), learners, learner)
    assert hvd.local_size() * learners == n, (hvd.local_size(), n)
    assert r == hvd.cross_rank() * hvd.local_size() + hvd.local_rank(), (r, hvd.local_rank())
    assert 0 <= hvd.local_rank() < hvd.local_size()
    assert hvd.is_homogeneous()
    everyone = hvd.allgather_object((r, hvd.local_rank(), hvd.cross_rank()))
    slots = hvd.local_size()
    assert everyone == [(k, k % slots, k // slots) for k in range(n)], everyone


@suite.check("horovod_module_paths")
def _():
    # Scripts import Horovod's submodules by name; they are cadre.torch's.
    import horovod
    import horovod.torch.mpi_ops as mpi_ops
    from horovod.torch.compression import Compression
    from horovod.torch.functions import broadcast_parameters
    from horovod.torch.optimizer import DistributedOptimizer
    from horovod.torch.sync_batch_norm import SyncBatchNorm

    import cadre.torch
    assert hvd is cadre.torch and horovod.torch is cadre.torch
    assert mpi_ops.allreduce is hvd.allreduce and Compression is hvd.Compression
    assert broadcast_parameters is hvd.broadcast_parameters
    assert DistributedOptimizer is hvd.DistributedOptimizer
    assert SyncBatchNorm is hvd.SyncBatchNorm
    assert horovod.__version__.startswith("0.28"), horovod.__version__


# Mismatches, duplicate names, bad arguments, other devices: torch_job_api_errors.py.
torch_job_api_errors.add_checks(suite)


# ---------------------------------------------------------------- objects

@suite.check("broadcast_object_and_allgather_object")
def _():
    for root in sorted({0, n - 1}):
        obj = {"from": r, "payload": list(range(r * 100)), "t": torch.full((2,), float(r))}
        got = hvd.broadcast_object(obj, root_rank=root, name="obj%d" % root)
        assert (got is obj) == (r == root)  # the root gets its own object back, as in Horovod
        assert got["from"] == root and got["payload"] == list(range(root * 100)), got["from"]
        assert torch.equal(got["t"], torch.full((2,), float(root)))
        # The usual call: only the root has the object, the others pass None (and no name).
        got = hvd.broadcast_object({"epoch": 7, "big": b"x" * (1 << 20)} if r == root else None,
                                   root_rank=root)
        assert got["epoch"] == 7 and len(got["big"]) == 1 << 20, got.keys()
    # Objects of different pickled sizes, and of different types, on every rank.
    everyone = hvd.allgather_object(("rank", r, "x" * (r * 37)))
    assert everyone == [("rank", k, "x" * (k * 37)) for k in range(n)], everyone
    mixed = hvd.allgather_object(None if r % 2 else {"rank": r})
    assert mixed == [None if k % 2 else {"rank": k} for k in range(n)], mixed


def _local_class():
    class Local:
        def __init__(self, v):
            self.v = v

        def twice(self):
            return 2 * self.v

    return Local


@suite.check("objects.lambdas_local_classes_and_unpicklable_objects")
def _():
    # What Horovod's cloudpickle carries: a lambda with a closure, a class defined in a function.
    root, bias = n - 1, 10
    Local = _local_class()
    got = hvd.broadcast_object({"fn": lambda x: x + bias, "obj": Local(r)} if r == root else None,
                               root_rank=root)
    assert got["fn"](1) == 11 and got["obj"].twice() == 2 * root, got
    everyone = hvd.allgather_object(Local(r))
    assert [o.twice() for o in everyone] == [2 * k for k in range(n)]
    # An object that cannot be pickled fails on every rank, naming its rank, without a stall.
    import pickle
    import threading
    try:
        hvd.broadcast_object(threading.Lock() if r == root else None, root_rank=root)
        raise AssertionError("broadcast of a lock: no error on rank %d" % r)
    except pickle.PicklingError as e:
        assert "rank %d could not pickle its object (TypeError" % root in str(e), str(e)
    try:
        hvd.allgather_object(threading.Lock() if r == 1 else r)
        raise AssertionError("allgather of a lock: no error on rank %d" % r)
    except pickle.PicklingError as e:
        assert "rank 1 could not pickle its object" in str(e), str(e)
        assert "rank 0 could not" not in str(e), str(e)
    engine_still_works("objects")


@contextlib.contextmanager
def saved_as_cuda(index):
    """torch.save records every storage as being on cuda:<index>, as it would for a GPU rank's
    tensors: what a rank without that GPU (every rank here: no CUDA) receives."""
    real = torch.serialization.location_tag
    torch.serialization.location_tag = lambda storage: "cuda:%d" % index
    try:
        yield
    finally:
        torch.serialization.location_tag = real


@suite.check("objects.cuda_tensors_load_on_ranks_without_the_gpu")
def _():
    # Horovod's broadcast_object unpickles as saved: a rank without the GPU fails ("Attempting
    # to deserialize object on a CUDA device"); cadre maps them to a device the rank has.
    root = n - 1
    obj = {"w": torch.arange(6.0).reshape(2, 3) * (r + 1), "step": 3}
    with saved_as_cuda(1) if r == root else contextlib.nullcontext():
        got = hvd.broadcast_object(obj, root_rank=root, name="cuda.obj")
    assert got["step"] == 3
    assert got["w"].device == torch.device("cpu"), got["w"].device
    assert torch.equal(got["w"], torch.arange(6.0).reshape(2, 3) * (root + 1)), got["w"]
    with saved_as_cuda(r):
        everyone = hvd.allgather_object(torch.full((2,), float(r)), name="cuda.all")
    assert [t.device.type for t in everyone] == ["cpu"] * n
    assert [t.tolist() for t in everyone] == [[float(k)] * 2 for k in range(n)], everyone
    # broadcast_optimizer_state sends the state_dict as an object: a GPU root's Adam moments.
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.01 * (r + 1))
    with saved_as_cuda(0) if r == 0 else contextlib.nullcontext():
        hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.param_groups[0]["lr"] == 0.01, opt.param_groups[0]["lr"]
    assert all(v.device.type == "cpu" for st in opt.state.values() for v in st.values()
               if torch.is_tensor(v))


# ---------------------------------------------------------------- process sets

@suite.check("process_sets")
def _():
    evens = hvd.add_process_set([k for k in range(n) if k % 2 == 0])
    odds = hvd.add_process_set(hvd.ProcessSet([k for k in range(n) if k % 2 == 1])) \
        if n > 1 else None
    try:
        mine, other = (evens, odds) if r % 2 == 0 else (odds, evens)
        members = mine.ranks
        assert mine.included() and mine.rank() == members.index(r), (mine, mine.rank())
        assert mine.size() == len(members)
        s = hvd.allreduce(torch.tensor([float(r)]), op=hvd.Sum, name="ps.sum", process_set=mine)
        assert s.item() == sum(members), (s, members)
        g = hvd.allgather(torch.tensor([r]), name="ps.gather", process_set=mine)
        assert g.tolist() == members, (g, members)
        # root_rank is a global rank, also with process sets (Horovod's rule).
        b = hvd.broadcast(torch.tensor([r]), root_rank=members[-1], name="ps.bcast",
                          process_set=mine)
        assert b.item() == members[-1], (b, members)
        obj = hvd.allgather_object(r, process_set=mine)
        assert obj == members, obj
        k, size = mine.rank(), mine.size()
        rows = torch.arange(2.0 * size).reshape(2 * size, 1)
        rs = hvd.reducescatter(rows * (k + 1), op=hvd.Sum, name="ps.rs", process_set=mine)
        assert rs.reshape(-1).tolist() == (rows[2 * k:2 * k + 2] * size * (size + 1) / 2
                                           ).reshape(-1).tolist(), rs
        a2a = hvd.alltoall(torch.arange(size) + 10 * k, name="ps.a2a", process_set=mine)
        assert a2a.tolist() == [10 * j + k for j in range(size)], a2a
        hvd.barrier(process_set=mine)
        # Unnamed operations on the even ranks' set only: the next unnamed global operation
        # must still get the same generated name on every rank (else it never matches).
        if mine is evens:
            got = hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=evens)
            assert got.item() == evens.size(), got
            hvd.barrier(process_set=evens)
        got = hvd.allreduce(torch.ones(1), op=hvd.Sum)
        assert got.item() == n, got
        if other is not None:
            assert not other.included() and other.rank() == -1
            try:
                hvd.allreduce(torch.ones(1), name="ps.not_member", process_set=other)
                raise AssertionError("a collective on a set without this rank was accepted")
            except hvd.HorovodInternalError as e:
                assert "not a member" in str(e), e
        try:
            hvd.add_process_set(list(evens.ranks))
            raise AssertionError("the same ranks registered twice")
        except ValueError:
            pass
        for bad in ([n], [0, 0]):
            try:
                hvd.add_process_set(bad)
                raise AssertionError("process set %s accepted" % bad)
            except ValueError:
                pass
    finally:
        assert hvd.remove_process_set(evens)
        if odds is not None:
            assert hvd.remove_process_set(odds)
    assert not hvd.remove_process_set(evens)
    assert not hvd.remove_process_set(hvd.global_process_set)
    engine_still_works("process_sets")


# ---------------------------------------------------------------- Adasum, sparse

def adasum_tree(vectors):
    """Maleki et al.'s pairwise combination along the binary tree over the ranks, in float64."""
    while len(vectors) > 1:
        pairs = zip(vectors[0::2], vectors[1::2])
        vectors = [(1 - (a @ b) / (2 * (a @ a))) * a + (1 - (a @ b) / (2 * (b @ b))) * b
                   for a, b in pairs]
    return vectors[0]


@suite.check("adasum")
def _():
    # Contributions sharing one component (rank k: e_0 + e_(k+1)): Adasum is neither their sum
    # nor their mean, so it cannot pass for either.
    parts = [torch.eye(n + 1, dtype=torch.float64)[0] + torch.eye(n + 1, dtype=torch.float64)[k + 1]
             for k in range(n)]
    want = adasum_tree(parts)
    assert not torch.allclose(want, sum(parts)) and not torch.allclose(want, sum(parts) / n)
    close(hvd.allreduce(parts[r], op=hvd.Adasum, name="adasum.shared"), want)
    t = parts[r].float()
    assert hvd.allreduce_(t, op=hvd.Adasum, name="adasum.inplace") is t
    close(t, want.float(), 1e-5)
    # Identical contributions are kept as they are (a.b = |a|^2 halves each side).
    same = torch.tensor([[1.0, -2.0], [0.5, 3.0]])
    close(hvd.allreduce(same, op=hvd.Adasum, name="adasum.same"), same, 1e-5)
    # Shapes must agree, not only element counts (Horovod's Adasum is an allreduce); cadre's
    # runs as an allgather of each rank's tensor under a leading 1, which the message shows.
    if n > 1:
        mismatch("adasum.shape",
                 lambda nm: hvd.allreduce(torch.ones((3, 2) if r == 1 else (2, 3)),
                                          op=hvd.Adasum, name=nm),
                 lambda k: "allgather float32[1,%s]" % ("3,2" if k == 1 else "2,3"))
        engine_still_works("adasum.shape")


@suite.check("sparse_allreduce_async")
def _():
    # Rank r holds 1.0 at index r and (r + 1) at the shared index n; overlapping indices add.
    sp = torch.sparse_coo_tensor([[r, n]], [1.0, r + 1.0], (n + 1,))
    total = torch.cat([torch.ones(n), torch.tensor([n * (n + 1) / 2])])
    got = hvd.synchronize(hvd.sparse_allreduce_async(sp, "sparse.sum", op=hvd.Sum))
    assert got.is_sparse
    close(got.to_dense(), total)
    avg = hvd.synchronize(hvd.sparse_allreduce_async(sp, "sparse.avg"))
    close(avg.to_dense(), total / n)


# ---------------------------------------------------------------- SyncBatchNorm

@suite.check("sync_batch_norm")
def _():
    # Matches BatchNorm over the concatenated batch: output, input gradient, weight gradient
    # (summed over ranks, as the DistributedOptimizer would with Sum), running statistics.
    # Rank k holds k + 1 samples: uneven batches weigh by their sizes.
    for shape in ((3, 4), (3, 2, 2)):
        torch.manual_seed(0)
        full = (torch.randn(n * (n + 1) // 2, *shape) * 3 + 1).requires_grad_(True)
        ref = torch.nn.BatchNorm1d(3) if len(shape) == 2 else torch.nn.BatchNorm2d(3)
        ref(full).pow(2).sum().backward()
        rows = slice(r * (r + 1) // 2, r * (r + 1) // 2 + r + 1)
        part = full.detach()[rows].clone().requires_grad_(True)
        sbn = hvd.SyncBatchNorm(3)
        out = sbn(part)
        want = torch.nn.functional.batch_norm(full.detach(), None, None, training=True)
        close(out, want[rows], 1e-5)
        out.pow(2).sum().backward()
        close(part.grad, full.grad[rows], 1e-5)
        wgrad = hvd.allreduce(sbn.weight.grad, op=hvd.Sum, name="sbn.wgrad.%d" % len(shape))
        close(wgrad, ref.weight.grad, 1e-4)
        close(sbn.running_mean, ref.running_mean, 1e-5)
        close(sbn.running_var, ref.running_var, 1e-5)
        sbn.eval()  # inference uses the running statistics, no communication
        close(sbn(part), torch.nn.functional.batch_norm(
            part.detach(), ref.running_mean, ref.running_var, ref.weight, ref.bias), 1e-5)
        # Without running statistics, eval mode normalizes with the whole batch's, as Horovod.
        untracked = hvd.SyncBatchNorm(3, track_running_stats=False).eval()
        with torch.no_grad():
            close(untracked(part.detach()), want[rows], 1e-5)


# ---------------------------------------------------------------- autograd

def grad_of(make_loss, x):
    x = x.clone().requires_grad_(True)
    make_loss(x).backward()
    return x.grad


@suite.check("autograd.allreduce_allgather_broadcast")
def _():
    # Rank r's loss is (r + 1) * sum(output); with L = the ranks' losses together, Horovod's
    # backward passes give these closed forms.
    w = r + 1.0
    tri = n * (n + 1) / 2.0
    x = torch.ones(3)
    close(grad_of(lambda t: (hvd.allreduce(t * w, op=hvd.Sum, name="ad.sum") * w).sum(), x),
          torch.full((3,), w * tri))
    close(grad_of(lambda t: (hvd.allreduce(t, name="ad.avg") * w).sum(), x),
          torch.full((3,), tri / n))
    # Factors whose product is not 1: the gradient is scaled by both, as the forward pass.
    close(grad_of(lambda t: (hvd.allreduce(t, op=hvd.Sum, prescale_factor=3.0,
                                           postscale_factor=0.5, name="ad.scaled") * w).sum(),
                  x), torch.full((3,), tri * 1.5))
    close(grad_of(lambda t: (hvd.allreduce(t, op=hvd.Sum, compression=hvd.Compression.fp16,
                                           name="ad.fp16") * w).sum(), x),
          torch.full((3,), tri), 1e-3)
    g = grad_of(lambda t: sum((o * w * (i + 1)).sum() for i, o in enumerate(
        hvd.grouped_allreduce([t, t * 2], op=hvd.Sum, name="ad.grouped"))), x)
    close(g, torch.full((3,), tri * 5))  # (1 + 2 * 2) * sum of the ranks' weights
    # allgather: gradient averaged over ranks, this rank's rows (rank k has k + 1 rows).
    rows = torch.arange(n * (n + 1) // 2, dtype=torch.float32).unsqueeze(1)
    first = r * (r + 1) // 2
    g = grad_of(lambda t: (hvd.allgather(t, name="ad.gather") * rows * w).sum(),
                torch.ones(r + 1, 1))
    close(g, rows[first:first + r + 1] * tri / n)
    # broadcast: the averaged gradient on the root, zeros elsewhere.
    g = grad_of(lambda t: (hvd.broadcast(t, n - 1, name="ad.bcast") * w).sum(), x)
    close(g, torch.full((3,), tri / n if r == n - 1 else 0.0))
    with torch.no_grad():  # no autograd: the plain path
        assert not hvd.allreduce(x.clone().requires_grad_(True), name="ad.nograd").requires_grad


@suite.check("autograd.alltoall_reducescatter")
def _():
    w = r + 1.0
    # Rank r sends j + 1 rows to rank j; every row that reached rank j gets gradient j + 1.
    splits = [j + 1 for j in range(n)]
    g = grad_of(lambda t: (hvd.alltoall(t, splits=splits, name="ad.a2a")[0] * w).sum(),
                torch.ones(sum(splits), 2))
    close(g, torch.cat([torch.full((j + 1, 2), j + 1.0) for j in range(n)]))
    g = grad_of(lambda t: (hvd.alltoall(t, name="ad.a2a_even") * w).sum(), torch.ones(2 * n))
    close(g, torch.arange(1.0, n + 1).repeat_interleave(2))
    # reducescatter (Horovod's backward): block j of the input gets rank j's gradient, times n
    # for Sum; as it is for Average.
    counts = [(n + 1) // n + (1 if k < (n + 1) % n else 0) for k in range(n)]
    want = torch.cat([torch.full((c, 2), k + 1.0) for k, c in enumerate(counts)])
    g = grad_of(lambda t: (hvd.reducescatter(t, op=hvd.Sum, name="ad.rs") * w).sum(),
                torch.ones(n + 1, 2))
    close(g, want * n)
    g = grad_of(lambda t: (hvd.reducescatter(t, name="ad.rs_avg") * w).sum(), torch.ones(n + 1, 2))
    close(g, want)
    # Min/Max/Product have no gradient: backward says so (on every rank, no collective).
    y = hvd.allreduce(torch.ones(2, requires_grad=True), op=hvd.Max, name="ad.max")
    try:
        y.sum().backward()
        raise AssertionError("backward through allreduce(op=Max) returned a gradient")
    except RuntimeError as e:
        assert "op=Max has no gradient" in str(e), e


# ---------------------------------------------------------------- timeline, re-init

@suite.check("timeline")
def _():
    # Every rank asks; rank 0 writes (Horovod's coordinator), in Horovod's layout: each tensor a
    # process named "<op>.<name>", negotiation and operation as begin/end events.
    path = os.path.join(os.environ["RESULT_DIR"], "timeline-%d.json" % r)
    hvd.start_timeline(path)
    hvd.allreduce(torch.ones(1), name="traced.allreduce")
    hvd.allgather(torch.ones(1), name="traced.allgather")
    hvd.stop_timeline()
    assert os.path.exists(path) == (r == 0), (r, os.path.exists(path))
    if r == 0:
        with open(path) as f:
            events = json.load(f)
        names = {e.get("name") for e in events}
        assert {"NEGOTIATE_ALLREDUCE", "ALLREDUCE", "ALLGATHER"} <= names, sorted(map(str, names))
        tensors = {e["args"]["name"] for e in events
                   if e.get("name") == "process_name" and e["pid"]}
        assert {"allreduce.traced.allreduce", "allgather.traced.allgather"} <= tensors, tensors
    hvd.allreduce(torch.ones(1), name="untraced")
    if r == 0:
        with open(path) as f:
            assert len(json.load(f)) == len(events), "events written after stop_timeline"


@suite.check("shutdown_then_init_again")
def _():
    hvd.shutdown()
    assert not hvd.is_initialized()
    try:
        hvd.allreduce(torch.ones(1), name="after_shutdown")
        raise AssertionError("allreduce after shutdown accepted")
    except hvd.HorovodInternalError:  # a RuntimeError from the collective, as in Horovod
        pass
    try:
        hvd.rank()
        raise AssertionError("rank() after shutdown accepted")
    except ValueError:  # Horovod's basics raise ValueError
        pass
    ends = hvd.ProcessSet([0, n - 1])
    hvd.init(process_sets=[ends])  # Horovod's way to register sets at init
    assert hvd.rank() == r and hvd.size() == n
    engine_still_works("reinit")
    if ends.included():
        s = hvd.allreduce(torch.tensor([r + 1.0]), op=hvd.Sum, name="ends", process_set=ends)
        assert s.item() == n + 1, s
    assert hvd.remove_process_set(ends)


suite.run(finish=hvd.shutdown)
