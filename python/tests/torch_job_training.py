# DistributedOptimizer and the state-broadcast helpers against single-process closed forms, run
# as N ranks by `cadre run` (see test_torch_training.py); hvd_suite.py prints the results.
# Rank r trains on rows 8r..8r+7 of one data set that every rank generates alike, so the
# averaged-gradient run must equal plain full-batch training in one process.
import time

import torch

import horovod.torch as hvd
import torch_job_closure
from hvd_suite import Suite

hvd.init()
r, n = hvd.rank(), hvd.size()
suite = Suite(r)
torch.manual_seed(1234)
X = torch.randn(8 * n, 4)
Y = X @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1
MINE = slice(8 * r, 8 * r + 8)
mse = torch.nn.functional.mse_loss


def model():
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))


def reference(steps, lr=0.1):
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9)
    for _ in range(steps):
        opt.zero_grad()
        mse(m(X), Y).backward()
        opt.step()
    return m


def same(a, b, tol):
    for (na, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.allclose(pa, pb, atol=tol, rtol=tol), (na, pa, pb)


def identical_everywhere(tensors, name):
    """Every rank holds bit-identical tensors."""
    flat = torch.cat([t.detach().reshape(-1).double() for t in tensors]).unsqueeze(0)
    everyone = hvd.allgather(flat, name=name)
    assert torch.equal(everyone, everyone[0].expand_as(everyone)), everyone


def train_distributed(steps, compression=hvd.Compression.none, **kw):
    m = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=m.named_parameters(),
                                   compression=compression, **kw)
    for _ in range(steps):
        opt.zero_grad()
        mse(m(X[MINE]), Y[MINE]).backward()
        opt.step()
    return m


@suite.check("optimizer.averages_gradients")
def _():
    same(train_distributed(3), reference(3), 1e-5)


@suite.check("optimizer.fp16_compression")
def _():
    m = train_distributed(3, hvd.Compression.fp16)
    same(m, reference(3), 2e-2)
    identical_everywhere(m.parameters(), "fp16.identical")


@suite.check("optimizer.float64_model")
def _():
    m = model().double()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=m.named_parameters())
    for _ in range(3):
        opt.zero_grad()
        mse(m(X[MINE].double()), Y[MINE].double()).backward()
        opt.step()
    ref = model().double()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for _ in range(3):
        ref_opt.zero_grad()
        mse(ref(X.double()), Y.double()).backward()
        ref_opt.step()
    same(m, ref, 1e-10)


@suite.check("optimizer.gradient_predivide_factor")
def _():
    same(train_distributed(2, gradient_predivide_factor=2.0), reference(2), 1e-5)
    # The factor reaches the engine as prescale 1/f and postscale f/n (the arithmetic itself,
    # float16 kept in range by it, is torch_job_parity's check): ranks that disagree on it fail
    # with a mismatch of scale factors, which they would not if it were dropped.
    if n > 1:
        try:
            train_distributed(1, gradient_predivide_factor=2.0 if r == 0 else 4.0)
            raise AssertionError("ranks with different predivide factors were not told apart")
        except hvd.HorovodInternalError as e:
            assert "scale factors differ" in str(e), e


@suite.check("optimizer.failed_step_frees_its_names")
def _():
    # A step whose reduction fails (ranks disagree on the predivide factor) raises only once all
    # of its gradients' collectives are finished, so the next step reuses their names at once.
    # Rank 1 hands in the first layer's gradients late: were rank 0 to raise on the first error
    # it saw, its next step would find '0.bias' still in flight.
    if n == 1:
        return

    class Late(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            if r == 1:
                time.sleep(1.0)
            return grad

    m = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                   named_parameters=m.named_parameters(),
                                   gradient_predivide_factor=2.0 if r == 0 else 4.0)
    opt.zero_grad()
    mse(m[2](Late.apply(m[1](m[0](X[MINE])))), Y[MINE]).backward()
    try:
        opt.step()
        raise AssertionError("ranks with different predivide factors were not told apart")
    except hvd.HorovodInternalError as e:
        assert "scale factors differ" in str(e), e
    same(train_distributed(2), reference(2), 1e-5)


@suite.check("optimizer.op_sum")
def _():
    m = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1 / n),
                                   named_parameters=m.named_parameters(), op=hvd.Sum)
    opt.zero_grad()
    mse(m(X[MINE]), Y[MINE]).backward()
    opt.step()
    ref = model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    mse(ref(X), Y).backward()
    ref_opt.step()
    same(m, ref, 1e-5)


# step(closure), LBFGS included: torch_job_closure.py.
torch_job_closure.add_checks(suite)


