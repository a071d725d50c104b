"""cadre.ps: the server-side optimizers against torch.optim, state and buffers, bad input, servers
that die, and `cadre bench ps`. Changing hyper-parameters are in test_ps_hyperparams.py, the jobs
through `cadre run` in test_ps_jobs.py."""
import copy
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

torch = pytest.importorskip("torch")
import cadre.ps as ps  # noqa: E402
from cadre import _core  # noqa: E402
from ps_helpers import batches, make_model  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("CADRE_BUILD_DIR", os.path.join(ROOT, "build"))



@pytest.mark.parametrize("make_opt", [
    lambda p: torch.optim.SGD(p, lr=0.1),
    lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01),
    lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True),
    lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.001),
], ids=["sgd", "momentum", "nesterov", "adam"])
def test_server_side_optimizer_matches_torch(make_opt):
    server = ps.PsServer("127.0.0.1:0", 1, "tok", 30.0)
    try:
        local, remote = make_model(1), make_model(2)  # the servers' values come from `remote`
        local.load_state_dict(remote.state_dict())
        opt_local = make_opt(local.parameters())
        opt_remote = ps.DistributedOptimizer(
            make_opt(remote.parameters()), model=remote,
            servers=["127.0.0.1:%d" % server.port], worker_id=0, token="tok")
        for x, y in batches(3):
            for model, opt in ((local, opt_local), (remote, opt_remote)):
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
        for (name, a), b in zip(local.named_parameters(), remote.parameters()):
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-5), name
        opt_remote.done()
        assert server.wait(10)
    finally:
        server.shutdown()


def test_frozen_parameters_stay_as_they_are():
    # torch's optimizers skip parameters without gradients, weight decay included; the servers
    # must leave frozen ones alone too (pushed as zeros, weight decay would shrink them).
    server = ps.PsServer("127.0.0.1:0", 1, "tok", 30.0)
    try:
        local, remote = make_model(6), make_model(7)
        local.load_state_dict(remote.state_dict())
        for model in (local, remote):
            model[0].requires_grad_(False)
        opt_local, inner = (torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9,
                                            weight_decay=0.1) for m in (local, remote))
        opt_remote = ps.DistributedOptimizer(inner, model=remote,
                                             servers=["127.0.0.1:%d" % server.port],
                                             worker_id=0, token="tok")
        frozen = remote[0].weight.detach().clone()
        for x, y in batches(8):
            for model, opt in ((local, opt_local), (remote, opt_remote)):
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
        assert torch.equal(remote[0].weight, frozen)
        for (name, a), b in zip(local.named_parameters(), remote.parameters()):
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-5), name
        opt_remote.pull_parameters()  # frozen ones are not waited for at later steps
        assert torch.equal(remote[0].weight, frozen)
        remote[0].weight.requires_grad_(True)
        with pytest.raises(ValueError, match="'0.weight' has requires_grad=True now but had False"):
            opt_remote.step()
        opt_remote.done()
        assert server.wait(10)
    finally:
        server.shutdown()


@pytest.mark.filterwarnings("error:.*lr_scheduler")  # no "step() before optimizer.step()"
@pytest.mark.parametrize("make_opt", [
    lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.01),
    lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.8, 0.95)),
], ids=["momentum", "adam"])
def test_state_dict_is_torch_format_and_restores_on_fresh_servers(make_opt):
    # The servers' optimizer state comes back in torch.optim's format (equal to a local run's),
    # and a fresh server given it continues as the uninterrupted local run does.
    local, remote = make_model(1), make_model(2)
    local.load_state_dict(remote.state_dict())
    opt_local = make_opt(local.parameters())
    data = batches(3, n=8)

    def train(model, opt, part):
        for x, y in part:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()

    train(local, opt_local, data[:4])
    for attempt in range(2):
        server = ps.PsServer("127.0.0.1:0", 1, "tok", 30.0)
        try:
            opt = ps.DistributedOptimizer(make_opt(remote.parameters()), model=remote,
                                          servers=["127.0.0.1:%d" % server.port], worker_id=0,
                                          token="tok")
            if attempt == 0:
                train(remote, opt, data[:4])
                saved = opt.state_dict()
                want = opt_local.state_dict()
                assert saved["param_groups"] == want["param_groups"]
                assert sorted(saved["state"]) == sorted(want["state"])
                for i, st in want["state"].items():
                    assert sorted(saved["state"][i]) == sorted(st)
                    for key, v in st.items():
                        assert torch.allclose(saved["state"][i][key], v, rtol=1e-4,
                                              atol=1e-6), (i, key)
            else:
                opt.load_state_dict(saved)
                assert not opt.optimizer.state  # the servers hold it, not the worker
                train(remote, opt, data[4:])
            opt.done()
            assert server.wait(10)
        finally:
            server.shutdown()
    train(local, opt_local, data[4:])
    for (name, a), b in zip(local.named_parameters(), remote.parameters()):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5), name
    # A state that does not fit is refused before anything changes.
    server = ps.PsServer("127.0.0.1:0", 1, "tok", 30.0)
    try:
        opt = ps.DistributedOptimizer(make_opt(remote.parameters()), model=remote,
                                      servers=["127.0.0.1:%d" % server.port], worker_id=0,
                                      token="tok")
        bad = opt.state_dict()
        bad["param_groups"][0]["weight_decay"] = -0.5
        with pytest.raises(ValueError, match="weight_decay is -0.5"):
            opt.load_state_dict(bad)
        assert opt.optimizer.param_groups[0]["weight_decay"] != -0.5
        opt.done()
    finally:
        server.shutdown()


