"""Helpers built on the collectives: broadcasting model and optimizer state, and Python objects
(objects.py, re-exported here as Horovod has them here)."""
import torch

from cadre.torch import mpi_ops, submission
from cadre.torch.basics import global_process_set
from cadre.torch.objects import allgather_object, broadcast_object  # noqa: F401


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Broadcasts parameters from root_rank (a global rank), in place: a state_dict, (name,
    tensor) pairs such as model.named_parameters(), or plain tensors such as
    model.parameters() (named by their order)."""
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, list) or hasattr(params, "__iter__"):
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError("invalid params of type: %s" % type(params))
    handles = []
    for name, p in items:
        if p is None:
            continue
        t = p.data if isinstance(p, torch.nn.Parameter) else p
        if not torch.is_tensor(t):
            continue
        # Named as Horovod names them ("broadcast.<name>"), so a parameter's broadcast never
        # shares a name with its gradient's allreduce.
        handles.append(mpi_ops.broadcast_async_(
            t, root_rank, None if name is None else "broadcast." + str(name), process_set))
    submission._synchronize_all(handles)


def _initialize_state(optimizer):
    """Horovod's initialization of an optimizer without state: a zero gradient for every
    parameter that requires one, and one step of the wrapped optimizer (not the distributed
    one, whose step would be a collective). Leaves those zero gradients behind, as Horovod
    does, so scripts may use p.grad afterwards."""
    if len(optimizer.state_dict()["state"]) != 0:
        return
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                p.grad = p.data.new(p.size()).zero_()
                if isinstance(optimizer, torch.optim.SparseAdam):
                    p.grad = p.grad.to_sparse()
    if getattr(optimizer, "_cadre_distributed", False):
        super(optimizer.__class__, optimizer).step()
    else:
        optimizer.step()


def broadcast_optimizer_state(optimizer, root_rank, process_set=global_process_set):
    """Makes every rank's optimizer state (hyperparameters and per-parameter state such as
    Adam's moments and step counts) equal to root_rank's (a global rank).

    An optimizer without state is initialized first as Horovod does it (zero gradients and one
    local step), then the root's state_dict travels as one object, so parameters without
    gradients or without state (a momentum buffer that does not exist) on some ranks are fine.
    Parameter tensors themselves are not touched (use broadcast_parameters)."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    _initialize_state(optimizer)
    state = broadcast_object(optimizer.state_dict(), root_rank,
                             "optimizer_state." + type(optimizer).__name__, process_set)
    optimizer.load_state_dict(state)