@suite.check("optimizer.backward_passes_per_step")
def _():
    # Two half-batches accumulate locally, one allreduce, one step.
    m = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=m.named_parameters(),
                                   backward_passes_per_step=2)
    for _ in range(2):
        opt.zero_grad()
        for half in (slice(8 * r, 8 * r + 4), slice(8 * r + 4, 8 * r + 8)):
            (mse(m(X[half]), Y[half]) / 2).backward()
        opt.step()
    same(m, reference(2), 1e-5)
    # A third backward pass before step() is refused, as in Horovod.
    opt.zero_grad()
    for _ in range(2):
        mse(m(X[MINE]), Y[MINE]).backward()
    try:
        mse(m(X[MINE]), Y[MINE]).backward()
        raise AssertionError("a third backward pass was accepted")
    except AssertionError as e:
        assert "backward_passes_per_step" in str(e), e
    opt.step()


@suite.check("optimizer.param_groups_without_named_parameters")
def _():
    # Generated parameter names must be unique across groups and not collide with the names
    # generated for unnamed collectives (one is pending during backward here).
    def groups(m):
        return [{"params": m[0].parameters()}, {"params": m[2].parameters(), "lr": 0.05}]

    m = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(groups(m), lr=0.1, momentum=0.9))
    for _ in range(2):
        opt.zero_grad()
        h = hvd.allreduce_async(torch.ones(1), op=hvd.Sum)
        mse(m(X[MINE]), Y[MINE]).backward()
        opt.step()
        assert hvd.synchronize(h).item() == n
    ref = model()
    ref_opt = torch.optim.SGD(groups(ref), lr=0.1, momentum=0.9)
    for _ in range(2):
        ref_opt.zero_grad()
        mse(ref(X), Y).backward()
        ref_opt.step()
    same(m, ref, 1e-5)


@suite.check("optimizer.gradients_submitted_during_backward")
def _():
    # A probe between the two layers sees, during backward, that the second layer's gradients
    # were already handed to the engine (the optimizer's pending handles) — before the first
    # layer's gradients exist: communication overlaps the rest of backward.
    seen = {}

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            seen["late"] = sorted(name for p, (h, _) in opt._handles.items()
                                  if h is not None for name in [names[p]])
            seen["early_grad"] = m[0].weight.grad is not None
            return grad

    m = model()
    names = {p: name for name, p in m.named_parameters()}
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                   named_parameters=m.named_parameters())
    opt.zero_grad()
    out = m[2](Probe.apply(m[1](m[0](X[MINE]))))
    mse(out, Y[MINE]).backward()
    opt.step()
    assert seen["late"] == ["2.bias", "2.weight"], seen
    assert not seen["early_grad"], seen


@suite.check("optimizer.synchronize_clip_skip_synchronize")
def _():
    m = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                   named_parameters=m.named_parameters())
    opt.zero_grad()
    mse(m(X[MINE]), Y[MINE]).backward()
    opt.synchronize()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 0.05)
    with opt.skip_synchronize():
        opt.step()
    ref = model()
    mse(ref(X), Y).backward()
    torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.05)
    torch.optim.SGD(ref.parameters(), lr=0.1).step()
    same(m, ref, 1e-5)


@suite.check("optimizer.parameter_unused_on_some_ranks")
def _():
    # Branch b is used by the even ranks only: the odd ranks contribute zeros for it.
    def net():
        torch.manual_seed(3)
        return torch.nn.ModuleDict({"a": torch.nn.Linear(4, 1), "b": torch.nn.Linear(4, 1)})

    def loss(m, k):
        rows = slice(8 * k, 8 * k + 8)
        out = m["a"](X[rows]) + (m["b"](X[rows]) if k % 2 == 0 else 0)
        return mse(out, Y[rows])

    m = net()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                   named_parameters=m.named_parameters())
    for _ in range(2):
        opt.zero_grad()
        loss(m, r).backward()
        opt.step()
    ref = net()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(2):
        ref_opt.zero_grad()
        (sum(loss(ref, k) for k in range(n)) / n).backward()
        ref_opt.step()
    same(m, ref, 1e-5)


@suite.check("optimizer.layers_unfrozen_or_frozen_later")
def _():
    # Fine-tuning: layer 0 frozen when the optimizer is made and unfrozen after a step, layer 2
    # trained and then frozen (gradients set to None). Full-batch training in one process with
    # the same schedule is the reference: the unfrozen layer is averaged from then on (Horovod
    # never reduces it, and the ranks drift apart) and the frozen one is left alone (no zero
    # gradient made up for it, which weight decay would act on).
    def run(distributed):
        m = model()
        m[0].requires_grad_(False)
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=0.1)
        if distributed:
            opt = hvd.DistributedOptimizer(opt, named_parameters=m.named_parameters())
        for step in range(4):
            if step == 1:
                m[0].requires_grad_(True)
            if step == 2:
                m[2].requires_grad_(False)
            opt.zero_grad(set_to_none=True)
            rows = MINE if distributed else slice(None)
            mse(m(X[rows]), Y[rows]).backward()
            opt.step()
        return m

    m = run(True)
    same(m, run(False), 1e-5)
    identical_everywhere(list(m.parameters()), "unfrozen.identical")