def test_sync_workers_share_one_trajectory():
    # Two workers with different data: each sync step applies the mean gradient once, so both
    # end with the same parameters, equal to one model trained on the mean gradient.
    server = ps.PsServer("127.0.0.1:0", 2, "tok", 30.0)
    addr = ["127.0.0.1:%d" % server.port]
    starts, finals = {}, {}

    def worker(w):
        model = make_model(10 + w)  # different initial values: the first declare wins
        opt = ps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model=model,
                                      servers=addr, worker_id=w, token="tok")
        starts[w] = [p.detach().clone() for p in model.parameters()]  # the servers' values
        for x, y in batches(20 + w):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        opt.done()
        finals[w] = [p.detach().clone() for p in model.parameters()]

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert server.wait(10)
    finally:
        server.shutdown()
    assert sorted(finals) == [0, 1]
    for a, b in zip(finals[0], finals[1]):
        assert torch.equal(a, b)
    for a, b in zip(starts[0], starts[1]):
        assert torch.equal(a, b)  # both started from the first declare's values

    # One model, from the same start, stepped with the mean of the two workers' gradients.
    reference = make_model(0)
    with torch.no_grad():
        for p, v in zip(reference.parameters(), starts[0]):
            p.copy_(v)
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for (x0, y0), (x1, y1) in zip(batches(20), batches(21)):
        grads = []
        for x, y in ((x0, y0), (x1, y1)):
            reference.zero_grad()
            torch.nn.functional.mse_loss(reference(x), y).backward()
            grads.append([p.grad.clone() for p in reference.parameters()])
        for p, g0, g1 in zip(reference.parameters(), *grads):
            p.grad = (g0 + g1) * 0.5
        opt.step()
    for (name, want), got in zip(reference.named_parameters(), finals[0]):
        assert torch.allclose(got, want.detach(), rtol=1e-5, atol=1e-6), (name, got, want)
    # A trajectory that did not move would match trivially.
    assert not torch.allclose(finals[0][0], starts[0][0])


def test_a_missing_or_empty_token_refuses_to_start():
    # An empty token used to mean "accept every request"; now nothing starts without one.
    for make in (lambda **kw: ps.PsServer("127.0.0.1:0", 1, **kw),
                 lambda **kw: ps.PsClient(["127.0.0.1:1"], 0, **kw),
                 lambda **kw: _core.TcpStoreServer("127.0.0.1", 0, **kw)):
        with pytest.raises(_core.CadreInvalidArgument, match="token is required"):
            make()
        with pytest.raises(_core.CadreInvalidArgument, match="no job token"):
            make(token="")


def test_bad_input_is_reported_not_applied():
    server = ps.PsServer("127.0.0.1:0", 1, "tok", 30.0)
    addr = ["127.0.0.1:%d" % server.port]
    try:
        w = torch.arange(6, dtype=torch.float32)
        # Another job's token: the TLS handshake fails both ways, before any request is read.
        intruder = _core.PsClient(addr, 0, "wrong", connect_timeout=3)
        with pytest.raises(_core.CadreError, match="does not hold this job's credentials"):
            intruder.declare([("w", [6], w.data_ptr(), {"kind": "sgd", "lr": 0.1}, True)])
        client = _core.PsClient(addr, 0, "tok", connect_timeout=10)
        with pytest.raises(_core.CadreInvalidArgument, match="optimizer.lr"):
            client.declare([("w", [6], w.data_ptr(), {"kind": "sgd", "lr": -1.0}, True)])
        client.declare([("w", [6], w.data_ptr(), {"kind": "sgd", "lr": 0.1}, True)])
        g = torch.ones(6)
        with pytest.raises(_core.CadreError, match="'nope' was not declared"):
            client.push(0, [("nope", g.data_ptr(), 6)])
        with pytest.raises(_core.CadreInvalidArgument, match="has 6 elements"):
            client.push(0, [("w", g.data_ptr(), 5)])
        outsider = _core.PsClient(addr, 3, "tok", connect_timeout=10)
        out = torch.empty(6)
        client.pull(0, [("w", out.data_ptr(), 6)])
        assert torch.equal(out, w)  # nothing was applied
        with pytest.raises(_core.CadreInvalidArgument, match="worker id 3 is outside the job"):
            outsider.declare([("w", [6], w.data_ptr(), {"kind": "sgd", "lr": 0.1}, True)])
    finally:
        server.shutdown()


