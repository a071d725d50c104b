"""What Horovod's two DistributedOptimizers (optimizer.py, adasum_optimizer.py) share: a hook on
each parameter's gradient accumulator, the count of backward passes per step, and the guard
against zero_grad() while a step's reductions are in flight.

The optimizers are built as copies of their class dictionaries onto the user's optimizer class
(DistributedOptimizer), so they share these as functions over the optimizer rather than through a
base class. Each keeps `backward_passes_per_step`, `_allreduce_delay` (passes left per parameter),
`_handles` (parameter or group -> (handle, context), handle None while passes are left),
`_requires_update` and `_grad_accs`.
"""


def register_accumulator_hooks(optimizer, make_hook, prepare=None):
    """Hooks make_hook(p) onto the gradient accumulator of every parameter that requires a
    gradient and has no hook yet: it runs right after backward has written p.grad. `prepare(p)`
    runs first. Returns the parameters hooked now."""
    hooked = []
    for param_group in optimizer.param_groups:
        for p in param_group["params"]:
            if not p.requires_grad or p in optimizer._requires_update:
                continue
            if prepare is not None:
                prepare(p)
            optimizer._requires_update.add(p)
            optimizer._allreduce_delay[p] = optimizer.backward_passes_per_step
            grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
            grad_acc.register_hook(make_hook(p))
            optimizer._grad_accs.append(grad_acc)
            hooked.append(p)
    return hooked


def count_backward_pass(optimizer, p):
    """Counts one backward pass through p; True when it was the step's last, so p's gradient is
    due for reduction. More passes than backward_passes_per_step before step() is an error."""
    if p in optimizer._handles and optimizer._handles[p][0] is not None:
        if optimizer._allreduce_delay[p] <= 0:
            raise AssertionError(
                "Gradients were computed more than backward_passes_per_step times "
                "before call to step(). Increase backward_passes_per_step to "
                "accumulate gradients locally.")
    assert not p.grad.requires_grad
    assert optimizer._allreduce_delay[p] > 0
    optimizer._allreduce_delay[p] -= 1
    return optimizer._allreduce_delay[p] == 0


def reset_backward_passes(optimizer):
    """Forgets the step's handles and restarts every parameter's count: after a failed step every
    collective of it is finished, so the next step starts afresh with the same names."""
    optimizer._handles.clear()
    for p in optimizer._requires_update:
        optimizer._allreduce_delay[p] = optimizer.backward_passes_per_step


def check_no_reductions_in_flight(optimizer):
    """zero_grad() between backward and step() would race with the reductions writing p.grad."""
    if optimizer._handles:
        raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                             "before optimizer.step() or optimizer.synchronize(). This is "
                             "prohibited as it can cause a race condition.")
