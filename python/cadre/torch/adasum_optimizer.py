"""Horovod's DistributedOptimizer for op=Adasum (more than one rank): a delta optimizer. Each
parameter's gradient hook runs the wrapped optimizer's step for that parameter alone, locally,
and the change it made (delta = -lr * f(g), with f the optimizer's rule and its local state) is
combined across ranks with Adasum; step() then sets every parameter to its value before the
local step plus the combined delta. So what is reduced is each rank's update, not its
gradient, and the learning rate needs no scaling with the number of ranks.

As in Horovod: synchronize() does nothing, skip_synchronize() is refused, every parameter
starts with a zero gradient, and only the global process set at a power-of-two size works
(Adasum's own limits, adasum.py).
"""
import contextlib

import torch

from cadre.torch import backward_passes, mpi_ops, submission
from cadre.torch.compression import Compression
from cadre.torch.parameter_names import named_parameter_table


class _DistributedAdasumOptimizer(torch.optim.Optimizer):
    _cadre_distributed = True  # broadcast_optimizer_state steps the wrapped optimizer directly

    def __init__(self, params, named_parameters, compression=Compression.none,
                 backward_passes_per_step=1):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        self._parameter_names = named_parameter_table(self, named_parameters)
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {}
        self._handles = {}
        self._grad_accs = []
        self._requires_update = set()
        self._starting_models = {}
        self._register_hooks()

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _register_hooks(self):
        def prepare(p):
            p.grad = p.data.new(p.size()).zero_()
            self._starting_models[p] = torch.zeros_like(p, requires_grad=False)

        backward_passes.register_accumulator_hooks(self, self._make_hook, prepare)

    def _allreduce_grad_async(self, p):
        """Steps p alone with the wrapped optimizer, turns p into that step's delta and submits
        it to an Adasum allreduce; step() adds the combined delta to the start."""
        name = self._parameter_names.get(id(p))
        start = self._starting_models[p]
        stashed = []
        for group in self.param_groups:
            stashed.append(group["params"])
            group["params"] = [p] if any(p is v for v in group["params"]) else []
        try:
            start.data.copy_(p)
            super(self.__class__, self).step()
            p.data.sub_(start)  # p now holds the local delta
        finally:
            for params, group in zip(stashed, self.param_groups):
                group["params"] = params
        compressed, ctx = self._compression.compress(p.data)
        handle = submission._allreduce_into(compressed, compressed, name, mpi_ops.Adasum, 1.0, 1.0,
                                         mpi_ops.global_process_set)
        return handle, (ctx, compressed)

    def _make_hook(self, p):
        def hook(*ignore):
            handle, ctx = None, None
            if backward_passes.count_backward_pass(self, p):
                handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def synchronize(self):
        pass

    @contextlib.contextmanager
    def skip_synchronize(self):
        raise AssertionError("Skipping synchronization is not supported when using Adasum "
                             "optimizer.")
        yield  # pragma: no cover (a generator, for contextmanager)

    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss = closure()
        for p in self._requires_update - set(self._handles):
            self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:  # step() before backward_passes_per_step passes: reduce now
                handle, ctx = self._allreduce_grad_async(p)
                self._handles[p] = (handle, ctx)
        try:
            outputs = submission._synchronize_all([h for h, _ in self._handles.values()])
        except Exception:
            backward_passes.reset_backward_passes(self)
            raise
        for (p, (_, (ctx, compressed))), output in zip(self._handles.items(), outputs):
            delta = self._compression.decompress(output, ctx)
            start = self._starting_models[p]
            start.data.add_(delta.data)
            p.data.copy_(start)
            self._allreduce_delay[p] = self.backward_passes_per_step
        self._handles.clear()
        return loss

    def zero_grad(self, *args, **kwargs):
        backward_passes.check_no_reductions_in_flight(self)
        return super(self.__class__, self).zero_grad(*args, **kwargs)
