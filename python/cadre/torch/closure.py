"""step(closure) for the distributed optimizers (DistributedOptimizer and cadre.ddl.wrap).

torch's optimizers call the closure to re-evaluate the loss and its gradients, once (SGD, Adam)
or several times per step (LBFGS, with or without its line search). Each evaluation must see
the gradients of that evaluation reduced across the ranks, and every rank must see the same
loss: LBFGS compares losses to decide when to stop and how far to go, and ranks that decided
differently would run different numbers of collectives. So each evaluation is the user's
closure (with gradients enabled, as torch runs it), then the reduction of its gradients, then
the loss reduced with the optimizer's op (Average: the mean of the ranks' losses, which is the
loss of the whole batch when the ranks' shares are equal and the loss is a mean; Sum: the sum).

With equal shares, a distributed step(closure) is therefore the single-process step on the
whole batch. Horovod 0.28 reduces only the gradients computed before step() and calls the
closure unreduced (LBFGS fails there at its second evaluation); this is a documented difference.
"""
import torch

from cadre.torch import mpi_ops

_NONE, _NUMBER, _OTHER = 0.0, 1.0, 2.0


def _as_number(loss):
    """(kind, value): a Python number or a one-element tensor is a number; None is none;
    anything else (a tuple, a dict) is passed through unreduced."""
    if loss is None:
        return _NONE, 0.0
    if isinstance(loss, torch.Tensor) and loss.numel() == 1 and not loss.dtype.is_complex:
        return _NUMBER, float(loss.detach().reshape(()).item())
    if isinstance(loss, (int, float)) and not isinstance(loss, bool):
        return _NUMBER, float(loss)
    return _OTHER, 0.0


def reduce_loss(loss, op, process_set, name):
    """The closure's loss reduced with op (Average or Sum) over process_set, the same value on
    every member: a tensor keeps its shape, dtype and device (detached), a number becomes a
    float. None everywhere stays None; a value that is not a number stays this rank's own.
    Ranks that disagree on whether there is a loss raise ValueError on every member, naming
    them (an optimizer comparing losses on some ranks only would desynchronize them)."""
    kind, value = _as_number(loss)
    gathered = mpi_ops.allgather(torch.tensor([[kind, value]], dtype=torch.float64), name=name,
                                 process_set=process_set)
    kinds = gathered[:, 0].tolist()
    members = process_set.ranks or list(range(len(kinds)))
    if len(set(kinds)) > 1:
        words = {_NONE: "None", _NUMBER: "a number", _OTHER: "something else"}
        raise ValueError("optimizer.step(closure): the closures returned different kinds of "
                         "loss: %s" % "; ".join("rank %d: %s" % (members[i], words[k])
                                                for i, k in enumerate(kinds)))
    if kind != _NUMBER:
        return loss
    total = float(gathered[:, 1].sum().item())
    reduced = total / len(kinds) if op == mpi_ops.Average else total
    if isinstance(loss, torch.Tensor):
        return torch.full(loss.shape, reduced, dtype=loss.dtype, device=loss.device)
    return reduced


def reducing_closure(closure, reduce_gradients, op, process_set, name):
    """The closure handed to the wrapped optimizer's step: evaluates `closure` with gradients
    enabled, reduces the gradients it left in p.grad (`reduce_gradients()`), and returns the
    loss reduced across the ranks (reduce_loss)."""

    def evaluate():
        with torch.enable_grad():
            loss = closure()
        reduce_gradients()
        return reduce_loss(loss, op, process_set, name)

    return evaluate
