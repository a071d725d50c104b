"""A simulated GPU for the tests of cadre.torch's GPU support: it implements the device seam of
cadre/torch/devices.py over CPU tensors, queues every copy, event record and wait on its streams
as a GPU would, runs them later in an order of its choosing, and logs what ran.

Streams hold queued operations; an operation runs once it reaches the head of its stream and,
for a wait, once its event has completed. Nothing runs by itself: any call into the device
(and drain()) runs what it can, choosing among the runnable streams by `prefer` (a stream name
that goes first when it can, else the order of creation), so a test decides which race to
provoke. A stream can be held (hold/release), and `kernel(stream, fn)` queues work of the test's
own (fn runs when the kernel does), e.g. the producer writing a gradient.

With host_is_compute=True the current stream is the host itself, as when PyTorch computes on the
CPU: work queued there runs at once (a wait on it waits until the event completes), and a
background thread plays the GPU for the other streams, in a seeded random order. That is how the
multi-rank jobs use it (install()), since their "device" tensors are CPU tensors computed by
PyTorch on the host.

log: (kind, stream, detail) for every operation that ran: ("copy", "side", "device->host"),
("record", "compute", event id), ("wait", "side", event id), ("kernel", "compute", label),
("alloc", "side", shape), ("keep", ...), ("host_buffer", None, nbytes).
"""
import collections
import contextlib
import random
import threading
import time

import torch

_DEADLINE_S = 60.0


class SimEvent:
    def __init__(self, number):
        self.number, self.done = number, False

    def __repr__(self):
        return "SimEvent(%d%s)" % (self.number, ", done" if self.done else "")


class SimStream:
    def __init__(self, name):
        self.name, self.ops, self.held = name, collections.deque(), False

    def __repr__(self):
        return "SimStream(%s, %d queued%s)" % (self.name, len(self.ops),
                                               ", held" if self.held else "")


