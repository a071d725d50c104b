"""DistributedOptimizer: Horovod's wrapper that averages gradients across ranks.

Gradients are submitted to the engine from per-parameter hooks on the gradient accumulators,
while backward still runs, so communication overlaps computation and the engine fuses the
small ones; step() waits for them (synchronize) and then runs the wrapped optimizer's step.
With backward_passes_per_step=k a parameter is submitted on every k-th accumulation.

As in Horovod 0.28: ``groups`` (a number of groups, or lists of parameters) submits each group
as one grouped allreduce once all its gradients are ready (``num_groups`` is its deprecated
name); sparse gradients (``nn.Embedding(sparse=True)``) are reduced with sparse_allreduce_async
(indices and values allgathered) unless ``sparse_as_dense``, which reduces them densely and
turns them back into sparse gradients; ``op=Adasum`` at more than one rank is Horovod's delta
optimizer (adasum_optimizer.py).
"""
import contextlib
import warnings

import torch

from cadre.torch import backward_passes, cuda_staging, mpi_ops, submission
from cadre.torch.adasum_optimizer import _DistributedAdasumOptimizer
from cadre.torch.basics import global_process_set
from cadre.torch.closure import reducing_closure
from cadre.torch.compression import Compression
from cadre.torch.functions import broadcast_object
from cadre.torch.parameter_names import named_parameter_table
from cadre.torch.sparse import sparse_allreduce_async


def split_list(items, n):
    """Horovod's split of a list into n consecutive chunks of near-equal size."""
    d, r = divmod(len(items), n)
    return [items[i * d + min(i, r):(i + 1) * d + min(i + 1, r)] for i in range(n)]