def test_server_gives_up_on_workers_that_die_without_done():
    # Worker 0 finishes properly; worker 1 declares and then vanishes without saying done (as a
    # killed process would). wait() must end with an error naming worker 1, not block forever.
    server = ps.PsServer("127.0.0.1:0", 2, "tok", 30.0, worker_timeout=0.5)
    addr = ["127.0.0.1:%d" % server.port]
    try:
        w = torch.zeros(4)
        for worker in (0, 1):
            c = _core.PsClient(addr, worker, "tok", connect_timeout=10)
            c.declare([("w", [4], w.data_ptr(), {"kind": "sum"}, True)])
            if worker == 0:
                c.done()
            del c
        with pytest.raises(_core.CadreError, match="worker 1 sent no request .* did not say done"):
            server.wait(60)
    finally:
        server.shutdown()
    with pytest.raises(_core.CadreInvalidArgument, match="worker_timeout"):
        ps.PsServer("127.0.0.1:0", 1, "tok", 30.0, worker_timeout=-1)


def _bench_rows(text):
    """The table rows of `cadre bench ps`: lists of fields, header and comments skipped."""
    return [line.split() for line in text.splitlines()
            if line and line[0].isdigit()]


def test_bench_ps_loopback_and_emulated():
    cadre = os.path.join(BUILD, "cadre")
    if not os.path.exists(cadre):
        pytest.fail("%s is not built" % cadre)
    proc = subprocess.run([cadre, "bench", "ps", "--servers", "1", "2", "--workers", "2",
                           "--sizes", "4K", "--iterations", "2"],
                          timeout=120, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = _bench_rows(proc.stdout)
    assert [(r[0], r[1], r[2] + r[3]) for r in rows] == [("1", "2", "4KiB"), ("2", "2", "4KiB")]
    assert all(float(r[4]) > 0 for r in rows)  # step ms
    bad = subprocess.run([cadre, "bench", "ps", "--sizes", "4X"], timeout=60,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert bad.returncode == 2 and "--sizes '4X'" in bad.stderr

    if os.geteuid() != 0:
        pytest.skip("emulated nodes need root")
    # One process per server and worker on emulated nodes; 256 KiB at 1 Gbit/s is 2.1 ms of link
    # time, and a step cannot beat the link (the column is a fraction of the bound).
    proc = subprocess.run([cadre, "bench", "ps", "--emulate-network", "1gbit", "--servers", "1",
                           "--workers", "1", "2", "--sizes", "256K", "--iterations", "2"],
                          timeout=180, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0 and "netns" in proc.stderr:
        pytest.skip("no network namespaces here: " + proc.stderr.strip()[-200:])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "emulated nodes, link 1gbit" in proc.stdout
    rows = _bench_rows(proc.stdout)
    assert [(r[0], r[1]) for r in rows] == [("1", "1"), ("1", "2")]
    for r in rows:
        step_ms, bound_ms, fraction = float(r[4]), float(r[7]), float(r[8].rstrip("%"))
        assert bound_ms == pytest.approx(2.097 * int(r[1]), rel=0.01)
        assert step_ms >= bound_ms * 0.95 and 0 < fraction <= 105


SERVER = textwrap.dedent("""
    import sys
    import cadre.ps as ps
    server = ps.PsServer("127.0.0.1:0", 1, "tok", 30.0)
    print(server.port, flush=True)
    server.wait()
""")


def test_a_server_that_dies_mid_training_fails_the_worker_naming_it():
    # Two servers in their own processes; server 1 is killed between steps. The worker's next
    # step must fail naming that server, not wait for a timeout and not blame server 0.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    procs = [subprocess.Popen([sys.executable, "-c", SERVER], env=env, stdout=subprocess.PIPE,
                              text=True) for _ in range(2)]
    try:
        addrs = ["127.0.0.1:%s" % p.stdout.readline().strip() for p in procs]
        model = make_model(3)
        # rpc_timeout only bounds a regression: the failure must come from the lost connection.
        opt = ps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model=model,
                                      servers=addrs, worker_id=0, token="tok", rpc_timeout=120)
        assert {p[3] for p in opt._client.partitions("0.weight") +
                opt._client.partitions("2.weight")} == {0, 1}  # both servers hold variables
        data = batches(9)
        for x, y in data[:2]:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        procs[1].kill()
        procs[1].wait()
        x, y = data[2]
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        with pytest.raises(_core.CadreError) as failed:
            opt.step()
        message = str(failed.value)
        assert "ps server 1 (%s)" % addrs[1] in message, message
        assert "did not complete in time" not in message and "Deadline" not in message, message
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _serve_in_processes(count, workers):
    """`count` servers for `workers` workers, each in its own process; returns (procs, addrs)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    code = SERVER.replace('"127.0.0.1:0", 1,', '"127.0.0.1:0", %d,' % workers)
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              text=True) for _ in range(count)]
    return procs, ["127.0.0.1:%s" % p.stdout.readline().strip() for p in procs]


def test_a_stopped_server_fails_every_worker_naming_it_long_before_rpc_timeout():
    # Two servers and two sync workers (threads, each with its own client). A worker that is
    # late keeps the other's calls waiting longer than stall_timeout with no data on the wire:
    # servers that are alive answer the liveness pings, so that step succeeds. Then server 1 is
    # stopped (SIGSTOP: its connections stay open, nothing answers): every worker's next step
    # must fail naming it, through the liveness pings, not after rpc_timeout (300 s here; the
    # join below would then fail first).
    # Pings are answered within stall / 2 even on a loaded machine; a real stall fails after it.
    stall = 3.0
    procs, addrs = _serve_in_processes(2, workers=2)
    try:
        data = batches(11)
        models = [make_model(3) for _ in range(2)]
        opts = [ps.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
                                        model=m, servers=addrs, worker_id=w, token="tok",
                                        rpc_timeout=300, stall_timeout=stall)
                for w, m in enumerate(models)]
        assert {p[3] for p in opts[0]._client.partitions("0.weight") +
                opts[0]._client.partitions("2.weight")} == {0, 1}  # both servers hold variables
        stopped = threading.Event()
        outcome = [None, None]

        def train(w):
            model, opt = models[w], opts[w]
            try:
                for i, (x, y) in enumerate(data[:4]):
                    if i == 1 and w == 1:
                        time.sleep(2.5 * stall)  # worker 0 waits in a sync step meanwhile
                    if i == 2:
                        stopped.wait()
                    opt.zero_grad()
                    torch.nn.functional.mse_loss(model(x), y).backward()
                    opt.step()
                outcome[w] = "finished"
            except _core.CadreError as e:
                outcome[w] = e

        threads = [threading.Thread(target=train, args=(w,)) for w in range(2)]
        for t in threads:
            t.start()
        while not all(o.steps >= 2 for o in opts):
            time.sleep(0.05)
        procs[1].send_signal(signal.SIGSTOP)
        stopped.set()
        for t in threads:
            t.join(200)
        assert not any(t.is_alive() for t in threads), "a worker still waits on a stopped server"
        for w in range(2):
            message = str(outcome[w])
            assert isinstance(outcome[w], _core.CadreError), (w, message)
            assert "ps server 1 (%s)" % addrs[1] in message and "stalled" in message, message
            assert "push-pull of '" in message and "partition" in message, message
            assert opts[w].steps == 2, (w, opts[w].steps)
    finally:
        for p in procs:
            p.send_signal(signal.SIGCONT)
            p.kill()
            p.wait()


def test_state_of_a_variable_split_across_servers_comes_back_whole():
    # 2.8 MB of weights: split into partitions (1 MiB at most) over two servers. The state
    # dict joins them, and load_state_dict splits them again, each piece to its server.
    servers = [ps.PsServer("127.0.0.1:0", 1, "tok", 30.0) for _ in range(2)]
    addrs = ["127.0.0.1:%d" % s.port for s in servers]
    try:
        torch.manual_seed(0)
        local = torch.nn.Linear(1000, 700)
        remote = torch.nn.Linear(1000, 700)
        remote.load_state_dict(local.state_dict())
        make = lambda p: torch.optim.Adam(p, lr=0.01)  # noqa: E731
        opt_local = make(local.parameters())
        opt = ps.DistributedOptimizer(make(remote.parameters()), model=remote, servers=addrs,
                                      worker_id=0, token="tok")
        assert {p[3] for p in opt._client.partitions("weight")} == {0, 1}
        for i in range(2):
            x = torch.randn(4, 1000)
            for model, o in ((local, opt_local), (remote, opt)):
                o.zero_grad()
                model(x).pow(2).mean().backward()
                o.step()
        saved, want = opt.state_dict(), opt_local.state_dict()
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.allclose(saved["state"][0][key], want["state"][0][key], rtol=1e-4,
                                  atol=1e-9), key
        # Restored onto the same servers after a zeroed state: the pieces land where they were.
        zeroed = opt.state_dict()
        for st in zeroed["state"].values():
            st["exp_avg"].zero_()
        opt.load_state_dict(zeroed)
        assert torch.equal(opt.state_dict()["state"][0]["exp_avg"], torch.zeros(700, 1000))
        opt.load_state_dict(saved)
        back = opt.state_dict()["state"][0]
        assert torch.equal(back["exp_avg"], saved["state"][0]["exp_avg"])
        assert torch.equal(back["exp_avg_sq"], saved["state"][0]["exp_avg_sq"])
        opt.done()
    finally:
        for s in servers:
            s.shutdown()


def test_a_state_dict_one_server_refuses_changes_no_server():
    # Two servers; the state of a variable on server 1 holds a NaN, which that server refuses.
    # The variables on server 0 must keep their state too (it is staged everywhere first, and
    # committed only once every server accepted its part), and the error names the server and
    # the variable.
    servers = [ps.PsServer("127.0.0.1:0", 1, "tok", 30.0) for _ in range(2)]
    addrs = ["127.0.0.1:%d" % s.port for s in servers]
    try:
        model = make_model(12)
        opt = ps.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01), model=model,
                                      servers=addrs, worker_id=0, token="tok")
        on = {n: opt._client.partitions(n)[0][3] for n, _ in model.named_parameters()}
        assert set(on.values()) == {0, 1}, on
        for x, y in batches(13, n=2):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        before = opt.state_dict()
        names = [n for n, _ in model.named_parameters()]
        bad = copy.deepcopy(before)
        for i, name in enumerate(names):
            bad["state"][i]["exp_avg"].fill_(float(i + 1))
        victim = names.index([n for n in names if on[n] == 1][-1])
        bad["state"][victim]["exp_avg_sq"][0] = float("nan")
        bad["param_groups"][0]["lr"] = 0.5
        with pytest.raises(_core.CadreError) as refused:
            opt.load_state_dict(bad)
        message = str(refused.value)
        assert "ps server 1 (%s)" % addrs[1] in message, message
        assert "'%s'" % names[victim] in message and "not finite" in message, message
        assert "nothing was changed" in message, message
        after = opt.state_dict()
        assert after["param_groups"][0]["lr"] == 0.01
        for i in range(len(names)):
            for key in ("exp_avg", "exp_avg_sq"):
                assert torch.equal(after["state"][i][key], before["state"][i][key]), (i, key)
        # The same state without the NaN is taken whole, by both servers.
        bad["state"][victim]["exp_avg_sq"][0] = 0.0
        opt.load_state_dict(bad)
        after = opt.state_dict()
        for i in range(len(names)):
            assert torch.equal(after["state"][i]["exp_avg"], bad["state"][i]["exp_avg"]), i
        opt.done()
    finally:
        for s in servers:
            s.shutdown()


def test_only_state_dict_buffers_are_shared():
    # Non-persistent buffers are caches every worker computes alike; bool ones cannot travel.
    server = ps.PsServer("127.0.0.1:0", 1, "tok", 30.0)
    try:
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
        model.register_buffer("table", torch.arange(4.0), persistent=False)
        model.register_buffer("mask", torch.ones(4, dtype=torch.bool))
        opt = ps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model=model,
                                      servers=["127.0.0.1:%d" % server.port], worker_id=0,
                                      token="tok")
        shared = sorted(name for name, *_ in opt._buffers.entries)
        assert shared == ["1.num_batches_tracked", "1.running_mean", "1.running_var"]
        x = torch.randn(8, 3)
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
        assert int(model[1].num_batches_tracked) == 1  # came back from the server, rounded
        assert torch.equal(model.table, torch.arange(4.0))
        opt.done()
        unshared = ps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                           model=model, servers=["127.0.0.1:%d" % server.port],
                                           worker_id=0, token="tok", sync_buffers=False)
        assert not unshared._buffers.entries
        with pytest.raises(ValueError, match="sync_buffers=True needs model="):
            ps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                    named_parameters=model.named_parameters(),
                                    servers=["127.0.0.1:%d" % server.port], worker_id=0,
                                    token="tok", sync_buffers=True)
    finally:
        server.shutdown()
