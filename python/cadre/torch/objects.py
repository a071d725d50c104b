"""Python objects across ranks: broadcast_object and allgather_object (pickled with torch.save,
sent as uint8 tensors after their lengths). On submission.py alone, below mpi_ops and functions,
so that init() (startup.py) can agree with the other ranks on the GPU path through them."""
import io
import pickle

import torch

from cadre.torch import submission
from cadre.torch.basics import global_process_set, rank


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Pickles obj on root_rank (a global rank) and returns it unpickled on the other ranks of
    process_set; the root gets obj itself, as in Horovod (not a copy: a script may go on using
    what it broadcast). Without a name, one is generated from a per-process-set count of calls
    (not from obj's type: the other ranks often pass None, and the names must agree)."""
    name = name or submission._auto_name("broadcast_object", None, process_set)
    if rank() == root_rank:
        buf = io.BytesIO()
        torch.save(obj, buf, pickle_module=pickle)
        data = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
        length = torch.tensor([data.numel()], dtype=torch.int64)
    else:
        data = None
        length = torch.zeros(1, dtype=torch.int64)
    submission.synchronize(submission.broadcast_async_(
        length, root_rank, "broadcast_object.len." + name, process_set))
    if data is None:
        data = torch.empty(int(length.item()), dtype=torch.uint8)
    submission.synchronize(submission.broadcast_async_(
        data, root_rank, "broadcast_object.data." + name, process_set))
    if rank() == root_rank:
        return obj
    return torch.load(io.BytesIO(data.numpy().tobytes()), pickle_module=pickle)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every rank's obj, in rank order (objects may differ in type)."""
    name = name or submission._auto_name("allgather_object", None, process_set)
    buf = io.BytesIO()
    torch.save(obj, buf, pickle_module=pickle)
    data = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
    sizes = submission.synchronize(submission.allgather_async(
        torch.tensor([data.numel()], dtype=torch.int64), "allgather_object.len." + name,
        process_set))
    gathered = submission.synchronize(submission.allgather_async(
        data, "allgather_object.data." + name, process_set)).numpy()
    out, offset = [], 0
    for n in sizes.tolist():
        out.append(torch.load(io.BytesIO(gathered[offset:offset + n].tobytes()),
                              pickle_module=pickle))
        offset += n
    return out