class _DistributedOptimizer(torch.optim.Optimizer):
    _cadre_distributed = True  # broadcast_optimizer_state steps the wrapped optimizer directly

    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1,
                 op=mpi_ops.Average, gradient_predivide_factor=1.0, groups=None,
                 sparse_as_dense=False, process_set=global_process_set):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        self._parameter_names = named_parameter_table(self, named_parameters)
        if op not in (mpi_ops.Average, mpi_ops.Sum, mpi_ops.Adasum):
            raise ValueError("DistributedOptimizer supports op Average, Sum or Adasum")
        if backward_passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be >= 1")
        if groups is not None:
            if not (isinstance(groups, list) or (isinstance(groups, int) and groups > 0)):
                raise ValueError("groups should be a non-negative integer or a list of list of "
                                 "torch.Tensor.")
            if isinstance(groups, list):
                seen = set()
                for group in groups:
                    for p in group:
                        if not isinstance(p, torch.Tensor):
                            raise ValueError("groups must consist of torch.Tensor.")
                        if id(p) in seen:
                            raise ValueError("A parameter can only appear once in groups.")
                        seen.add(id(p))
        self.backward_passes_per_step = backward_passes_per_step
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._groups = groups
        self._p_to_group = {}       # param -> tuple of the params of its group
        self._group_counts = {}     # group -> gradients ready in this pass
        self._allreduce_delay = {}
        self._handles = {}          # param or group -> (handle, ctx); (None, None): not yet
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
        for group in self._group_counts:
            self._group_counts[group] = 0
        super(self.__class__, self).load_state_dict(*args, **kwargs)

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _form_groups(self):
        """Horovod's grouping: the parameters that need gradients in rank 0's order (so every
        rank forms the same groups), then explicit lists (the rest alone) or n even chunks."""
        p_list = [p for group in self.param_groups for p in group["params"] if p.requires_grad]
        names = [self._parameter_names.get(id(p)) for p in p_list]
        order = broadcast_object(names, root_rank=self.process_set.ranks[0],
                                 process_set=self.process_set)
        p_list.sort(key=lambda p: order.index(self._parameter_names.get(id(p))))
        if isinstance(self._groups, list):
            wanted = {id(p) for p in p_list}
            p_groups = [[p for p in group if id(p) in wanted] for group in self._groups]
            grouped = {id(p) for group in p_groups for p in group}
            p_groups += [[p] for p in p_list if id(p) not in grouped]
        else:
            p_groups = split_list(p_list, self._groups)
        for group in p_groups:
            group = tuple(group)
            if not group:
                continue
            for p in group:
                self._p_to_group[p] = group
            self._group_counts[group] = 0

    def _register_hooks(self):
        if self._groups is not None:
            self._form_groups()
        backward_passes.register_accumulator_hooks(self, self._make_hook)

    def _scales(self):
        if self.op == mpi_ops.Average:
            # The engine divides the postscale by the size for Average.
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _dense_grad(self, p):
        """p's gradient for a dense reduction (created as zeros when backward did not reach p:
        the other ranks may have one); sparse ones densified for sparse_as_dense."""
        if p.grad is None:
            p.grad = p.data.new(p.size()).zero_()
        grad = p.grad
        if grad.is_sparse:
            grad = grad.to_dense()
        elif not grad.is_contiguous():
            grad = grad.contiguous()
        return grad

    def _allreduce_grad_async(self, p):
        name = self._parameter_names.get(id(p))
        if p.grad is not None and p.grad.is_sparse and not self.sparse_as_dense:
            return sparse_allreduce_async(p.grad, name, self.op, self.process_set), None
        compressed, ctx = self._compression.compress(self._dense_grad(p))
        pre, post = self._scales()
        # Batchable: the engine waits briefly for the next gradients of this backward pass so
        # that one negotiation cycle fuses them.
        handle = submission._allreduce_into(compressed, compressed, name, self.op, pre, post,
                                         self.process_set, batchable=True)
        return handle, ctx

    def _grouped_allreduce_grad_async(self, group):
        name = self._parameter_names.get(id(group[0]))
        pairs = [self._compression.compress(self._dense_grad(p)) for p in group]
        pre, post = self._scales()
        handles = [submission._allreduce_into(c, c, "%s.%d" % (name, i), self.op, pre, post,
                                              self.process_set, batchable=True,
                                              group=(name, i, len(pairs)))
                   for i, (c, _) in enumerate(pairs)]
        return submission._group(handles), [ctx for _, ctx in pairs]

    def _make_hook(self, p):
        def hook(*ignore):
            handle, ctx = None, None
            if backward_passes.count_backward_pass(self, p):
                group = self._p_to_group.get(p)
                if group is not None:
                    self._group_counts[group] += 1
                    if self._group_counts[group] == len(group):
                        self._submit_group(group)
                    return
                handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def _submit_group(self, group):
        self._handles[group] = self._grouped_allreduce_grad_async(group)
        for gp in group:
            self._handles.pop(gp, None)
        self._group_counts[group] = 0

    def synchronize(self):
        """Waits until every gradient is reduced and written back into p.grad."""
        if not self.process_set.included() or self.process_set.size() == 1:
            self._synchronized = True
            return
        # A parameter unfrozen since the optimizer was made (requires_grad set on every rank
        # alike) is hooked now and reduced from this step on; Horovod never reduces it, and the
        # ranks' copies drift apart.
        backward_passes.register_accumulator_hooks(self, self._make_hook)
        # Parameters whose hooks did not fire (unused in this step) or have not reached
        # backward_passes_per_step yet are submitted now, so every rank submits every name; a
        # group is submitted whole (zeros where this rank has no gradient), as the other ranks
        # may have submitted it from their hooks. Parameters frozen since (no gradient on any
        # rank) are left alone, as torch's optimizers leave them.
        done = set()
        for key in self._handles:
            done.update(key) if isinstance(key, tuple) else done.add(key)
        for p in list(self._requires_update - done):
            if not p.requires_grad and p not in self._p_to_group:
                continue
            group = self._p_to_group.get(p)
            if group is not None:
                if group not in self._handles:
                    self._submit_group(group)
            else:
                self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[p] = self._allreduce_grad_async(p)
        # Every gradient of this step is submitted: the engine need not wait for more (after
        # the gradients still being copied off a GPU, cuda_staging.flush).
        cuda_staging.flush(submission._engine(self.process_set))
        try:
            outputs = submission._synchronize_all([handle for handle, _ in self._handles.values()])
        except Exception:
            # Every collective of this step is finished (see _synchronize_all).
            backward_passes.reset_backward_passes(self)
            raise
        for (key, (_, ctx)), output in zip(self._handles.items(), outputs):
            if isinstance(key, tuple):
                for gp, out, gctx in zip(key, output, ctx):
                    self._store(gp, out, gctx)
            else:
                self._store(key, output, ctx)
        self._handles.clear()
        self._synchronized = True

    def _store(self, p, output, ctx):
        self._allreduce_delay[p] = self.backward_passes_per_step
        reduced = self._compression.decompress(output, ctx)
        if p.grad.is_sparse:
            # Sparse gradients stay sparse (sparse_as_dense reduced them densely), as Horovod.
            if not reduced.is_sparse:
                reduced = reduced.to_sparse()
            p.grad.zero_().add_(reduced)
        elif reduced.data_ptr() != p.grad.data_ptr():
            p.grad.copy_(reduced)

    @contextlib.contextmanager
    def skip_synchronize(self):
        """For step() after an explicit synchronize() (e.g. gradient clipping in between)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        """Horovod's step: waits for the gradients of the backward passes so far (unless inside
        skip_synchronize) and runs the wrapped optimizer's step. With a closure, every
        evaluation of it reduces the gradients it computed and returns the loss reduced across
        the ranks (closure.py), so LBFGS and other closure optimizers step as one process would
        on the whole batch; gradients from before step(closure) are reduced first only when
        some are in flight."""
        if self._should_synchronize and (closure is None or self._handles):
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "after optimizer.synchronize(); this can cause training slowdown.")
            self.synchronize()
        self._synchronized = False
        if closure is not None and self.process_set.included() and self.process_set.size() > 1:
            closure = reducing_closure(closure, self.synchronize, self.op, self.process_set,
                                       "optimizer.closure_loss")
        try:
            return super(self.__class__, self).step(closure)
        finally:
            self._synchronized = False

    def zero_grad(self, *args, **kwargs):
        backward_passes.check_no_reductions_in_flight(self)
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=mpi_ops.Average,
                         gradient_predivide_factor=1.0, num_groups=0, groups=None,
                         sparse_as_dense=False, process_set=global_process_set):
    """Wraps `optimizer` so that step() uses gradients averaged (op) across the ranks of
    process_set. Returns an instance of a subclass of the optimizer's own class, as Horovod."""
    if gradient_predivide_factor != 1.0 and op != mpi_ops.Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed "
                      "in v0.23.0.", DeprecationWarning)
        if groups is None:
            groups = num_groups
    if op != mpi_ops.Adasum or mpi_ops.size() == 1:
        cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
                   dict(_DistributedOptimizer.__dict__))
        return cls(optimizer.param_groups, named_parameters, compression,
                   backward_passes_per_step, op, gradient_predivide_factor, groups,
                   sparse_as_dense, process_set)
    if process_set is not global_process_set:
        raise NotImplementedError("Adasum does not support non-global process sets yet.")
    if isinstance(optimizer, torch.optim.LBFGS):
        # The delta optimizer steps each parameter alone from its gradient hook, without a
        # closure; LBFGS cannot step without one.
        raise ValueError("DistributedOptimizer(op=Adasum) cannot wrap torch.optim.LBFGS, which "
                         "needs a closure at every step: use op=Average or op=Sum")
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedAdasumOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step)