@suite.check("optimizer.sparse_as_dense")
def _():
    def net():
        torch.manual_seed(5)
        return torch.nn.Embedding(n + 2, 3, sparse=True)

    def loss(m, k):
        return m(torch.tensor([k, k + 1, n + 1])).pow(2).sum()

    m = net()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                   named_parameters=m.named_parameters(), sparse_as_dense=True)
    opt.zero_grad()
    loss(m, r).backward()
    opt.step()
    ref = net()
    (sum(loss(ref, k) for k in range(n)) / n).backward()
    ref.weight.data -= 0.1 * ref.weight.grad.to_dense()
    same(m, ref, 1e-6)


def adasum_tree(vectors):
    """Maleki et al.'s pairwise combination along the binary tree over the ranks, in float64."""
    while len(vectors) > 1:
        pairs = zip(vectors[0::2], vectors[1::2])
        vectors = [(1 - (a @ b) / (2 * (a @ a))) * a + (1 - (a @ b) / (2 * (b @ b))) * b
                   for a, b in pairs]
    return vectors[0]


@suite.check("optimizer.adasum")
def _():
    # Horovod's Adasum optimizer: every rank takes a local SGD step on its own rows, and the
    # ranks' updates (not gradients) are combined with Adasum, parameter by parameter. Replay it
    # in one process; the result differs from averaged training. Horovod has no Adasum at sizes
    # that are not powers of two: NotImplementedError there, as in Horovod.
    m = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                   named_parameters=m.named_parameters(), op=hvd.Adasum)
    if n & (n - 1):
        try:
            opt.zero_grad()
            mse(m(X[MINE]), Y[MINE]).backward()
            raise AssertionError("Adasum accepted at %d ranks" % n)
        except NotImplementedError as e:
            assert "power of 2" in str(e), e
        return
    for _ in range(2):
        opt.zero_grad()
        mse(m(X[MINE]), Y[MINE]).backward()
        opt.step()
    ref = model()
    for _ in range(2):
        deltas = []
        for k in range(n):
            ref.zero_grad()
            mse(ref(X[8 * k:8 * k + 8]), Y[8 * k:8 * k + 8]).backward()
            deltas.append([-0.1 * p.grad.double().reshape(-1) for p in ref.parameters()])
        with torch.no_grad():
            for i, p in enumerate(ref.parameters()):
                p += adasum_tree([d[i] for d in deltas]).reshape(p.shape).float()
    same(m, ref, 1e-5)
    averaged = reference(2)
    assert any(not torch.allclose(a, b, atol=1e-4)
               for a, b in zip(m.parameters(), averaged.parameters())), "Adasum averaged"


@suite.check("optimizer.process_set")
def _():
    # Even and odd ranks train separately, each set averaging over its own members' rows.
    evens = hvd.add_process_set([k for k in range(n) if k % 2 == 0])
    odds = hvd.add_process_set([k for k in range(n) if k % 2 == 1]) if n > 1 else None
    try:
        mine = evens if r % 2 == 0 else odds
        m = model()
        opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
                                       named_parameters=m.named_parameters(), process_set=mine)
        for _ in range(2):
            opt.zero_grad()
            mse(m(X[MINE]), Y[MINE]).backward()
            opt.step()
        rows = torch.cat([torch.arange(8 * k, 8 * k + 8) for k in mine.ranks])
        ref = model()
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
        for _ in range(2):
            ref_opt.zero_grad()
            mse(ref(X[rows]), Y[rows]).backward()
            ref_opt.step()
        same(m, ref, 1e-5)
    finally:
        hvd.remove_process_set(evens)
        if odds is not None:
            hvd.remove_process_set(odds)


@suite.check("broadcast_parameters_and_adam_state")
def _():
    # Every rank starts different; rank 1 has no Adam state yet (lazy): it must receive it.
    torch.manual_seed(100 + r)
    m = torch.nn.Linear(4, 2)
    adam = torch.optim.Adam(m.parameters(), lr=0.01 * (r + 1))
    if r != 1:
        mse(m(X[MINE]), Y[MINE].expand(-1, 2)).backward()
        adam.step()
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(adam, root_rank=0)
    state = adam.state_dict()
    assert state["param_groups"][0]["lr"] == 0.01, state["param_groups"][0]["lr"]
    assert len(state["state"]) == 2, state["state"].keys()
    tensors = list(m.parameters())
    for s in state["state"].values():
        tensors += [s["exp_avg"], s["exp_avg_sq"], torch.as_tensor(s["step"]).reshape(1)]
    identical_everywhere(tensors, "bcast.adam")
    # The ranks now take identical steps.
    adam.zero_grad()
    mse(m(X[:8]), Y[:8].expand(-1, 2)).backward()
    adam.step()
    identical_everywhere(m.parameters(), "bcast.adam.after_step")


