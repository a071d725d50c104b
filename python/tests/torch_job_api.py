# The rest of horovod.torch's API, run as N ranks by `cadre run` (see test_torch_api.py):
# capability queries before init, the ranks the runner gave, errors (mismatches on every rank,
# duplicate names, bad arguments) with the engine usable afterwards, objects, process sets,
# Adasum, sparse allreduce, SyncBatchNorm, the timeline, and shutdown followed by init again.
import contextlib
import json
import os

import torch

import horovod.torch as hvd
from hvd_suite import Suite

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


def close(got, want, tol=1e-6):
    assert got.shape == want.shape, (got.shape, want.shape)
    assert torch.allclose(got.double(), want.double(), rtol=tol, atol=tol), (got, want)


def engine_still_works(tag):
    got = hvd.allreduce(torch.ones(2) * r, op=hvd.Sum, name="after." + tag)
    close(got, torch.ones(2) * n * (n - 1) / 2)


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


# ---------------------------------------------------------------- errors

def mismatch(name, make, words_by_rank, expect_error=hvd.HorovodInternalError):
    """Every rank submits `name` with make(); all must fail naming every rank's submission."""
    try:
        make(name)
    except expect_error as e:
        text = str(e)
        assert name in text, text
        for k in range(n):
            words = words_by_rank(k)
            assert ("rank %d: %s" % (k, words)) in text, ("rank %d: %s" % (k, words), text)
        return
    raise AssertionError("%s: no error on rank %d" % (name, r))


@suite.check("mismatch.shape_fails_every_rank")
def _():
    if n < 2:
        return
    mismatch("mm.shape", lambda nm: hvd.allreduce(torch.ones(3 + (r == 1)), op=hvd.Sum, name=nm),
             lambda k: "allreduce float32[%d] op=sum" % (3 + (k == 1)))
    engine_still_works("shape")


@suite.check("mismatch.dtype_op_root_kind")
def _():
    if n < 2:
        return
    mismatch("mm.dtype",
             lambda nm: hvd.allreduce(torch.ones(2, dtype=torch.float64 if r == n - 1 else
                                                 torch.float32), op=hvd.Sum, name=nm),
             lambda k: "allreduce %s[2]" % ("float64" if k == n - 1 else "float32"))
    mismatch("mm.op", lambda nm: hvd.allreduce(torch.ones(2), op=hvd.Max if r == 0 else hvd.Min,
                                               name=nm),
             lambda k: "allreduce float32[2] op=%s" % ("max" if k == 0 else "min"))
    mismatch("mm.root", lambda nm: hvd.broadcast(torch.ones(2), root_rank=r % 2, name=nm),
             lambda k: "broadcast float32[2] root=%d" % (k % 2))
    mismatch("mm.kind",
             lambda nm: (hvd.allgather(torch.ones(1), name=nm) if r == 0 else
                         hvd.allreduce(torch.ones(1), op=hvd.Sum, name=nm)),
             lambda k: "allgather float32[1]" if k == 0 else "allreduce float32[1]")
    mismatch("mm.trailing",
             lambda nm: hvd.allgather(torch.ones(1, 2 + (r == n - 1)), name=nm),
             lambda k: "allgather float32[1,%d]" % (2 + (k == n - 1)))
    engine_still_works("kinds")


