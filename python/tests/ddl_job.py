"""One rank of the cadre.ddl API test (run by test_ddl.py as 2 learners x 2 slots). Every check
uses values in closed form from the ranks; prints "OK <rank>" when all pass."""
import os
import sys

import torch

import cadre.ddl as ddl
import cadre.torch as hvd


def main():
    ddl.init(os.environ.get("TEST_DDL_OPTIONS"))
    r, n = ddl.rank(), ddl.size()
    want_hosts = int(os.environ.get("TEST_HOSTS", "1"))
    assert ddl.num_hosts() == want_hosts, (ddl.num_hosts(), want_hosts)
    assert n == ddl.local_size() * ddl.num_hosts(), (n, ddl.local_size(), ddl.num_hosts())
    assert r == ddl.host_rank() * ddl.local_size() + ddl.local_rank(), r
    assert ddl.device() == torch.device("cpu")  # no CUDA on the test machines

    # bcast: every rank ends with root's values, for every root.
    for root in range(n):
        t = torch.full((5,), float(r)) + torch.arange(5.0)
        assert ddl.bcast(t, root) is t
        assert torch.equal(t, torch.full((5,), float(root)) + torch.arange(5.0)), (root, t)

    # allreduce_n: a list of tensors of different sizes (uneven against the slot count) and dtypes.
    tensors = [torch.full((7,), float(r + 1)), torch.arange(13, dtype=torch.float64) * (r + 1),
               torch.full((3, 2), r + 1, dtype=torch.int64), torch.zeros(0)]
    total = n * (n + 1) // 2
    out = ddl.allreduce_n(tensors, op="sum")
    assert out[0] is tensors[0]
    assert torch.equal(tensors[0], torch.full((7,), float(total))), tensors[0]
    assert torch.equal(tensors[1], torch.arange(13, dtype=torch.float64) * total), tensors[1]
    assert torch.equal(tensors[2], torch.full((3, 2), total, dtype=torch.int64)), tensors[2]
    avg = [torch.full((1001,), float(r))]
    ddl.allreduce_n(avg, op="avg")
    assert torch.allclose(avg[0], torch.full((1001,), (n - 1) / 2.0)), avg[0][:3]
    # A non-contiguous tensor is reduced in place through a staging copy.
    nc = torch.arange(12.0).reshape(3, 4).t() * (r + 1)
    ddl.allreduce_n([nc], op="sum")
    assert torch.equal(nc, torch.arange(12.0).reshape(3, 4).t() * total), nc
    # cadre.torch's op constants are taken too.
    ones = [torch.ones(2)]
    ddl.allreduce_n(ones, op=hvd.Sum)
    assert torch.equal(ones[0], torch.full((2,), float(n))), ones
    try:
        ddl.allreduce_n([torch.ones(1)], op="max")
        raise AssertionError("op max accepted")
    except ValueError as e:
        assert "'sum' or 'avg'" in str(e)

    # grads_reduce: gradients grouped by DDL_GROUP_SIZE (set tiny by the test: several groups).
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 3))
    for i, p in enumerate(model.parameters()):
        p.grad = torch.full_like(p, float(r * 10 + i))
    ddl.grads_reduce(model)
    for i, p in enumerate(model.parameters()):
        want = sum(q * 10 + i for q in range(n)) / n
        assert torch.allclose(p.grad, torch.full_like(p, want)), (i, p.grad.flatten()[:3], want)

    # A parameter backward did not reach on rank 0 only (a branch its batch did not take)
    # counts as zeros there: every rank reduces the same tensors, none waits for a missing one.
    for i, p in enumerate(model.parameters()):
        p.grad = None if (r == 0 and i == 3) else torch.full_like(p, float(r + 1))
    model[0].weight.requires_grad_(False)
    model[0].weight.grad = None  # frozen: skipped on every rank
    ddl.grads_reduce(model)
    assert model[0].weight.grad is None
    total = sum(q + 1 for q in range(n))
    for i, p in enumerate(list(model.parameters())[1:], 1):
        want = (total - 1 if i == 3 else total) / n
        assert torch.allclose(p.grad, torch.full_like(p, want)), (i, p.grad.flatten()[:3], want)

    # wrap: same start everywhere, averaged gradients, so the replicas stay identical.
    torch.manual_seed(100 + r)  # different initial weights per rank on purpose
    model = torch.nn.Linear(6, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, opt = ddl.wrap(model, opt)
    # An LR scheduler made after wrap() wraps the reducing step like any optimizer's step.
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    for step in range(3):
        x = torch.full((4, 6), float(r + step))
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        scheduler.step()
    assert opt.param_groups[0]["lr"] == 0.1 * 0.5 ** 3, opt.param_groups[0]["lr"]
    # Wrapping again would reduce every gradient twice: refused, naming what was wrapped.
    for again in ((model, torch.optim.SGD(model.parameters(), lr=0.1)),
                  (torch.nn.Linear(6, 2), opt)):
        try:
            ddl.wrap(*again)
            raise AssertionError("a second wrap was accepted")
        except ValueError as e:
            assert "already wrapped" in str(e), e
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    everyone = [flat.clone() for _ in range(n)]
    for q in range(n):
        ddl.bcast(everyone[q], q)
    for q in range(n):
        assert torch.equal(everyone[q], flat), "rank %d's weights differ from rank %d's" % (q, r)

    check_wrap_matches_one_process(r, n)
    check_wrap_step_closure(r, n)

    ddl.shutdown()
    print("OK %d" % r)


def shard(step, micro, k):
    """Rank k's batch of micro-batch `micro` of `step` (the same on every rank for every k)."""
    g = torch.Generator().manual_seed(1000 * step + 10 * micro + k)
    return torch.randn(3, 5, generator=g), torch.randn(3, 2, generator=g)


def check_wrap_matches_one_process(r, n):
    """wrap() reduces at the end of backward, as DDP: clipping the gradient norm between
    backward() and step() clips the averaged (or summed) gradients. Each rank also trains a
    one-process reference on every rank's batches: the gradient of the mean of the ranks' mean
    losses is the average gradient (of their sum, the summed one); the two must agree, the
    clipped norms too. Clipping the local gradients before reducing them gives other weights
    (max_norm is well below the gradients' norms, so every step clips)."""
    for average, micros in [(True, 1), (True, 2), (False, 2)]:
        torch.manual_seed(7)
        model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
        reference = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(),
                                        torch.nn.Linear(4, 2))
        reference.load_state_dict(model.state_dict())
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
        model, opt = ddl.wrap(model, opt, average=average)
        for step in range(3):
            opt.zero_grad()
            ref_opt.zero_grad()
            for micro in range(micros):  # gradient accumulation: backward twice per step
                x, y = shard(step, micro, r)
                torch.nn.functional.mse_loss(model(x), y).backward()
                losses = [torch.nn.functional.mse_loss(reference(xk), yk)
                          for xk, yk in (shard(step, micro, k) for k in range(n))]
                (sum(losses) / (n if average else 1)).backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.05)
            ref_norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), max_norm=0.05)
            assert ref_norm > 0.1, ref_norm  # clipping is active
            assert torch.allclose(norm, ref_norm, rtol=1e-5), (average, micros, step, norm,
                                                               ref_norm)
            opt.step()
            ref_opt.step()
        for p, q in zip(model.parameters(), reference.parameters()):
            assert torch.allclose(p, q, rtol=1e-5, atol=1e-6), (average, micros, p, q)