@suite.check("broadcast_parameters_named_and_sgd_momentum")
def _():
    torch.manual_seed(200 + r)
    m = torch.nn.Linear(3, 3)
    sgd = torch.optim.SGD(m.parameters(), lr=0.1 * (r + 1), momentum=0.5 + 0.1 * r)
    m(torch.ones(1, 3)).sum().backward()
    sgd.step()
    root = n - 1
    hvd.broadcast_parameters(m.named_parameters(), root_rank=root)
    hvd.broadcast_optimizer_state(sgd, root_rank=root)
    group = sgd.param_groups[0]
    assert group["lr"] == 0.1 * n and group["momentum"] == 0.5 + 0.1 * root, group
    identical_everywhere(list(m.parameters()) +
                         [sgd.state[p]["momentum_buffer"] for p in m.parameters()], "bcast.sgd")


@suite.check("broadcast_state_of_a_wrapped_optimizer")
def _():
    # Horovod's ImageNet example broadcasts after wrapping: the DistributedOptimizer's own
    # state_dict/load_state_dict must carry Adam's state, and training continues in step.
    torch.manual_seed(300 + r)
    m = torch.nn.Linear(4, 1)
    opt = hvd.DistributedOptimizer(torch.optim.Adam(m.parameters(), lr=0.01 * (r + 1)),
                                   named_parameters=m.named_parameters())
    opt.zero_grad()
    mse(m(X[MINE]), Y[MINE]).backward()
    opt.step()
    if r == 1:
        opt.state.clear()  # a rank without state (e.g. restarted) must get the root's
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.param_groups[0]["lr"] == 0.01, opt.param_groups[0]["lr"]
    for _ in range(2):
        opt.zero_grad()
        mse(m(X[MINE]), Y[MINE]).backward()
        opt.step()
    state = [opt.state[p]["exp_avg_sq"] for p in m.parameters()]
    identical_everywhere(list(m.parameters()) + state, "bcast.wrapped")


@suite.check("join_with_uneven_batches")
def _():
    # Rank k has 2 + k batches; joined ranks contribute zeros to the others' averages.
    m = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.05),
                                   named_parameters=m.named_parameters())
    for b in range(2 + r):
        opt.zero_grad()
        rows = slice(8 * r + b, 8 * r + b + 2)
        mse(m(X[rows]), Y[rows]).backward()
        opt.step()
    last = hvd.join()
    assert last == n - 1, last
    # The rank that ran longest saw, at step b, the sum of the gradients of the ranks still
    # training, divided by n: replay that in one process.
    if r == n - 1:
        ref = model()
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
        for b in range(2 + r):
            ref_opt.zero_grad()
            for k in range(n):
                if b < 2 + k:
                    rows = slice(8 * k + b, 8 * k + b + 2)
                    (mse(ref(X[rows]), Y[rows]) / n).backward()
            ref_opt.step()
        same(m, ref, 1e-5)
    # Horovod's pattern after join: adopt the model of the rank that trained last.
    hvd.broadcast_parameters(m.state_dict(), root_rank=last)
    identical_everywhere(m.parameters(), "join.identical")


@suite.check("join.collectives_while_others_joined")
def _():
    # Only the last rank still works: barrier passes, sum and average allreduce count the
    # joined ranks as zeros; other ops (allgather too, as in Horovod) fail naming the joined
    # ranks, and the job carries on.
    if r == n - 1:
        hvd.barrier()
        s = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="joined.sum")
        assert s.tolist() == [1.0, 1.0], s
        a = hvd.allreduce(torch.ones(2), name="joined.average")
        assert torch.allclose(a, torch.ones(2) / n), a
        joined = ", ".join(str(k) for k in range(n - 1))
        for what, call in (("broadcast", lambda: hvd.broadcast(torch.ones(2), 0, name="j.bc")),
                           ("allgather", lambda: hvd.allgather(torch.tensor([[r, r]]),
                                                               name="j.allgather")),
                           ("max", lambda: hvd.allreduce(torch.ones(2), op=hvd.Max,
                                                         name="j.max"))):
            try:
                call()
                raise AssertionError("%s accepted while ranks %s had joined" % (what, joined))
            except hvd.HorovodInternalError as e:
                assert "after rank(s) %s joined" % joined in str(e), e
    assert hvd.join() == n - 1
    same_sum = hvd.allreduce(torch.ones(1), op=hvd.Sum, name="joined.after")
    assert same_sum.item() == n, same_sum


suite.run(finish=hvd.shutdown)
