"""Parameter-server jobs through `cadre run` with the sample launcher: 1 server and 2 workers
training to a shared set of values, and a job resumed from a checkpoint on fresh servers."""
import json
import os
import subprocess
import textwrap

import pytest

torch = pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("CADRE_BUILD_DIR", os.path.join(ROOT, "build"))
LAUNCHER = os.path.join(ROOT, "examples", "fashion_mnist", "launcher.py")


JOB = textwrap.dedent("""
    import json, os, torch
    import cadre.ps as ps
    me = ps.learner_role()
    torch.manual_seed(100 + me["worker_id"])
    model = torch.nn.Linear(4, 1)
    true_w = torch.tensor([[1.0, -2.0, 0.5, 3.0]])
    opt = ps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model=model,
                                  mode="sync")
    losses = []
    for step in range(40):
        x = torch.randn(16, 4)
        loss = torch.nn.functional.mse_loss(model(x), x @ true_w.t())
        opt.zero_grad(); loss.backward(); opt.step()
        losses.append(loss.item())
    opt.done()
    out = os.path.join(os.environ["RESULT_DIR"], "worker-%d.json" % me["worker_id"])
    with open(out, "w") as f:
        json.dump({"first": losses[0], "last": losses[-1], "steps": opt.steps,
                   "weight": model.weight.detach().flatten().tolist()}, f)
    print("worker", me["worker_id"], "done", flush=True)
""")


def _run_ps_job(tmp_path, script, *args, workers=2, servers=1, timeout=180):
    cadre = os.path.join(BUILD, "cadre")
    if not os.path.exists(cadre):
        pytest.fail("%s is not built" % cadre)
    env = dict(os.environ)
    env.pop("CADRE_HOSTS_METHOD", None)
    return subprocess.run(
        [cadre, "run", "-n", str(workers + servers), "--framework", "pytorch",
         "--parameter-servers", str(servers), "--grace", "5", "--", "python3", LAUNCHER, script]
        + [str(a) for a in args],
        cwd=tmp_path, env=env, timeout=timeout, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)


def test_ps_job_one_server_two_workers(tmp_path):
    (tmp_path / "job.py").write_text(JOB)
    proc = _run_ps_job(tmp_path, "job.py", timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = tmp_path / "runs"
    (job_dir,) = list(runs.iterdir())
    results = [json.loads((job_dir / ("worker-%d.json" % w)).read_text()) for w in range(2)]
    for r in results:
        assert r["steps"] == 40
        assert r["last"] < 0.1 * r["first"], r
    assert results[0]["weight"] == results[1]["weight"]  # sync: one shared set of values
    assert results[0]["weight"] == pytest.approx([1.0, -2.0, 0.5, 3.0], abs=0.3)
    status = json.loads((job_dir / "status.json").read_text())
    assert status["state"] == "completed"
    server = status["learners"][0]
    assert server["role"] == "parameter-server"
    # The server returned by itself once both workers were done (or the runner stopped it
    # when the workers finished first); either way it is no longer running.
    assert "every worker is done" in proc.stdout or server["slots"][0]["stopped_by_runner"]


RESUME_JOB = textwrap.dedent("""
    # argv: MODE (full | first | resume) CHECKPOINT OUT
    import os, sys, torch
    import cadre.ps as ps
    mode, ckpt, out = sys.argv[1:4]
    me = ps.learner_role()
    w = me["worker_id"]
    torch.manual_seed(7)  # the same initial values whichever worker declares first
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.Tanh(),
                                torch.nn.Linear(6, 1))
    if mode == "resume":
        saved = torch.load(ckpt)
        model.load_state_dict(saved["model"])
    inner = torch.optim.Adam(model.parameters(), lr=0.05, weight_decay=0.01)
    opt = ps.DistributedOptimizer(inner, model=model)
    sched = torch.optim.lr_scheduler.StepLR(opt.optimizer, step_size=3, gamma=0.5)
    if mode == "resume":
        opt.load_state_dict(saved["optimizer"])
        sched.load_state_dict(saved["scheduler"])
    steps = {"full": range(0, 10), "first": range(0, 5), "resume": range(5, 10)}[mode]
    for step in steps:
        g = torch.Generator().manual_seed(1000 * w + step)  # each worker its own data
        x = torch.randn(16, 4, generator=g) * (1 + w)
        y = x.sum(dim=1, keepdim=True)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        sched.step()
    if mode == "first" and w == 0:
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                    "scheduler": sched.state_dict()}, ckpt)
    opt.done()
    torch.save({"model": model.state_dict(), "lr": inner.param_groups[0]["lr"]},
               "%s.worker-%d" % (out, w))
""")


def test_ps_job_resumed_from_a_checkpoint_continues_exactly(tmp_path):
    # Three jobs (1 server, 2 workers, Adam + StepLR + BatchNorm): 10 steps at once, and 5
    # steps, a checkpoint, and 5 more in a new job with fresh servers. Adam's moments and step
    # live on the servers; without them in the checkpoint the resumed run would differ.
    (tmp_path / "job.py").write_text(RESUME_JOB)
    ckpt = tmp_path / "ckpt.pt"
    for mode in ("full", "first", "resume"):
        proc = _run_ps_job(tmp_path, "job.py", mode, ckpt, tmp_path / mode)
        assert proc.returncode == 0, mode + proc.stdout + proc.stderr
    full = [torch.load(str(tmp_path / ("full.worker-%d" % w))) for w in range(2)]
    resumed = [torch.load(str(tmp_path / ("resume.worker-%d" % w))) for w in range(2)]
    first = torch.load(str(tmp_path / "first.worker-0"))
    assert full[0]["lr"] == resumed[0]["lr"] == pytest.approx(0.05 / 8)
    for name, want in full[0]["model"].items():
        for r in resumed:
            assert torch.allclose(r["model"][name].float(), want.float(), rtol=1e-6,
                                  atol=1e-7), (name, r["model"][name], want)
        if want.is_floating_point():  # the second half of training moved everything
            assert not torch.equal(first["model"][name], want), name
    # The workers' BatchNorm statistics are synchronised: after training every worker holds the
    # same buffers (the workers' mean at each step), although their data differ in scale.
    for state in (full, resumed):
        for name in ("1.running_mean", "1.running_var", "1.num_batches_tracked"):
            assert torch.equal(state[0]["model"][name], state[1]["model"][name]), name
    assert int(full[0]["model"]["1.num_batches_tracked"]) == 10
    assert not torch.allclose(full[0]["model"]["1.running_var"], torch.ones(6))
