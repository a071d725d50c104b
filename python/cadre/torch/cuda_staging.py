"""Collectives on GPU tensors through host memory: how cadre.torch gives the engine, which works
on host buffers, tensors that live on a GPU.

One operation (StagedOp), in order:
1. submit (the caller's thread, never waiting): an event is recorded on the tensor's current
   stream (its producer); the device's side stream waits for it and copies the tensor into a
   page-locked host buffer from a pool; a second event marks the end of that copy.
2. the submitter thread waits for the copy-in event and only then hands the host buffer to the
   engine (Engine.enqueue), in submission order. The training thread goes on meanwhile, so the
   copies and the communication of one gradient overlap the backward pass that produces the
   next.
3. once the engine is done (noticed by the completer thread, or by whoever waits on the
   operation first) the host buffer (or the engine's own output) is copied back on the side
   stream into the tensor or a new tensor on the same device, and a third event marks it.
4. synchronize (the caller's thread): its current stream (the consumer) waits for that event, so
   later work on the GPU sees the result; the host does not wait for the copy.

Host buffers come from a pool per device (PinnedPool): page-locked (so the copies run
asynchronously), kept by size for reuse by the next step's tensors of the same size, a buffer
reused only once the copy that reads it has completed, and at most CADRE_PINNED_POOL_MB (1024)
MiB kept while free. Errors raised while submitting (a duplicate name, an engine refusal) are
stored and raised by synchronize.

Everything GPU-specific goes through a device (devices.py), so the tests run this logic against
a simulated device that checks the order of copies, events and waits.
"""
import atexit
import collections
import os
import queue
import threading

import torch

_PAGE = 4096


def _pool_limit_bytes():
    value = os.environ.get("CADRE_PINNED_POOL_MB", "")
    try:
        return int(float(value) * (1 << 20)) if value else 1 << 30
    except ValueError:
        raise ValueError("CADRE_PINNED_POOL_MB=%r is not a number" % value) from None


class _Block:
    """A page-locked host buffer of the pool; `fence` is an event that must complete before
    the buffer is written again (the copy that reads it)."""

    __slots__ = ("buf", "size", "fence")

    def __init__(self, buf, size):
        self.buf, self.size, self.fence = buf, size, None

    def view(self, nbytes, dtype, shape):
        return self.buf[:nbytes].view(dtype).view(shape)


