"""The NCCL path: allreduces of CUDA tensors that never leave the GPU, through the NCCL in the
user's own PyTorch, with cadre's engine still deciding what runs and when.

Each such allreduce is submitted to the engine as an external request (Request::external in
engine/request.h) with the tensor's real name, shape, dtype, op and scale factors: names are
matched across ranks, mismatches fail every rank with each rank's description, stalls are
reported and the timeline is written as for any collective. The engine moves no data; it numbers
the external operations as it completes them, the same on every rank, and one dispatcher thread
per process runs the NCCL allreduces in that order on the device's side stream, after the
tensor's producer (an event) and before its consumer (another). NCCL itself is reached through
a torch.distributed ProcessGroupNCCL that cadre makes for itself (the user's own default group,
if any, is untouched) on a torch TCPStore served by rank 0, whose address travels through the
engine at init().

Chosen, per job, at init() when every rank's PyTorch has CUDA and NCCL, CADRE_NCCL is not 0,
and no two ranks of a host would share a GPU (NCCL refuses that: slots sharing a GPU stage
through host memory instead, with one warning). Then it serves the global process set's
allreduces of float16, bfloat16, float32 and float64 tensors on the rank's own GPU
(cuda:local_rank % device count, which `cadre run` makes the slot's own GPU) with op Sum,
Average, Min, Max or Product; everything else is staged through host memory (cuda_staging.py).
CADRE_NCCL=1 makes init() fail, saying why, when the path cannot be used.
"""
import atexit
import datetime
import os
import socket
import sys
import threading

import torch

from cadre.torch import devices

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# The engine's reduce-op codes (comm/types.h) -> torch.distributed.ReduceOp names.
_TORCH_OPS = {0: "SUM", 1: "MIN", 2: "MAX", 3: "PRODUCT"}


def _mode():
    value = os.environ.get("CADRE_NCCL", "auto").strip().lower()
    if value in ("", "auto"):
        return "auto"
    if value in ("0", "off", "false", "no"):
        return "off"
    if value in ("1", "on", "true", "yes"):
        return "on"
    raise ValueError('CADRE_NCCL="%s": use auto, 0 or 1' % value)


class _Backend:
    """How the path reaches a GPU and NCCL: torch.cuda and ProcessGroupNCCL here; the tests put
    a simulated device and a Gloo group in their place (use_stand_in)."""

    def available(self):
        return torch.cuda.is_available() and devices.nccl_version_code() > 0

    def local_device(self, local_rank):
        """(the device this rank's tensors are expected on, its identity on the machine)."""
        index = local_rank % torch.cuda.device_count()
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        ids = [v.strip() for v in visible.split(",") if v.strip()] if visible else []
        physical = ids[index] if index < len(ids) else str(index)
        return devices.device_of(torch.empty(0, device=torch.device("cuda", index))), physical

    def make_group(self, store, rank, size, timeout_s):
        from torch.distributed import ProcessGroupNCCL
        timeout = datetime.timedelta(seconds=timeout_s)
        try:  # PyTorch 2: (store, rank, size, options)
            options = ProcessGroupNCCL.Options()
            options._timeout = timeout
            return ProcessGroupNCCL(store, rank, size, options)
        except (TypeError, AttributeError):  # older: (store, rank, size, timeout)
            return ProcessGroupNCCL(store, rank, size, timeout)


_backend = _Backend()


def use_stand_in(backend):
    """Tests: replaces the GPU and NCCL with `backend` (available(), local_device(local_rank),
    make_group(store, rank, size, timeout_s)); returns the previous one."""
    global _backend
    previous, _backend = _backend, backend
    return previous