@suite.check("mismatch.grouped_sizes_fail_every_rank_at_once")
def _():
    # Odd ranks group 2 tensors, even ranks 3: every member fails on every rank with the sizes
    # of each rank, 'x.2' too (which the odd ranks never submit), instead of stalling until the
    # stall shutdown (40 s here), which would also stop the engine for the checks after this.
    if n < 2:
        return
    count = 2 if r % 2 else 3
    for kind, call in [
            ("allreduce", lambda nm: hvd.grouped_allreduce([torch.ones(2)] * count, op=hvd.Sum,
                                                           name=nm)),
            ("allgather", lambda nm: hvd.grouped_allgather([torch.ones(1, 2)] * count, name=nm)),
            ("reducescatter", lambda nm: hvd.grouped_reducescatter([torch.ones(n, 2)] * count,
                                                                   name=nm))]:
        name = "mm.group." + kind
        try:
            call(name)
            raise AssertionError("%s: no error on rank %d" % (name, r))
        except hvd.HorovodInternalError as e:
            text = str(e)
        assert "stalled" not in text, text
        assert "group '%s' of 3 tensors vs '%s' of 2" % (name, name) in text, text
        for k in range(n):
            assert "rank %d: %s" % (k, kind) in text, (k, text)
            assert "of %d in group '%s')" % (2 if k % 2 else 3, name) in text, (k, text)
        # Again: the failure left nothing pending (no duplicate name, no stall).
        handle = hvd.grouped_allreduce_async([torch.ones(2)] * count, op=hvd.Sum, name=name)
        try:
            hvd.synchronize(handle)
            raise AssertionError("%s again: no error on rank %d" % (name, r))
        except hvd.HorovodInternalError as e:
            assert "of 3 tensors vs" in str(e), str(e)
    # A rank whose group is empty fails the others' members too, at once; every rank's empty
    # group is [].
    for kind, call in [
            ("allreduce", lambda nm, ts: hvd.grouped_allreduce(ts, op=hvd.Sum, name=nm)),
            ("allgather", lambda nm, ts: hvd.grouped_allgather(ts, name=nm)),
            ("reducescatter", lambda nm, ts: hvd.grouped_reducescatter(ts, name=nm))]:
        name = "mm.group.empty." + kind
        try:
            call(name, [] if r == 1 else [torch.ones(n, 2)] * 2)
            raise AssertionError("%s: no error on rank %d" % (name, r))
        except hvd.HorovodInternalError as e:
            text = str(e)
        assert "group '%s' of 2 tensors vs '%s' of 0" % (name, name) in text, text
        assert "rank 1: %s float32[0]" % kind in text, text
        assert "(marker of the empty group '%s')" % name in text, text
        assert call(name + ".all", []) == [], kind
    engine_still_works("grouped")
    # The same names run once the ranks agree.
    got = hvd.grouped_allreduce([torch.ones(2)] * 3, op=hvd.Sum, name="mm.group.allreduce")
    for t in got:
        close(t, torch.full((2,), float(n)))


@suite.check("duplicate_pending_name_is_ValueError")
def _():
    # The other ranks submit "dup" only after the barrier, so it is surely still pending on
    # rank 0 when rank 0 submits it again.
    if n < 2:
        return
    if r == 0:
        h = hvd.allreduce_async(torch.ones(1), op=hvd.Sum, name="dup")
        try:
            hvd.allreduce_async(torch.ones(1), op=hvd.Sum, name="dup")
            raise AssertionError("duplicate name accepted")
        except ValueError as e:
            assert "dup" in str(e), e
        hvd.barrier()
    else:
        hvd.barrier()
        h = hvd.allreduce_async(torch.ones(1), op=hvd.Sum, name="dup")
    close(hvd.synchronize(h), torch.ones(1) * n)


