"""Python objects across ranks: broadcast_object and allgather_object (pickled with torch.save,
sent as uint8 tensors after a header). On submission.py alone, below mpi_ops and functions,
so that init() (startup.py) can agree with the other ranks on the GPU path through them.

Objects are pickled with cloudpickle, as Horovod's are, so that lambdas, closures and classes
defined inside functions or in the script travel too; without cloudpickle (Debian's
python3-cloudpickle) the standard pickle is used and such objects fail with a hint to install it.
An object that cannot be pickled fails on every rank, naming the rank that had it: the header
says whether the data that follows is the pickle or the error, so no rank waits for data that
will never come.

Tensors in the object arrive on the device they were on where this rank has it, else on this
rank's current GPU, else on the CPU (_restore_device): an object holding another rank's CUDA
tensors loads on a rank without that GPU or without CUDA, where torch.load alone would fail."""
import io
import pickle

import torch

from cadre.torch import submission
from cadre.torch.basics import global_process_set, rank

try:
    import cloudpickle as _pickler
except ImportError:  # pragma: no cover - depends on the machine
    _pickler = None

_OK, _FAILED = 0, 1


def _dumps(obj):
    """(header status, bytes): the pickle, or the error's text when obj cannot be pickled."""
    buf = io.BytesIO()
    try:
        torch.save(obj, buf, pickle_module=_pickler or pickle)
    except Exception as e:  # noqa: BLE001 - any pickling failure is sent to the other ranks
        hint = ("" if _pickler is not None else
                " (lambdas, closures and locally defined classes need cloudpickle: install "
                "python3-cloudpickle)")
        return _FAILED, ("%s: %s%s" % (type(e).__name__, e, hint)).encode()
    return _OK, buf.getvalue()


def _restore_device(location, cuda_available, device_count, current_device):
    """Where a tensor saved on `location` by another rank goes on this rank: its own device when
    this rank has it; another rank's GPU this rank does not see (each slot of `cadre run` sees
    its own GPU only, and ranks may have none) goes to this rank's current GPU, or to the CPU
    on a rank without CUDA. Other locations are left to torch."""
    if not location.startswith("cuda"):
        return location
    if not cuda_available:
        return "cpu"
    index = int(location.split(":", 1)[1]) if ":" in location else current_device
    return location if 0 <= index < device_count else "cuda:%d" % current_device


def _map_location(storage, location):
    available = torch.cuda.is_available()
    target = _restore_device(location, available, torch.cuda.device_count() if available else 0,
                             torch.cuda.current_device() if available else 0)
    if target == "cpu":
        return storage
    return torch.serialization.default_restore_location(storage, target)


def _loads(data):
    # cloudpickle's output is a standard pickle (that imports cloudpickle where it needs to).
    return torch.load(io.BytesIO(data), pickle_module=pickle, map_location=_map_location)


def _failure(what, errors):
    """The error every rank raises when some ranks' objects could not be pickled."""
    return pickle.PicklingError("%s: %s" % (what, "; ".join(
        "rank %d could not pickle its object (%s)" % (k, text) for k, text in errors)))


def _as_tensor(data):
    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else \
        torch.empty(0, dtype=torch.uint8)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Pickles obj on root_rank (a global rank) and returns it unpickled on the other ranks of
    process_set; the root gets obj itself, as in Horovod (not a copy: a script may go on using
    what it broadcast). Without a name, one is generated from a per-process-set count of calls
    (not from obj's type: the other ranks often pass None, and the names must agree)."""
    name = name or submission._auto_name("broadcast_object", None, process_set)
    if rank() == root_rank:
        status, payload = _dumps(obj)
        data = _as_tensor(payload)
        header = torch.tensor([status, data.numel()], dtype=torch.int64)
    else:
        data = None
        header = torch.zeros(2, dtype=torch.int64)
    submission.synchronize(submission.broadcast_async_(
        header, root_rank, "broadcast_object.len." + name, process_set))
    if data is None:
        data = torch.empty(int(header[1].item()), dtype=torch.uint8)
    if data.numel():
        submission.synchronize(submission.broadcast_async_(
            data, root_rank, "broadcast_object.data." + name, process_set))
    if int(header[0].item()) != _OK:
        raise _failure("broadcast_object", [(root_rank, data.numpy().tobytes().decode())])
    if rank() == root_rank:
        return obj
    return _loads(data.numpy().tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every rank's obj, in rank order (objects may differ in type)."""
    name = name or submission._auto_name("allgather_object", None, process_set)
    status, payload = _dumps(obj)
    data = _as_tensor(payload)
    headers = submission.synchronize(submission.allgather_async(
        torch.tensor([[status, data.numel()]], dtype=torch.int64),
        "allgather_object.len." + name, process_set))
    gathered = submission.synchronize(submission.allgather_async(
        data, "allgather_object.data." + name, process_set)).numpy()
    members = process_set.ranks if process_set is not None and process_set.ranks else None
    chunks, offset = [], 0
    for k, (state, n) in enumerate(headers.tolist()):
        chunks.append((members[k] if members else k, state, gathered[offset:offset + n].tobytes()))
        offset += n
    errors = [(k, chunk.decode()) for k, state, chunk in chunks if state != _OK]
    if errors:
        raise _failure("allgather_object", errors)
    return [_loads(chunk) for _, _, chunk in chunks]
