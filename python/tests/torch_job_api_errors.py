# The error checks of torch_job_api.py, in a file of their own: a mismatched collective fails
# on every rank naming each rank's submission, a pending name submitted again is a ValueError,
# bad arguments raise Horovod's error types, tensors on devices other than the CPU and CUDA are
# refused; after each, the engine still works. torch_job_api.py registers them with
# add_checks(suite) after hvd.init(), between its own checks, so the job runs its checks (and
# their collectives) in the same order as when they were one file.
import torch

import horovod.torch as hvd
from hvd_suite import Deferred

r = n = None  # this rank and the size, set by add_checks (after hvd.init())
_CHECKS = Deferred()
check = _CHECKS.check


def add_checks(suite):
    global r, n
    r, n = hvd.rank(), hvd.size()
    _CHECKS.add_to(suite)


def close(got, want, tol=1e-6):
    assert got.shape == want.shape, (got.shape, want.shape)
    assert torch.allclose(got.double(), want.double(), rtol=tol, atol=tol), (got, want)


def engine_still_works(tag):
    got = hvd.allreduce(torch.ones(2) * r, op=hvd.Sum, name="after." + tag)
    close(got, torch.ones(2) * n * (n - 1) / 2)


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


@check("mismatch.shape_fails_every_rank")
def _():
    if n < 2:
        return
    mismatch("mm.shape", lambda nm: hvd.allreduce(torch.ones(3 + (r == 1)), op=hvd.Sum, name=nm),
             lambda k: "allreduce float32[%d] op=sum" % (3 + (k == 1)))
    engine_still_works("shape")


@check("mismatch.dtype_op_root_kind")
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


@check("mismatch.grouped_sizes_fail_every_rank_at_once")
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


@check("duplicate_pending_name_is_ValueError")
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


@check("bad_arguments_raise_horovods_error_types")
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
        ("op past Horovod's enum", lambda: hvd.allreduce(torch.ones(2), op=6, name="bad9")),
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
    for op in ("Median", "Sum", 1.0):  # Horovod's binding takes an int op only
        try:
            hvd.allreduce(torch.ones(2), op=op, name="bad_op")
            raise AssertionError("op=%r was accepted" % (op,))
        except TypeError as e:
            assert "op must be hvd.Average" in str(e), e
    try:
        hvd.grouped_allreduce([torch.ones(1), "x"], name="bad_type_grouped")
        raise AssertionError("a string was accepted as a tensor")
    except TypeError:
        pass
    engine_still_works("bad_arguments")


@check("ops_are_horovods_integers")
def _():
    # Horovod's op constants are the ints of its C++ ReduceOp enum; scripts that pass or store
    # the int get the same op. cadre's print as their names, in messages too.
    ops = [hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product]
    assert ops == [0, 1, 2, 3, 4, 5] and all(isinstance(op, int) for op in ops), ops
    assert [str(op) for op in ops] == ["Average", "Sum", "Adasum", "Min", "Max", "Product"]
    t = torch.full((3,), float(r + 1))
    assert torch.equal(hvd.allreduce(t, op=1, name="int.op.sum"),
                       torch.full((3,), float(n * (n + 1) // 2)))
    assert torch.equal(hvd.allreduce(t, op=4, name="int.op.max"), torch.full((3,), float(n)))
    # They survive pickling as the constants themselves (a config broadcast as an object).
    got = hvd.broadcast_object({"op": hvd.Product}, root_rank=0, name="int.op.obj")
    assert got["op"] is hvd.Product, got
    try:
        hvd.allreduce(torch.ones(1, dtype=torch.bool), op=hvd.Average, name="int.op.bool")
        raise AssertionError("a bool average was accepted")
    except hvd.HorovodInternalError as e:
        assert "op=Average" in str(e), e


@check("tensors_on_other_devices_are_refused_naming_the_device")
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