@suite.check("bad_arguments_raise_horovods_error_types")
def _():
    # Every rank makes the same mistake, so nothing reaches the other ranks. Horovod raises
    # ValueError for a tensor type it does not support and for average= with op=, and a
    # RuntimeError (HorovodInternalError) for what its C++ side refuses.
    value_errors = [
        ("complex dtype", lambda: hvd.allreduce(torch.ones(2, dtype=torch.complex64), name="bad1")),
        ("average and op", lambda: hvd.allreduce(torch.ones(2), average=True, op=hvd.Sum,
                                                 name="bad10")),
        ("unknown handle", lambda: hvd.synchronize(10 ** 9)),
    ]
    runtime_errors = [
        ("root out of range", lambda: hvd.broadcast(torch.ones(2), root_rank=n, name="bad3")),
        ("negative root", lambda: hvd.broadcast(torch.ones(2), root_rank=-1, name="bad4")),
        ("splits of the wrong length",
         lambda: hvd.alltoall(torch.ones(n + 1), splits=[1] * (n + 1), name="bad5")),
        ("splits not summing to rows",
         lambda: hvd.alltoall(torch.ones(n), splits=[2] * n, name="bad6")),
        ("negative split",
         lambda: hvd.alltoall(torch.ones(n), splits=[-1] + [1] * (n - 1), name="bad7")),
        ("uneven alltoall without splits",
         lambda: hvd.alltoall(torch.ones(n + 1), name="bad8")),
        ("unknown op", lambda: hvd.allreduce(torch.ones(2), op="Median", name="bad9")),
        ("0-d reducescatter", lambda: hvd.reducescatter(torch.tensor(1.0), name="bad11")),
        ("Adasum on integers", lambda: hvd.allreduce(torch.ones(2, dtype=torch.int32),
                                                    op=hvd.Adasum, name="bad12")),
        ("dense tensor to sparse_allreduce_async",
         lambda: hvd.sparse_allreduce_async(torch.ones(2), "bad13")),
    ]
    for what, call in value_errors:
        try:
            call()
        except ValueError as e:
            assert not isinstance(e, RuntimeError), (what, type(e))
            continue
        raise AssertionError("%s: no ValueError" % what)
    for what, call in runtime_errors:
        try:
            call()
        except RuntimeError as e:
            assert not isinstance(e, ValueError), (what, type(e))
            continue
        raise AssertionError("%s: no RuntimeError" % what)
    try:
        hvd.allreduce([1.0, 2.0], name="bad_type")
        raise AssertionError("a list was accepted as a tensor")
    except TypeError:
        pass
    try:
        hvd.grouped_allreduce([torch.ones(1), "x"], name="bad_type_grouped")
        raise AssertionError("a string was accepted as a tensor")
    except TypeError:
        pass
    engine_still_works("bad_arguments")


@suite.check("tensors_on_other_devices_are_refused_naming_the_device")
def _():
    # The engine reads host memory: a tensor on a device that is neither the CPU nor CUDA (meta
    # here; mps, xpu, ...) is refused before anything is submitted, by every entry point, with
    # Horovod's ValueError naming the device -- never handed to the engine as a host pointer.
    t = torch.ones(4, device="meta")
    model = torch.nn.Linear(3, 2, device="meta")
    calls = [
        ("allreduce_", lambda: hvd.allreduce_(t, name="meta1")),
        ("allreduce", lambda: hvd.allreduce(t, name="meta2")),
        ("allreduce_async_", lambda: hvd.allreduce_async_(t, name="meta3")),
        ("grouped_allreduce", lambda: hvd.grouped_allreduce([torch.ones(2), t], name="meta4")),
        ("broadcast_", lambda: hvd.broadcast_(t, 0, name="meta5")),
        ("allgather", lambda: hvd.allgather(t, name="meta6")),
        ("alltoall", lambda: hvd.alltoall(t, name="meta7")),
        ("reducescatter", lambda: hvd.reducescatter(t, name="meta8")),
        ("Adasum", lambda: hvd.allreduce(t, op=hvd.Adasum, name="meta9")),
        ("broadcast_parameters", lambda: hvd.broadcast_parameters(model.state_dict(), 0)),
    ]
    for what, call in calls:
        try:
            call()
        except ValueError as e:
            assert "on device 'meta' is not supported: cadre.torch works on CPU and CUDA " \
                "tensors" in str(e), (what, str(e))
            continue
        raise AssertionError("%s: a meta tensor was accepted" % what)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    try:
        model(torch.ones(1, 3, device="meta")).sum().backward()
        opt.step()
        raise AssertionError("DistributedOptimizer trained a meta model")
    except ValueError as e:
        assert "on device 'meta' is not supported" in str(e), str(e)
    engine_still_works("other_devices")


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
