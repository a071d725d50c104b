# The ordering rules of cadre.torch's GPU staging (cuda_staging.py), one rank, against the
# simulated device of sim_device.py, which runs each stream's queued work only when the check
# lets it and logs what ran. Run by test_gpu_staging.py as a plain process (hvd at size 1);
# hvd_suite.py prints one line per check.
import threading
import time

import torch

import cadre.torch as hvd
from cadre.torch import cuda_staging, mpi_ops
from hvd_suite import Suite
from sim_device import SimDevice, install

hvd.init()
suite = Suite(hvd.rank())
_real_enqueue = mpi_ops._enqueue
_device = [None]  # the device of the running check, for the engine-submission log


def _logged_enqueue(engine, op, name, buf, **kw):
    # Engine submissions land in the same log as the device's work, so orders can be compared.
    if _device[0] is not None:
        with _device[0]._cond:
            _device[0].log.append(("enqueue", None, name))
    return _real_enqueue(engine, op, name, buf, **kw)


mpi_ops._enqueue = _logged_enqueue


def on(prefer=None, host_is_compute=False):
    """A fresh simulated device that every tensor is on. Checks that compute with the results
    on the host (torch ops on CPU tensors run at once) make the host the compute stream."""
    device = SimDevice(prefer=prefer, host_is_compute=host_is_compute)
    install(device)
    _device[0] = device
    return device


def first(device, kind, stream, after=-1):
    """Index of the first `kind` on `stream` that ran after log index `after`."""
    for i, entry in enumerate(device.log):
        if i > after and entry[0] == kind and entry[1] == stream:
            return i
    raise AssertionError("no %s on %s after %d in %s" % (kind, stream, after, device.log))


@suite.check("copy_in_waits_for_the_producer_and_the_engine_for_the_copy_in")
def _():
    dev = on(prefer="side")  # the staging stream runs first whenever it can
    x = torch.zeros(4)
    dev.hold(dev.compute)
    dev.kernel(dev.compute, lambda: x.fill_(3.0), "produce")
    h = hvd.allreduce_async_(x, name="produced", op=hvd.Sum, postscale_factor=2.0)
    time.sleep(0.3)  # the submitter must be waiting for the copy-in, which waits for "produce"
    assert not dev.ran("enqueue"), "submitted before the copy-in: %s" % dev.log
    assert not dev.ran("copy"), "copied before the producer was done: %s" % dev.log
    assert not hvd.poll(h)
    dev.release(dev.compute)
    assert hvd.synchronize(h) is x
    dev.drain()
    assert torch.equal(x, torch.full((4,), 6.0)), x
    produce = dev.index(("kernel", "compute", "produce"))
    ready = first(dev, "record", "compute", produce)
    wait = dev.index(("wait", "side", dev.log[ready][2]))
    copy_in = dev.index(("copy", "side", "device->host"))
    copied = first(dev, "record", "side", copy_in)
    enqueue = dev.index(("enqueue", None, "produced"))
    copy_out = dev.index(("copy", "side", "host->device"))
    assert produce < ready < wait < copy_in < copied < enqueue < copy_out, dev.log


@suite.check("consumer_waits_for_the_copy_out")
def _():
    dev = on(prefer="compute")  # the caller's stream runs first whenever it can
    x = torch.full((3,), 5.0)
    h = hvd.allreduce_async_(x, name="consumed", op=hvd.Sum, postscale_factor=2.0)
    assert hvd.synchronize(h) is x
    seen = []
    dev.kernel(dev.compute, lambda: seen.append(x.clone()), "consume")
    dev.drain()
    assert torch.equal(seen[0], torch.full((3,), 10.0)), "the consumer read %s" % seen[0]
    copy_out = dev.index(("copy", "side", "host->device"))
    done = first(dev, "record", "side", copy_out)
    wait = dev.index(("wait", "compute", dev.log[done][2]))
    assert copy_out < done < wait < dev.index(("kernel", "compute", "consume")), dev.log


