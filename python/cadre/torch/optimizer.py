"""DistributedOptimizer: Horovod's wrapper that averages gradients across ranks.

Gradients are submitted to the engine from per-parameter hooks on the gradient accumulators,
while backward still runs, so communication overlaps computation and the engine fuses the
small ones; step() waits for them (synchronize) and then runs the wrapped optimizer's step.
With backward_passes_per_step=k a parameter is submitted on every k-th accumulation.
"""
import contextlib
import warnings

import torch

from cadre.torch import mpi_ops
from cadre.torch.basics import global_process_set
from cadre.torch.compression import Compression


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1,
                 op=mpi_ops.Average, gradient_predivide_factor=1.0, groups=None,
                 sparse_as_dense=False, process_set=global_process_set):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            # Group and position (as Horovod): unique across param groups, and never equal to
            # the one-number names generated for unnamed collectives.
            named_parameters = [("allreduce.noname.%d.%d" % (g, i), v)
                                for g, param_group in enumerate(self.param_groups)
                                for i, v in enumerate(param_group["params"])]
        if any(not isinstance(p, tuple) for p in named_parameters):
            raise ValueError("named_parameters should be a sequence of (name, parameter) "
                             "tuples, usually model.named_parameters()")
        names = [k for k, _ in named_parameters]
        dups = sorted({n for n in names if names.count(n) > 1})
        if dups:
            raise ValueError("parameter names in named_parameters must be unique; duplicates: "
                             + ", ".join(dups))
        all_params = {id(v) for group in self.param_groups for v in group["params"]}
        named_ids = {id(v) for _, v in named_parameters}
        unnamed = all_params - named_ids
        if named_parameters and unnamed:
            raise ValueError("named_parameters was given but %d parameters of the optimizer are "
                             "not in it" % len(unnamed))
        if op not in (mpi_ops.Average, mpi_ops.Sum, mpi_ops.Adasum):
            raise ValueError("DistributedOptimizer supports op Average, Sum or Adasum")
        if gradient_predivide_factor != 1.0 and op != mpi_ops.Average:
            raise ValueError("gradient_predivide_factor needs op=Average")
        if backward_passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be >= 1")
        self._parameter_names = {id(v): k for k, v in sorted(named_parameters)}
        self.backward_passes_per_step = backward_passes_per_step
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._allreduce_delay = {}
        self._handles = {}          # param -> (handle, ctx) or (None, None) when not submitted
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True
        if process_set.included() and process_set.size() > 1:
            self._register_hooks()

    def load_state_dict(self, *args, **kwargs):
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        super(self.__class__, self).load_state_dict(*args, **kwargs)

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _register_hooks(self):
        for param_group in self.param_groups:
            for p in param_group["params"]:
                if p.requires_grad:
                    self._requires_update.add(p)
                    self._allreduce_delay[p] = self.backward_passes_per_step
                    # The gradient accumulator of p: its hook runs right after p.grad is
                    # written during backward.
                    p_tmp = p.expand_as(p)
                    grad_acc = p_tmp.grad_fn.next_functions[0][0]
                    grad_acc.register_hook(self._make_hook(p))
                    self._grad_accs.append(grad_acc)

    def _allreduce_grad_async(self, p):
        name = self._parameter_names.get(id(p))
        grad = p.grad
        if grad.is_sparse:
            if not self.sparse_as_dense:
                raise ValueError("sparse gradient of '%s': pass sparse_as_dense=True" % name)
            grad = grad.to_dense()
            p.grad = grad
        if self.op == mpi_ops.Average:
            prescale = 1.0 / self.gradient_predivide_factor
            postscale = self.gradient_predivide_factor
        else:
            prescale = postscale = 1.0
        compressed, ctx = self._compression.compress(grad)
        if compressed.data_ptr() == grad.data_ptr() and not grad.is_contiguous():
            compressed = compressed.contiguous()
        # Batchable: the engine waits briefly for the next gradients of this backward pass so
        # that one negotiation cycle fuses them.
        handle = mpi_ops._allreduce_into(compressed, compressed, name, self.op, prescale,
                                         postscale, self.process_set, batchable=True)
        return handle, (ctx, compressed)

    def _make_hook(self, p):
        def hook(*ignore):
            if p in self._handles and self._handles[p][0] is not None:
                if self._allreduce_delay[p] <= 0:
                    raise AssertionError(
                        "Gradients were computed more than backward_passes_per_step times "
                        "before call to step(). Increase backward_passes_per_step to "
                        "accumulate gradients locally.")
            assert not p.grad.requires_grad
            assert self._allreduce_delay[p] > 0
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def synchronize(self):
        """Waits until every gradient is reduced and written back into p.grad."""
        if not self.process_set.included() or self.process_set.size() == 1:
            self._synchronized = True
            return
        # Parameters whose hooks did not fire (unused in this step) or have not reached
        # backward_passes_per_step yet are submitted now, so every rank submits every name.
        missing = self._requires_update - set(self._handles.keys())
        for p in missing:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[p] = self._allreduce_grad_async(p)
        # Every gradient of this step is submitted: the engine need not wait for more.
        mpi_ops._engine(self.process_set).flush()
        for p, (handle, (ctx, compressed)) in self._handles.items():
            output = mpi_ops.synchronize(handle)
            self._allreduce_delay[p] = self.backward_passes_per_step
            if output.data_ptr() != p.grad.data_ptr():
                p.grad.copy_(self._compression.decompress(output, ctx))
        self._handles.clear()
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """For step() after an explicit synchronize() (e.g. gradient clipping in between)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "after optimizer.synchronize(); this can cause training slowdown.")
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=mpi_ops.Average,
                         gradient_predivide_factor=1.0, num_groups=0, groups=None,
                         sparse_as_dense=False, process_set=global_process_set):
    """Wraps `optimizer` so that step() uses gradients averaged (op) across the ranks of
    process_set. Returns an instance of a subclass of the optimizer's own class, as Horovod."""
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               op, gradient_predivide_factor, groups, sparse_as_dense, process_set)