class NcclOp:
    """One allreduce on the NCCL path. To mpi_ops it is a handle like the engine's (done,
    wait, check); result() gives the reduced tensor, safe to use on the caller's stream."""

    def __init__(self, path, core, device, buf, output, reduce_op, prescale, postscale, ready):
        self.path, self.core, self.device = path, core, device
        self.buf, self.output = buf, output
        self.reduce_op, self.prescale, self.postscale = reduce_op, prescale, postscale
        self.ready = ready            # the producer's event
        self.done_event = None        # the NCCL allreduce's end, on the side stream
        self.error = None
        self.launched = threading.Event()  # set once launched or failed

    def fail(self, error):
        self.error = error
        self.launched.set()

    def done(self):
        return self.launched.is_set() and (self.error is not None or
                                           self.device.query(self.done_event))

    def wait(self, timeout_s):
        if not self.core.done():
            self.core.wait(timeout_s)
        return self.launched.wait(timeout_s if self.core.done() else 0)

    def check(self):
        if self.error is not None:
            raise self.error

    def result(self):
        consumer = self.device.current_stream()
        self.device.wait(consumer, self.done_event)
        self.device.keep(self.buf, consumer)
        if self.buf is not self.output:
            with torch.no_grad():
                self.output.copy_(self.buf)
        return self.output


class NcclPath:
    """The path of one process set (the global one): its group, its dispatcher."""

    def __init__(self, rank, size, device, store_address, timeout_s):
        self.rank, self.size, self.device = rank, size, device
        self._store_address = store_address
        self._server = None           # rank 0's TCPStore, kept alive
        self._timeout_s = timeout_s
        self._group = None
        self._broken = None
        self._outstanding = []
        self._ready = {}              # external sequence -> op, until its turn
        self._next = 0
        self._cond = threading.Condition()
        self._thread = None
        self._stopping = False

    def accepts(self, tensor, reduce_op):
        return (tensor.dtype in _FLOATS and reduce_op in _TORCH_OPS and
                devices.device_of(tensor) is self.device)

    def submit(self, tensor, output, reduce_op, prescale, postscale, enqueue):
        """Queues the allreduce of `tensor` into `output` (same device); enqueue(buf) submits
        the external request to the engine. Returns the NcclOp."""
        device = self.device
        buf = output if output.is_contiguous() else output.contiguous()
        if buf.data_ptr() != tensor.data_ptr():
            with torch.no_grad():
                buf.copy_(tensor)
        ready = device.record(device.current_stream())
        op = NcclOp(self, enqueue(buf), device, buf, output, reduce_op, prescale, postscale,
                    ready)
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="cadre-nccl",
                                                daemon=True)
                self._thread.start()
                # Ended before the interpreter finalizes (see cuda_staging.Stager.stop).
                atexit.register(self.stop)
            self._outstanding.append(op)
            self._cond.notify()
        return op

    def stop(self):
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self):
        while True:
            with self._cond:
                while not self._outstanding and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                ops = list(self._outstanding)
            try:
                self._dispatch(ops)
            except BaseException as e:  # noqa: BLE001 -- a dead dispatcher would hang its callers
                self._broken = self._broken or RuntimeError(
                    "cadre: the NCCL path failed on rank %d: %s: %s"
                    % (self.rank, type(e).__name__, e))
                with self._cond:
                    failed, self._outstanding = self._outstanding, []
                for op in failed + list(self._ready.values()):
                    if not op.launched.is_set():
                        op.fail(self._broken)
                self._ready.clear()

    def _dispatch(self, ops):
        """Launches, in the engine's order, the operations of `ops` the engine has completed."""
        if not ops[0].core.done():
            ops[0].core.wait(0.002)
        finished = set()
        for op in ops:
            if not op.core.done():
                continue
            finished.add(id(op))
            try:
                op.core.check()
            except BaseException as e:  # noqa: BLE001 -- the engine refused it everywhere
                op.fail(e)
                continue
            if self._broken is not None:  # nothing is launched any more: no order to keep
                op.fail(self._broken)
                continue
            self._ready[op.core.external_sequence] = op
        # The engine numbered its external operations 0, 1, ... in one order on every rank;
        # NCCL must see them in that order on every rank too.
        while self._next in self._ready:
            self._launch(self._ready.pop(self._next))
            self._next += 1
        if finished:
            with self._cond:
                self._outstanding = [op for op in self._outstanding
                                     if id(op) not in finished]

    def _connect(self):
        import torch.distributed as dist
        host, port = self._store_address
        store = self._server or dist.TCPStore(
            host, port, self.size, False, datetime.timedelta(seconds=self._timeout_s))
        prefixed = dist.PrefixStore("cadre-nccl", store)
        return _backend.make_group(prefixed, self.rank, self.size, self._timeout_s)

    def _launch(self, op):
        if self._broken is not None:
            op.fail(self._broken)
            return
        try:
            import torch.distributed as dist
            if self._group is None:
                self._group = self._connect()
            device, side = self.device, self.device.side_stream()
            options = dist.AllreduceOptions()
            options.reduceOp = getattr(dist.ReduceOp, _TORCH_OPS[op.reduce_op])
            with device.use(side), torch.no_grad():
                device.wait(side, op.ready)
                if op.prescale != 1.0:
                    op.buf.mul_(op.prescale)
                # The group orders its own stream after the current one (side) and back.
                self._group.allreduce([op.buf], options).wait()
                if op.postscale != 1.0:
                    op.buf.mul_(op.postscale)
                device.keep(op.buf, side)
                op.done_event = device.record(side)
            op.launched.set()
        except BaseException as e:  # noqa: BLE001 -- every later operation fails the same way
            self._broken = RuntimeError("cadre: the NCCL path failed on rank %d: %s: %s"
                                        % (self.rank, type(e).__name__, e))
            op.fail(self._broken)


