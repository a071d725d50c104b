# step(closure) of DistributedOptimizer against one process training on every rank's rows:
# SGD (one evaluation per step), LBFGS with and without its line search (several, comparing
# losses), op=Sum, and the edge cases (no loss, a number, gradients from before step(closure),
# ranks that disagree, Adasum). torch_job_training.py registers these checks with
# add_checks(suite) after hvd.init(), so they run in its job.
import torch
import torch.nn.functional as F

import horovod.torch as hvd
from hvd_suite import Deferred

ROWS = 6  # rows per rank
r = n = None  # set by add_checks (after hvd.init())
_CHECKS = Deferred()
check = _CHECKS.check
_gen = torch.Generator().manual_seed(99)
INPUTS = torch.randn(ROWS * 8, 3, generator=_gen)  # enough rows for 8 ranks
TARGETS = torch.sin(INPUTS.sum(1, keepdim=True)) + 0.05 * torch.randn(ROWS * 8, 1, generator=_gen)


def add_checks(suite):
    global r, n
    r, n = hvd.rank(), hvd.size()
    assert n <= 8, n
    _CHECKS.add_to(suite)


def mine():
    return slice(ROWS * r, ROWS * (r + 1))


def net():
    torch.manual_seed(11)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Sigmoid(), torch.nn.Linear(4, 1))


def close_models(a, b, tol):
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.allclose(pa, pb, atol=tol, rtol=tol), (pa, pb)


def identical_on_every_rank(tensors, name):
    mine_flat = torch.cat([t.detach().double().flatten() for t in tensors])
    rows = hvd.allgather(mine_flat[None], name=name)
    assert all(torch.equal(row, rows[0]) for row in rows), rows


def closure_training(make_opt, rows, steps, dtype=torch.float32, wrap=None):
    """Trains net() with step(closure) on the rows `rows`; wrap (DistributedOptimizer's keywords, or
    None for the one-process reference) turns the optimizer into a distributed one. Returns the
    model, the losses step() returned and the number of closure evaluations."""
    m = net().to(dtype)
    opt = make_opt(m.parameters())
    if wrap is not None:
        opt = hvd.DistributedOptimizer(opt, named_parameters=m.named_parameters(), **wrap)
    x, y = INPUTS[rows].to(dtype), TARGETS[rows].to(dtype)
    losses, calls = [], [0]

    def closure():
        calls[0] += 1
        opt.zero_grad()
        loss = F.mse_loss(m(x), y)
        loss.backward()
        return loss

    for _ in range(steps):
        losses.append(float(opt.step(closure)))
    return m, losses, calls[0]


@check("optimizer.step_closure_matches_one_process")
def _():
    # Each evaluation of the closure reduces its gradients and its loss, so a step(closure)
    # is the one-process step on the whole batch: SGD evaluates once per step, LBFGS several
    # times (its line search compares the losses, which must be the same on every rank).
    everything = slice(0, ROWS * n)
    cases = [
        ("sgd", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), 3, torch.float32, 1e-5),
        ("lbfgs", lambda ps: torch.optim.LBFGS(ps, lr=0.5, max_iter=6), 2, torch.float64, 1e-9),
        ("lbfgs_wolfe", lambda ps: torch.optim.LBFGS(ps, max_iter=8,
                                                     line_search_fn="strong_wolfe"),
         2, torch.float64, 1e-9),
    ]
    for what, make_opt, steps, dtype, tol in cases:
        m, losses, calls = closure_training(make_opt, mine(), steps, dtype, wrap={})
        ref, ref_losses, ref_calls = closure_training(make_opt, everything, steps, dtype)
        close_models(m, ref, tol)
        assert calls == ref_calls, (what, calls, ref_calls)
        assert calls > (2 * steps if what.startswith("lbfgs") else steps - 1), (what, calls)
        assert all(abs(a - b) <= tol * max(1.0, abs(b)) for a, b in zip(losses, ref_losses)), \
            (what, losses, ref_losses)
        identical_on_every_rank(list(m.parameters()) + [torch.tensor(losses)], "closure." + what)
    # op=Sum: the gradients and the loss summed (n times the whole batch's mean loss).
    m, losses, _ = closure_training(lambda ps: torch.optim.SGD(ps, lr=0.1 / n), mine(), 2,
                                    wrap={"op": hvd.Sum})
    ref, ref_losses, _ = closure_training(lambda ps: torch.optim.SGD(ps, lr=0.1), everything, 2)
    close_models(m, ref, 1e-5)
    assert abs(losses[0] - n * ref_losses[0]) < 1e-4 * n, (losses, ref_losses)


@check("optimizer.step_closure_edge_cases")
def _():
    m = net()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                   named_parameters=m.named_parameters())

    def closure(result):
        def evaluate():
            opt.zero_grad()
            loss = F.mse_loss(m(INPUTS[mine()]), TARGETS[mine()])
            loss.backward()
            return result(loss)
        return evaluate

    # A closure that returns None everywhere: the gradients are reduced, step() returns None.
    before = [p.detach().clone() for p in m.parameters()]
    assert opt.step(closure(lambda loss: None)) is None
    assert any(not torch.equal(a, p) for a, p in zip(before, m.parameters()))
    identical_on_every_rank(m.parameters(), "closure.none")
    # A Python number is averaged into a float.
    got = opt.step(closure(lambda loss: float(r)))
    assert got == (n - 1) / 2.0, got
    # Gradients of a backward pass before step(closure) are reduced first (they are in flight
    # and zero_grad() in the closure would refuse them), then the closure's.
    F.mse_loss(m(INPUTS[mine()]), TARGETS[mine()]).backward()
    opt.step(closure(lambda loss: loss))
    identical_on_every_rank(m.parameters(), "closure.after_backward")
    # Ranks that disagree on whether the closure returns a loss fail on every rank, naming them.
    if n > 1:
        try:
            opt.step(closure(lambda loss: None if r == 0 else loss))
            raise AssertionError("closures returning None and a loss were not told apart")
        except ValueError as e:
            assert "rank 0: None; rank 1: a number" in str(e), e
    # op=Adasum cannot wrap LBFGS (its delta optimizer steps without a closure).
    if n > 1 and n & (n - 1) == 0:
        try:
            hvd.DistributedOptimizer(torch.optim.LBFGS(m.parameters()), op=hvd.Adasum,
                                     named_parameters=m.named_parameters())
            raise AssertionError("Adasum accepted LBFGS")
        except ValueError as e:
            assert "LBFGS" in str(e), e
    # The engine carries on.
    same_again = hvd.allreduce(torch.ones(2), name="closure.after", op=hvd.Sum)
    assert torch.equal(same_again, torch.full((2,), float(n))), same_again
