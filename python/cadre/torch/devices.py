"""The device seam of cadre.torch's GPU support: the few operations it asks of the device a
tensor lives on.

cadre's extension does not link libtorch (so it serves any PyTorch build); the engine works on
host memory, and a GPU tensor reaches it through copies queued on CUDA streams. Every GPU
operation that takes is one of the methods below, so the staging logic (cuda_staging.py) and the
NCCL path (nccl_path.py) run unchanged against CUDA through torch's own API (CudaDevice) and
against a simulated device in the tests (python/tests/sim_device.py), which records every
copy, event and wait and executes each stream's work in an order of its choosing.

A device:
  current_stream()             the stream the caller's work is queued on now (the producer of
                               a tensor at submission, its consumer at synchronize)
  side_stream()                the device's staging stream (one per device, made once)
  record(stream) -> event      an event that completes once the stream's work so far has ended
  wait(stream, event)          later work on `stream` starts after `event` (the host goes on)
  copy(dst, src, stream)       an asynchronous copy queued on `stream` (not recorded by autograd)
  query(event) -> bool         whether `event` has completed, without waiting
  synchronize(event)           the host waits for `event` (other Python threads run meanwhile)
  host_buffer(nbytes)          page-locked host memory (a uint8 tensor), so copies run
                               asynchronously with the host
  empty(shape, dtype, stream)  device memory for a result that `stream` writes
  keep(tensor, stream)         `tensor`'s memory is not reused until `stream`'s work so far ends
                               (the caching allocator only knows the stream that allocated it)
  use(stream)                  a context manager: `stream` is the current stream inside it

Thread-safety: every method may be called from any thread.
"""
import contextlib
import threading

import torch


class CudaDevice:
    """One CUDA device through torch.cuda."""

    def __init__(self, index):
        self.index = index
        self.torch_device = torch.device("cuda", index)
        self._side = None
        self._lock = threading.Lock()

    def __repr__(self):
        return "CudaDevice(%d)" % self.index

    def current_stream(self):
        return torch.cuda.current_stream(self.torch_device)

    def side_stream(self):
        with self._lock:
            if self._side is None:
                self._side = torch.cuda.Stream(device=self.torch_device)
            return self._side

    def record(self, stream):
        # blocking: a thread that synchronizes on it sleeps instead of spinning on a core the
        # training thread needs.
        event = torch.cuda.Event(blocking=True)
        event.record(stream)
        return event

    def wait(self, stream, event):
        stream.wait_event(event)

    def copy(self, dst, src, stream):
        with torch.cuda.device(self.index), torch.cuda.stream(stream), torch.no_grad():
            dst.copy_(src, non_blocking=True)

    def query(self, event):
        return event.query()

    def synchronize(self, event):
        event.synchronize()  # torch releases the GIL while it waits

    def host_buffer(self, nbytes):
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    def empty(self, shape, dtype, stream):
        with torch.cuda.device(self.index), torch.cuda.stream(stream):
            return torch.empty(shape, dtype=dtype, device=self.torch_device)

    def keep(self, tensor, stream):
        if tensor.is_cuda:
            tensor.record_stream(stream)

    @contextlib.contextmanager
    def use(self, stream):
        with torch.cuda.device(self.index), torch.cuda.stream(stream):
            yield


_cuda_devices = {}
_cuda_lock = threading.Lock()


def _cuda_device_of(tensor):
    if not tensor.is_cuda:
        return None
    index = tensor.device.index
    with _cuda_lock:
        device = _cuda_devices.get(index)
        if device is None:
            device = _cuda_devices[index] = CudaDevice(index)
        return device


_provider = _cuda_device_of


def device_of(tensor):
    """The device `tensor` lives on, or None for host (CPU) memory."""
    return _provider(tensor)


def set_provider(provider):
    """Replaces how tensors are mapped to devices (tests: a simulated device); returns the
    previous provider, to be restored. `provider(tensor)` returns a device or None."""
    global _provider
    previous, _provider = _provider, provider
    return previous


def cuda_built():
    """Whether the installed PyTorch was built with CUDA (so cadre.torch takes CUDA tensors)."""
    return torch.version.cuda is not None and torch.backends.cuda.is_built()


def nccl_version_code():
    """NCCL_VERSION_CODE of the NCCL in the installed PyTorch (major*10000 + minor*100 +
    patch, as NCCL >= 2.9 numbers itself), or 0 when that PyTorch has none."""
    if not cuda_built():
        return 0
    try:
        import torch.distributed as dist
        if not (dist.is_available() and dist.is_nccl_available()):
            return 0
        version = torch.cuda.nccl.version()
    except (ImportError, AttributeError, RuntimeError):
        return 0
    if isinstance(version, tuple):
        major, minor, patch = (list(version) + [0, 0, 0])[:3]
        return major * 10000 + minor * 100 + patch
    return int(version)