def check_wrap_step_closure(r, n):
    """step(closure) through wrap(): every evaluation reduces its gradients and the loss, so
    LBFGS (several evaluations per step, and a line search comparing losses) steps as one
    process on every rank's batch would, and every rank evaluates as often. A closure that
    clears the gradients with model.zero_grad() (not the optimizer's) sums correctly too."""
    xs = [shard(0, 0, k) for k in range(n)]
    for average, line_search in [(True, None), (True, "strong_wolfe"), (False, None)]:
        torch.manual_seed(7)
        model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(),
                                    torch.nn.Linear(4, 2)).double()
        reference = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(),
                                        torch.nn.Linear(4, 2)).double()
        reference.load_state_dict(model.state_dict())
        opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5,
                                line_search_fn=line_search)
        ref_opt = torch.optim.LBFGS(reference.parameters(), lr=0.5, max_iter=5,
                                    line_search_fn=line_search)
        model, opt = ddl.wrap(model, opt, average=average)
        x, y = (t.double() for t in xs[r])
        calls = [0, 0]

        def closure():
            calls[0] += 1
            model.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            return loss

        def ref_closure():
            calls[1] += 1
            ref_opt.zero_grad()
            losses = [torch.nn.functional.mse_loss(reference(a.double()), b.double())
                      for a, b in xs]
            loss = sum(losses) / (n if average else 1)
            loss.backward()
            return loss

        for step in range(2):
            loss = opt.step(closure)
            ref_loss = ref_opt.step(ref_closure)
            assert abs(float(loss) - float(ref_loss)) < 1e-9, (average, step, loss, ref_loss)
        assert calls[0] == calls[1] > 2, (average, line_search, calls)
        for p, q in zip(model.parameters(), reference.parameters()):
            assert torch.allclose(p, q, rtol=1e-9, atol=1e-10), (average, line_search, p, q)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # report which check failed, with the rank
        print("rank %s failed: %r" % (os.environ.get("CADRE_RANK"), e), file=sys.stderr)
        raise