@suite.check("results_land_on_the_tensors_device")
def _():
    dev = on(host_is_compute=True)
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    outs = {
        "allgather": hvd.allgather(t, name="g"),
        "alltoall": hvd.alltoall(t, name="a"),
        "reducescatter": hvd.reducescatter(t, name="rs", op=hvd.Sum),
        "allreduce": hvd.allreduce(t, name="r"),
        "broadcast": hvd.broadcast(t, 0, name="b"),
    }
    dev.drain()
    for what, out in outs.items():
        assert torch.equal(out, t), "%s: %s" % (what, out)
        assert dev._where(out) == "device", what
    # Outputs the engine makes are allocated on the device, for the side stream that fills them,
    # and handed to the consumer's stream.
    assert len(dev.ran("alloc", "side")) >= 3, dev.log
    assert dev.ran("keep", "host"), dev.log
    grouped = hvd.grouped_allreduce([t, t * 2], name="grp", op=hvd.Sum)
    dev.drain()
    assert torch.equal(grouped[1], t * 2)


@suite.check("gradients_flow_through_staged_collectives")
def _():
    dev = on(host_is_compute=True)
    w = torch.ones(3, requires_grad=True)
    (hvd.allreduce(w * 2, name="grad.ar") * 3).sum().backward()
    dev.drain()
    assert torch.equal(w.grad, torch.full((3,), 6.0)), w.grad


@suite.check("host_buffers_are_reused_from_the_pool")
def _():
    dev = on(host_is_compute=True)
    for step in range(5):
        ts = [torch.full((1000,), float(step)), torch.full((10,), 1.0)]
        hvd.synchronize(hvd.grouped_allreduce_async_(ts, name="pool.%d" % step))
        dev.drain()
    pool = cuda_staging.stager().pool(dev)
    # Two sizes, each reused once its copy-out completed: a handful of buffers for 10 tensors.
    assert dev.host_buffers <= 4, dev.host_buffers
    assert pool.reuses >= 6, pool.reuses
    bounded = cuda_staging.PinnedPool(dev, limit_bytes=8192)
    blocks = [bounded.acquire(100) for _ in range(3)]
    for b in blocks:
        bounded.release(b)
    assert bounded.free_bytes == 8192, bounded.free_bytes


@suite.check("a_busy_buffer_is_not_reused")
def _():
    dev = on()
    pool = cuda_staging.PinnedPool(dev, limit_bytes=1 << 20)
    block = pool.acquire(64)
    dev.hold(dev.side)
    fence = dev.record(dev.side)
    pool.release(block, fence)
    assert pool.acquire(64) is not block, "reused while its copy was pending"
    dev.release(dev.side)
    dev.drain()
    assert pool.acquire(64) is block


@suite.check("submission_errors_are_raised_by_synchronize")
def _():
    on()
    h = hvd.broadcast_async_(torch.ones(2), root_rank=5, name="bad.root")
    try:
        hvd.synchronize(h)
    except hvd.HorovodInternalError as e:
        assert "root 5" in str(e), e
    else:
        raise AssertionError("a broadcast from rank 5 of 1 succeeded")


@suite.check("a_device_error_during_the_copy_in_fails_the_operation")
def _():
    # A CUDA error surfaces where the host waits for the device: here the submitter thread's
    # wait for the copy-in. The operation must fail with it at synchronize, not wait forever.
    class FailingDevice(SimDevice):
        def synchronize(self, event):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    dev = FailingDevice()
    install(dev)
    _device[0] = dev
    h = hvd.allreduce_async_(torch.ones(3), name="device.error")
    outcome = []

    def wait():
        try:
            hvd.synchronize(h)
            outcome.append("succeeded")
        except RuntimeError as e:
            outcome.append(str(e))

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    waiter.join(60)
    assert not waiter.is_alive(), "synchronize still waits for an operation whose copy-in failed"
    assert outcome == ["CUDA error: an illegal memory access was encountered"], outcome
    on()
    got = hvd.allreduce(torch.ones(2), name="after.device.error", op=hvd.Sum)
    assert torch.equal(got, torch.ones(2)), got


@suite.check("flush_follows_the_queued_submissions")
def _():
    dev = on()
    dev.hold(dev.compute)
    x = torch.ones(2)
    h = hvd.allreduce_async_(x, name="before.flush")

    class Engine:
        def flush(self):
            with dev._cond:
                dev.log.append(("flush", None, None))

    cuda_staging.flush(Engine())
    threading.Timer(0.2, dev.release, (dev.compute,)).start()
    hvd.synchronize(h)
    deadline = time.monotonic() + 30
    while not dev.ran("flush") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert dev.index(("enqueue", None, "before.flush")) < dev.index(("flush", None, None))


suite.run(finish=hvd.shutdown)
