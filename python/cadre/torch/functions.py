"""Helpers built on the collectives: broadcasting model and optimizer state, and Python objects."""
import io
import pickle

import torch

from cadre.torch import mpi_ops
from cadre.torch.basics import global_process_set


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Broadcasts parameters (a state_dict, or (name, tensor) pairs such as
    model.named_parameters()) from root_rank, in place."""
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, list) or hasattr(params, "__iter__"):
        items = list(params)
        if items and not isinstance(items[0], tuple):
            raise ValueError("broadcast_parameters expects a dict or (name, tensor) pairs")
    else:
        raise ValueError("invalid params of type %s" % type(params).__name__)
    handles = []
    for name, p in items:
        if p is None:
            continue
        t = p.data if isinstance(p, torch.nn.Parameter) else p
        if not torch.is_tensor(t):
            continue
        handles.append(mpi_ops.broadcast_async_(t, root_rank, "broadcast.param." + str(name),
                                                process_set))
    for h in handles:
        mpi_ops.synchronize(h)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Pickles obj on root_rank and returns it unpickled on every rank. Without a name, one is
    generated from a per-process-set count of calls (not from obj's type: the other ranks
    often pass None, and the names must agree)."""
    name = name or mpi_ops._auto_name("broadcast_object", None, process_set)
    if process_set.rank() == root_rank:
        buf = io.BytesIO()
        torch.save(obj, buf, pickle_module=pickle)
        data = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
        length = torch.tensor([data.numel()], dtype=torch.int64)
    else:
        data = None
        length = torch.zeros(1, dtype=torch.int64)
    mpi_ops.broadcast_(length, root_rank, "broadcast_object.len." + name, process_set)
    if data is None:
        data = torch.empty(int(length.item()), dtype=torch.uint8)
    mpi_ops.broadcast_(data, root_rank, "broadcast_object.data." + name, process_set)
    return torch.load(io.BytesIO(data.numpy().tobytes()), pickle_module=pickle)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every rank's obj, in rank order (objects may differ in type)."""
    name = name or mpi_ops._auto_name("allgather_object", None, process_set)
    buf = io.BytesIO()
    torch.save(obj, buf, pickle_module=pickle)
    data = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
    sizes = mpi_ops.allgather(torch.tensor([data.numel()], dtype=torch.int64),
                              "allgather_object.len." + name, process_set)
    gathered = mpi_ops.allgather(data, "allgather_object.data." + name, process_set).numpy()
    out, offset = [], 0
    for n in sizes.tolist():
        out.append(torch.load(io.BytesIO(gathered[offset:offset + n].tobytes()),
                              pickle_module=pickle))
        offset += n
    return out


def broadcast_optimizer_state(optimizer, root_rank, process_set=global_process_set):
    """Makes every rank's optimizer state (hyperparameters and per-parameter state such as
    Adam's moments and step counts) equal to root_rank's.

    The root's state_dict travels as one object; ranks whose optimizer has not created its
    lazy state yet get it from the root's. Parameter tensors themselves are not touched (use
    broadcast_parameters)."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    state = broadcast_object(optimizer.state_dict(), root_rank,
                             "optimizer_state." + type(optimizer).__name__, process_set)
    optimizer.load_state_dict(state)
