"""cadre.ps: the optimizer's hyper-parameters as they change during training (schedulers, param
groups) reach the servers, and the ones they cannot apply are refused."""
import threading

import pytest

torch = pytest.importorskip("torch")
import cadre.ps as ps  # noqa: E402
from ps_helpers import batches, make_model  # noqa: E402


def test_lr_scheduler_reaches_the_servers():
    # StepLR on the wrapped optimizer halves lr every 2 steps; the servers must apply each
    # step's rate, so the trajectory matches torch's own run with the same scheduler.
    server = ps.PsServer("127.0.0.1:0", 1, "tok", 30.0)
    try:
        local, remote = make_model(4), make_model(5)
        local.load_state_dict(remote.state_dict())
        inner_local = torch.optim.SGD(local.parameters(), lr=0.4)
        inner_remote = torch.optim.SGD(remote.parameters(), lr=0.4)
        opt = ps.DistributedOptimizer(inner_remote, model=remote,
                                      servers=["127.0.0.1:%d" % server.port],
                                      worker_id=0, token="tok")
        # The wrapper is an Optimizer to torch, as Horovod's is: the scheduler takes it.
        assert isinstance(opt, torch.optim.Optimizer)
        schedulers = [torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5)
                      for o in (inner_local, opt)]
        with pytest.raises(ValueError, match="add the param group to the wrapped optimizer"):
            opt.add_param_group({"params": [torch.zeros(2, requires_grad=True)]})
        for i, (x, y) in enumerate(batches(5)):
            before = remote[0].bias.detach().clone()
            for model, o, sched in ((local, inner_local, schedulers[0]),
                                    (remote, opt, schedulers[1])):
                o.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                o.step()
                sched.step()
            # Plain SGD: the step moved the bias by exactly lr * grad, lr = 0.4 * 0.5^(i // 2).
            lr = 0.4 * 0.5 ** (i // 2)
            moved = before - remote[0].bias.detach()
            assert torch.allclose(moved, lr * remote[0].bias.grad, rtol=1e-4, atol=1e-7), i
            for (name, a), b in zip(local.named_parameters(), remote.parameters()):
                assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), (i, name)
        assert inner_remote.param_groups[0]["lr"] == pytest.approx(0.4 / 8)
        opt.done()
        assert server.wait(10)
    finally:
        server.shutdown()


def _sgd_changes(step, group):
    # Momentum switched on (torch makes the buffer then), dampening, weight decay, momentum off
    # (the buffer is kept as it is), then back on with Nesterov.
    changes = {1: {"momentum": 0.9, "dampening": 0.1}, 2: {"weight_decay": 0.01},
               3: {"momentum": 0.0}, 4: {"momentum": 0.5, "dampening": 0.0, "nesterov": True},
               5: {"lr": 0.05, "weight_decay": 0.0}}
    group.update(changes.get(step, {}))


def _adam_changes(step, group):
    changes = {1: {"betas": (0.8, 0.99)}, 2: {"eps": 1e-4, "weight_decay": 0.01},
               3: {"betas": (0.5, 0.9), "lr": 0.02}, 5: {"weight_decay": 0.0}}
    group.update(changes.get(step, {}))


@pytest.mark.parametrize("make_opt,change", [
    (lambda p: torch.optim.SGD(p, lr=0.1), _sgd_changes),
    (lambda p: torch.optim.Adam(p, lr=0.01), _adam_changes),
], ids=["sgd", "adam"])
def test_changed_hyperparameters_reach_the_servers(make_opt, change):
    # Every hyper-parameter of the param groups may change between steps, as in torch.optim:
    # the servers' trajectory and state must match torch's own run with the same changes, step
    # by step. Two sync workers, so that both send the changes.
    server = ps.PsServer("127.0.0.1:0", 2, "tok", 30.0)
    try:
        local = make_model(21)
        remotes = [make_model(21) for _ in range(2)]
        opt_local = make_opt(local.parameters())
        opts = [ps.DistributedOptimizer(make_opt(m.parameters()), model=m,
                                        servers=["127.0.0.1:%d" % server.port], worker_id=w,
                                        token="tok") for w, m in enumerate(remotes)]
        data = batches(22, n=7)

        def remote_step(w, x, y):
            opts[w].zero_grad()
            torch.nn.functional.mse_loss(remotes[w](x), y).backward()
            opts[w].step()

        for i, (x, y) in enumerate(data):
            for o in [opt_local] + [o.optimizer for o in opts]:
                change(i, o.param_groups[0])
            opt_local.zero_grad()
            torch.nn.functional.mse_loss(local(x), y).backward()
            opt_local.step()
            # Both workers push the same batch: the mean gradient is the local one.
            threads = [threading.Thread(target=remote_step, args=(w, x, y)) for w in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for (name, a), b in zip(local.named_parameters(), remotes[0].parameters()):
                assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), (i, name)
        saved, want = opts[0].state_dict(), opt_local.state_dict()
        assert saved["param_groups"] == want["param_groups"]
        for k, st in want["state"].items():
            for key, v in st.items():
                if torch.is_tensor(v) and v.dim() > 0:
                    assert torch.allclose(saved["state"][k][key], v, rtol=1e-4, atol=1e-7), key
        for o in opts:
            o.done()
        assert server.wait(10)
    finally:
        server.shutdown()


def test_one_cycle_momentum_reaches_the_servers():
    # OneCycleLR cycles the momentum with the learning rate (cycle_momentum=True by default).
    server = ps.PsServer("127.0.0.1:0", 1, "tok", 30.0)
    try:
        local, remote = make_model(23), make_model(23)
        make = lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)  # noqa: E731
        opt_local = make(local.parameters())
        opt = ps.DistributedOptimizer(make(remote.parameters()), model=remote,
                                      servers=["127.0.0.1:%d" % server.port], worker_id=0,
                                      token="tok")
        scheds = [torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.2, total_steps=8)
                  for o in (opt_local, opt)]
        momenta = set()
        for i, (x, y) in enumerate(batches(24, n=8)):
            for model, o, sched in ((local, opt_local, scheds[0]), (remote, opt, scheds[1])):
                o.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                o.step()
                sched.step()
            momenta.add(opt.param_groups[0]["momentum"])
            for (name, a), b in zip(local.named_parameters(), remote.parameters()):
                assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), (i, name)
        assert len(momenta) > 3  # the momentum did change
        opt.done()
        assert server.wait(10)
    finally:
        server.shutdown()


def test_hyperparameters_the_servers_cannot_apply_are_refused():
    server = ps.PsServer("127.0.0.1:0", 1, "tok", 30.0)
    try:
        model = make_model(4)
        inner = torch.optim.Adam(model.parameters(), lr=0.1)
        opt = ps.DistributedOptimizer(inner, model=model, servers=["127.0.0.1:%d" % server.port],
                                      worker_id=0, token="tok")
        (x, y), = batches(5, n=1)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        before = [p.detach().clone() for p in model.parameters()]
        group = inner.param_groups[0]
        for key, value, match in (("amsgrad", True, r"Adam\(amsgrad=True\) is not served"),
                                  ("maximize", True, "maximize=True is not served"),
                                  ("betas", (1.0, 0.999), r"betas\[0\] is 1.0; it must be in"),
                                  ("eps", -1.0, "eps is -1.0"),
                                  ("lr", float("nan"), "param group 0's lr is nan")):
            saved = group[key]
            group[key] = value
            with pytest.raises(ValueError, match=match):
                opt.step()
            group[key] = saved
        assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
        opt.step()  # back to values the servers apply: steps go on
        opt.done()
        assert server.wait(10)
    finally:
        server.shutdown()