class PinnedPool:
    """Page-locked host buffers of one device, reused by size (rounded up to 4 KiB).

    acquire() takes a free buffer of the size whose fence has completed, or allocates one;
    release() gives it back with the event after which it may be reused. Free buffers beyond
    `limit_bytes` are dropped, least recently released first. Thread-safe."""

    def __init__(self, device, limit_bytes):
        self._device = device
        self._limit = limit_bytes
        self._free = collections.OrderedDict()  # id(block) -> block, least recent first
        self._free_bytes = 0
        self._lock = threading.Lock()
        self.allocations = 0  # buffers ever allocated (for tests and statistics)
        self.reuses = 0

    @staticmethod
    def size_class(nbytes):
        return max(_PAGE, (nbytes + _PAGE - 1) // _PAGE * _PAGE)

    def acquire(self, nbytes):
        size = self.size_class(nbytes)
        with self._lock:
            for key, block in self._free.items():
                if block.size == size and (block.fence is None or
                                           self._device.query(block.fence)):
                    del self._free[key]
                    self._free_bytes -= size
                    block.fence = None
                    self.reuses += 1
                    return block
            self.allocations += 1
        return _Block(self._device.host_buffer(size), size)

    def release(self, block, fence=None):
        with self._lock:
            block.fence = fence
            self._free[id(block)] = block
            self._free_bytes += block.size
            while self._free_bytes > self._limit and self._free:
                _, dropped = self._free.popitem(last=False)
                self._free_bytes -= dropped.size

    @property
    def free_bytes(self):
        with self._lock:
            return self._free_bytes


class StagedOp:
    """One collective on a device tensor staged through host memory (steps in the module's
    docstring). To mpi_ops it is a handle like the engine's: done(), wait(timeout), check();
    result() then gives the output, on the tensor's device.

    source: the device tensor whose bytes go to the engine. enqueue(host_tensor) -> the
    engine's handle, called on the submitter thread. write_back: the device tensor that gets the
    host buffer back once the engine is done (allreduce, broadcast); else the engine's own
    output becomes a new tensor of `source`'s dtype on the device (allgather, alltoall,
    reducescatter)."""

    def __init__(self, stager, device, source, enqueue, write_back=None):
        self._stager = stager
        self.device = device
        self._enqueue = enqueue
        self._write_back = write_back
        self.dtype = source.dtype
        self.core = None               # the engine's handle, once submitted
        self._lock = threading.Lock()  # the completer and a waiting caller may both finish
        self._submitted = threading.Event()
        self._finished = False
        self._error = None
        self._result = None
        self._temp = None              # write_back is not contiguous: the result lands here
        self.done_event = None         # the copy-out's end, on the side stream
        pool = stager.pool(device)
        side = device.side_stream()
        src = source if source.is_contiguous() else source.contiguous()
        nbytes = src.numel() * src.element_size()
        self._block = pool.acquire(nbytes)
        self._host = self._block.view(nbytes, src.dtype, src.shape)
        ready = device.record(device.current_stream())
        device.wait(side, ready)
        if nbytes:
            device.copy(self._host, src, side)
        device.keep(src, side)
        self.copied = device.record(side)
        self._source = src  # alive until the copy-in is done
        stager.submit(self)

    # Called on the submitter thread.
    def _submit(self):
        copied = False
        try:
            # A CUDA error (an earlier kernel's, say) surfaces here: the operation fails with
            # it, so that nobody waits for a submission that will never come.
            self.device.synchronize(self.copied)
            copied = True
            self._source = None
            self.core = self._enqueue(self._host)
        except BaseException as e:  # noqa: BLE001 -- raised by synchronize() on the caller
            self._source = None
            # A buffer the copy-in may still write is not given back to the pool.
            self._fail(e, reuse_buffer=copied)
        finally:
            self._submitted.set()
        return self.core is not None

    def _fail(self, error, reuse_buffer=True):
        with self._lock:
            if self._finished:
                return
            self._error = error
            self._finished = True
        if reuse_buffer:
            self._stager.pool(self.device).release(self._block)

    def try_finish(self):
        """Starts the copy-out once the engine is done; True when this operation needs nothing
        more from the stager (finished or failed)."""
        core = self.core
        if core is None or not core.done():
            return self._finished
        with self._lock:
            if self._finished:
                return True
            try:
                core.check()
                self._copy_out(core)
            except BaseException as e:  # noqa: BLE001 -- raised by synchronize() on the caller
                self._error = e
                self._stager.pool(self.device).release(self._block)
            self._finished = True
        return True

    def _copy_out(self, core):
        device, pool = self.device, self._stager.pool(self.device)
        side = device.side_stream()
        if self._write_back is not None:
            target = self._write_back
            if not target.is_contiguous():
                target = self._temp = device.empty(target.shape, target.dtype, side)
            if target.numel():
                device.copy(target, self._host, side)
            device.keep(target, side)
            self._result = self._write_back
            self.done_event = device.record(side)
            pool.release(self._block, self.done_event)
            return
        # The engine copied the input already: its buffer is free as soon as it is done.
        pool.release(self._block)
        shape = list(core.output_shape)
        nbytes = core.output_nbytes
        out_block = pool.acquire(nbytes)
        out_host = out_block.view(nbytes, self.dtype, shape)
        core.copy_output(out_host.data_ptr(), nbytes)
        out = device.empty(shape, self.dtype, side)
        if nbytes:
            device.copy(out, out_host, side)
        self._result = out
        self.done_event = device.record(side)
        pool.release(out_block, self.done_event)

    # The handle interface mpi_ops.poll/synchronize use.
    def done(self):
        if not self.try_finish():
            return False
        return self._error is not None or self.device.query(self.done_event)

    def wait(self, timeout_s):
        """True once the result is ready to be used on the caller's stream (the copy-out is
        queued, the host does not wait for it) or the operation failed."""
        if self.core is None and not self._submitted.wait(timeout_s):
            return False
        if self.core is not None and not self.try_finish():
            self.core.wait(timeout_s)
        return self.try_finish()

    def check(self):
        if self._error is not None:
            raise self._error

    def result(self):
        """The output, made safe to use on the caller's current stream (which waits for the
        copy-out); the tensor itself for the in-place forms."""
        device = self.device
        consumer = device.current_stream()
        device.wait(consumer, self.done_event)
        if self._temp is not None:
            with torch.no_grad():
                self._write_back.copy_(self._temp)
            device.keep(self._temp, consumer)
        else:
            device.keep(self._result, consumer)
        return self._result


class Stager:
    """The threads of staging, one pair per process, started on first use: the submitter waits
    for copy-ins and submits in order; the completer starts the copy-outs of finished
    operations while nobody waits for them yet."""

    def __init__(self):
        self._submissions = queue.Queue()
        self._outstanding = []
        self._cond = threading.Condition()
        self._pools = {}
        self._pools_lock = threading.Lock()
        self._started = False
        self._stopping = threading.Event()
        self._threads = []
        self._start_lock = threading.Lock()
        self._queued = 0  # submissions not yet handed to the engine; under _start_lock

    def pool(self, device):
        with self._pools_lock:
            pool = self._pools.get(device)
            if pool is None:
                pool = self._pools[device] = PinnedPool(device, _pool_limit_bytes())
            return pool

    def _start(self):
        with self._start_lock:
            if self._started:
                return
            for target, name in ((self._submit_loop, "cadre-staging-submit"),
                                 (self._complete_loop, "cadre-staging-complete")):
                thread = threading.Thread(target=target, name=name, daemon=True)
                thread.start()
                self._threads.append(thread)
            # Stopped before the interpreter finalizes: a daemon thread it finds inside a C++
            # call that released the GIL would take the process down on its way out.
            atexit.register(self.stop)
            self._started = True

    def submit(self, op):
        self._start()
        with self._start_lock:
            self._queued += 1
        self._submissions.put(op)

    def flush(self, engine):
        """engine.flush() once every submission queued so far reached the engine: the end of a
        backward pass must not be announced before its last gradients."""
        with self._start_lock:
            if self._queued:
                self._queued += 1
                self._submissions.put(engine.flush)
                return
        engine.flush()

    def stop(self):
        """Ends the threads (at exit); operations still pending are not finished."""
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=5)

    def _submit_loop(self):
        while not self._stopping.is_set():
            try:
                item = self._submissions.get(timeout=0.1)
            except queue.Empty:
                continue
            try:
                if isinstance(item, StagedOp):
                    if item._submit():
                        with self._cond:
                            self._outstanding.append(item)
                            self._cond.notify()
                else:
                    item()
            except BaseException:  # noqa: BLE001 -- a flush of a shut-down engine; go on
                pass
            with self._start_lock:
                self._queued -= 1

    def _complete_loop(self):
        while not self._stopping.is_set():
            with self._cond:
                if not self._outstanding:
                    self._cond.wait(0.1)
                    continue
                ops = list(self._outstanding)
            # The oldest is the likeliest to finish first; the others are checked after it.
            if not ops[0].try_finish():
                ops[0].core.wait(0.002)
            finished = {id(op) for op in ops if op.try_finish()}
            if finished:
                with self._cond:
                    self._outstanding = [op for op in self._outstanding
                                         if id(op) not in finished]