class SimDevice:
    def __init__(self, prefer=None, host_is_compute=False, seed=0):
        self.prefer = prefer
        self.host_is_compute = host_is_compute
        self.log = []
        self.host_buffers = 0
        self.failure = None  # an operation that raised: every later call raises it
        self._cond = threading.Condition()
        self._events = 0
        self._host_ptrs = []  # (start, end) of every host buffer handed out
        self.compute = SimStream("host" if host_is_compute else "compute")
        self.side = SimStream("side")
        self._streams = [self.compute, self.side]
        self._local = threading.local()
        self._random = random.Random(seed)
        if host_is_compute:
            threading.Thread(target=self._gpu, name="sim-gpu", daemon=True).start()

    # ---------------------------------------------------------------- the device seam

    def current_stream(self):
        return getattr(self._local, "stream", None) or self.compute

    def side_stream(self):
        return self.side

    def record(self, stream):
        with self._cond:
            self._events += 1
            event = SimEvent(self._events)
            self._queue(stream, ("record", event))
        return event

    def wait(self, stream, event):
        with self._cond:
            self._queue(stream, ("wait", event))

    def copy(self, dst, src, stream):
        with self._cond:
            self._queue(stream, ("copy", dst, src))

    def query(self, event):
        with self._cond:
            self._run_runnable()
            return event.done

    def synchronize(self, event):
        self._until(lambda: event.done, "event %d" % event.number)

    def host_buffer(self, nbytes):
        buf = torch.empty(nbytes, dtype=torch.uint8)
        with self._cond:
            self.host_buffers += 1
            self._host_ptrs.append((buf.data_ptr(), buf.data_ptr() + nbytes))
            self.log.append(("host_buffer", None, nbytes))
        return buf

    def empty(self, shape, dtype, stream):
        with self._cond:
            self.log.append(("alloc", stream.name, tuple(shape)))
        return torch.empty(shape, dtype=dtype)

    def keep(self, tensor, stream):
        with self._cond:
            self.log.append(("keep", stream.name, self._where(tensor)))

    @contextlib.contextmanager
    def use(self, stream):
        previous = getattr(self._local, "stream", None)
        self._local.stream = stream
        try:
            yield
        finally:
            self._local.stream = previous

    # ---------------------------------------------------------------- for the tests

    def kernel(self, stream, fn, label="kernel"):
        """Queues fn() as work of the test's own on `stream`."""
        with self._cond:
            self._queue(stream, ("kernel", fn, label))

    def hold(self, stream):
        with self._cond:
            stream.held = True

    def release(self, stream):
        with self._cond:
            stream.held = False
            self._run_runnable()
            self._cond.notify_all()

    def drain(self):
        """Runs until every stream is empty (fails fast when that cannot happen)."""
        self._until(lambda: not any(s.ops for s in self._streams), "all streams to drain")

    def ran(self, kind, stream=None):
        """The logged operations of one kind (and stream), in the order they ran."""
        with self._cond:
            return [e for e in self.log if e[0] == kind and (stream is None or e[1] == stream)]

    def index(self, entry):
        """Where `entry` is in the log (ValueError when it never ran)."""
        with self._cond:
            return self.log.index(entry)

    # ---------------------------------------------------------------- the simulation

    def _where(self, tensor):
        ptr = tensor.data_ptr()
        return "host" if any(a <= ptr < b for a, b in self._host_ptrs) else "device"

    def _queue(self, stream, op):
        stream.ops.append(op)
        if self.host_is_compute and stream is self.compute:
            # The host runs its own work at once, waiting where it has to.
            while stream.ops and self._runnable(stream):
                self._run(stream)
            deadline = time.monotonic() + _DEADLINE_S
            while stream.ops:
                self._run_runnable(skip=stream)
                if stream.ops and self._runnable(stream):
                    self._run(stream)
                    continue
                if time.monotonic() > deadline:
                    raise RuntimeError("sim device: the host waits forever: %r" % (stream.ops,))
                self._cond.wait(0.01)
        self._cond.notify_all()

    def _runnable(self, stream):
        if not stream.ops or (stream.held and not (self.host_is_compute and
                                                   stream is self.compute)):
            return False
        op = stream.ops[0]
        return op[0] != "wait" or op[1].done

    def _order(self, skip=None):
        streams = [s for s in self._streams if s is not skip]
        if self.host_is_compute:
            self._random.shuffle(streams)
        elif self.prefer is not None:
            streams.sort(key=lambda s: s.name != self.prefer)
        return streams

    def _run(self, stream):
        if self.failure is not None:
            raise self.failure
        op = stream.ops.popleft()
        kind = op[0]
        if kind == "record":
            op[1].done = True
            self.log.append(("record", stream.name, op[1].number))
        elif kind == "wait":
            self.log.append(("wait", stream.name, op[1].number))
        elif kind == "copy":
            _, dst, src = op
            with torch.no_grad():
                dst.copy_(src)
            self.log.append(("copy", stream.name, "%s->%s" % (self._where(src),
                                                               self._where(dst))))
        elif kind == "kernel":
            op[1]()
            self.log.append(("kernel", stream.name, op[2]))
        self._cond.notify_all()

    def _run_runnable(self, skip=None):
        """Runs runnable operations, one at a time, until none is left (under _cond)."""
        progressed = True
        while progressed:
            progressed = False
            for stream in self._order(skip):
                if self._runnable(stream):
                    self._run(stream)
                    progressed = True
                    break

    def _until(self, condition, what):
        deadline = time.monotonic() + _DEADLINE_S
        with self._cond:
            while True:
                self._run_runnable(skip=self.compute if self.host_is_compute else None)
                if condition():
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError("sim device: waited %ds for %s; streams %r"
                                       % (_DEADLINE_S, what, self._streams))
                self._cond.wait(0.01)

    def _gpu(self):
        while self.failure is None:
            with self._cond:
                self._cond.wait(0.002)
                for stream in self._order(skip=self.compute):
                    if self._runnable(stream):
                        try:
                            self._run(stream)
                        except Exception as e:  # noqa: BLE001 -- raised by the next call
                            self.failure = e
                        break


def install(device):
    """Makes every tensor the collectives see a tensor of `device` (the jobs' CPU tensors
    stand for GPU tensors); returns the previous provider."""
    from cadre.torch import devices
    return devices.set_provider(lambda tensor: device)