_paths = {}  # engine id -> NcclPath (the global process set's engine)


def path_for(engine):
    return _paths.get(id(engine))


def _host_address(local_size, size):
    address = os.environ.get("CADRE_LEARNER_ADDRESS") or os.environ.get("CADRE_BIND_ADDRESS")
    if address:
        return address
    return "127.0.0.1" if local_size == size else socket.gethostname()


def setup(engine, rank, size, local_rank, local_size, host, timeout_s, allgather_object):
    """At init(), on every rank of the global set: decides whether the job uses the NCCL path
    and, if so, makes it for `engine`. Every rank with a CUDA PyTorch takes part in one
    allgather_object of what it can offer; a CPU-only PyTorch takes no part (the job's ranks
    are expected to share one PyTorch build)."""
    mode = _mode()
    if size == 1 or not (devices.cuda_built() or isinstance(_backend, _StandIn)):
        if mode == "on" and size > 1:
            raise RuntimeError("CADRE_NCCL=1 but this PyTorch has no CUDA")
        return None
    offer = {"available": False, "reason": None, "host": host, "gpu": None, "store": None}
    device = server = None
    if mode == "off":
        offer["reason"] = "CADRE_NCCL=0 on rank %d" % rank
    elif not _backend.available():
        offer["reason"] = "rank %d has no GPU or its PyTorch has no NCCL" % rank
    else:
        device, offer["gpu"] = _backend.local_device(local_rank)
        offer["available"] = True
        if rank == 0:
            import torch.distributed as dist
            server = dist.TCPStore(_host_address(local_size, size), 0, size, True,
                                   datetime.timedelta(seconds=timeout_s),
                                   wait_for_workers=False)
            offer["store"] = (_host_address(local_size, size), server.port)
    offers = allgather_object(offer, name="cadre.nccl.setup")
    reason = next((o["reason"] for o in offers if not o["available"]), None)
    if reason is None:
        seen = {}
        for r, o in enumerate(offers):
            other = seen.setdefault((o["host"], o["gpu"]), r)
            if other != r:
                reason = "ranks %d and %d share GPU %s of host %s" % (other, r, o["gpu"], o["host"])
                break
    if reason is not None:
        if mode == "on":
            raise RuntimeError("CADRE_NCCL=1 but the NCCL path cannot be used: " + reason)
        if rank == 0 and mode == "auto" and any(o["available"] for o in offers):
            sys.stderr.write("cadre: CUDA tensors are staged through host memory, not NCCL: %s\n"
                             % reason)
        return None
    path = NcclPath(rank, size, device, tuple(offers[0]["store"]), timeout_s)
    path._server = server
    _paths[id(engine)] = path
    return path


def forget(engine):
    _paths.pop(id(engine), None)


class _StandIn:
    """Base class of test stand-ins (see use_stand_in): lets setup() run without CUDA."""