_stager = Stager()


def stager():
    return _stager


def submit(device, source, enqueue, write_back=None):
    """Stages one operation (see StagedOp) on the process's stager; returns the StagedOp."""
    return StagedOp(_stager, device, source, enqueue, write_back)


def flush(engine):
    _stager.flush(engine)


def _by_device(pairs, device_of_pair):
    groups = {}
    for pair in pairs:
        groups.setdefault(device_of_pair(pair), []).append(pair)
    return groups.items()


def to_host(pairs):
    """Copies each (device tensor, host tensor, device) triple to the host and waits for the copies, which
    start once the device tensor's producer (the current stream) is done: the blocking form,
    for callers whose next step needs the bytes on the host at once (parameter-server mode)."""
    for device, items in _by_device(pairs, lambda pair: pair[2]):
        side = device.side_stream()
        device.wait(side, device.record(device.current_stream()))
        for src, dst, _ in items:
            device.copy(dst, src, side)
            device.keep(src, side)
        device.synchronize(device.record(side))


def from_host(pairs):
    """Copies each (host tensor, device tensor, device) triple to its device, after the work
    already queued on the current stream (which may still read the tensor) and before the work
    queued on it next; the host does not wait."""
    for device, items in _by_device(pairs, lambda pair: pair[2]):
        side = device.side_stream()
        consumer = device.current_stream()
        device.wait(side, device.record(consumer))
        for src, dst, _ in items:
            device.copy(dst, src, side)
            device.keep(dst, side)
        device.wait(consumer, device.record(side))
