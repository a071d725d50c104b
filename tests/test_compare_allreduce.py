"""bench/compare_allreduce measures every contender alike: the ranks of gloo and Open MPI bound
to the CPUs `cadre run` would give them (launch/cpu_binding.h), and --rounds interleaved rounds
reported as medians with each round's time."""
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from runner_helpers import BUILD, ROOT

SCRIPT = os.path.join(ROOT, "bench", "compare_allreduce")
ENV = dict(os.environ, CADRE_BUILD_DIR=BUILD,
           PYTHONPATH=os.pathsep.join([os.path.join(BUILD, "python"), os.path.join(ROOT, "python")]))


@pytest.fixture
def compare(monkeypatch):
    loader = importlib.machinery.SourceFileLoader("compare_allreduce", SCRIPT)
    spec = importlib.util.spec_from_loader("compare_allreduce", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    monkeypatch.delenv("CADRE_CPU_BIND", raising=False)
    return module


def fake_cpus(monkeypatch, usable, online):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(usable))
    monkeypatch.setattr(os, "cpu_count", lambda: online)


def test_cpu_plan_is_cadre_runs(compare, monkeypatch):
    fake_cpus(monkeypatch, range(8), 8)
    assert compare.cpu_plan(2) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert compare.cpu_plan(3) == [[0, 1], [2, 3, 4], [5, 6, 7]]  # i*C/S .. (i+1)*C/S
    assert compare.cpu_plan(9) is None  # more ranks than CPUs: nobody bound
    monkeypatch.setenv("CADRE_CPU_BIND", "none")
    assert compare.cpu_plan(2) is None


class Args:
    n = 2


def test_open_mpi_binds_like_cadre(compare, monkeypatch):
    fake_cpus(monkeypatch, range(4), 4)
    cmd = compare.mpi_command(Args, "prog", [4])
    assert cmd[cmd.index("--map-by") + 1] == "slot:PE=2" and "core" in cmd
    fake_cpus(monkeypatch, [1, 2, 3], 4)  # a share per rank Open MPI's mapping cannot name
    cmd = compare.mpi_command(Args, "prog", [4])
    assert [cmd[i + 2] for i, a in enumerate(cmd) if a == "taskset"] == ["1", "2,3"]
    fake_cpus(monkeypatch, [0], 1)
    cmd = compare.mpi_command(Args, "prog", [4])
    assert cmd[cmd.index("--bind-to") + 1] == "none" and "--oversubscribe" in cmd


def test_rounds_are_reported(compare):
    proc = subprocess.run([sys.executable, SCRIPT, "-n", "2", "--sizes", "4,4K", "--rounds", "2",
                           "--no-gloo", "--no-mpi", "--json"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=120, env=ENV)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["bytes"] for r in rows] == [4, 4096]
    for r in rows:
        assert len(r["cadre_rounds_us"]) == 2
        assert sorted(r["cadre_rounds_us"])[0] <= r["cadre_us"] <= sorted(r["cadre_rounds_us"])[1]


@pytest.mark.parametrize("args, message", [
    (["-n", "1"], "-n must be at least 2"),
    (["--rounds", "0"], "--rounds must be at least 1"),
    (["--sizes", "6"], "multiple of 4 bytes"),
    (["--sizes", "99G"], "--sizes: at most 4G"),
    (["--build", "/nonexistent"], "--build /nonexistent: no cadre program there"),
])
def test_bad_arguments_are_refused_before_anything_runs(args, message):
    proc = subprocess.run([sys.executable, SCRIPT, *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=60, env=ENV)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr


def test_a_failing_contender_reports_its_own_error(compare, capsys):
    with pytest.raises(SystemExit) as ended:
        compare.run_contender("cadre bench allreduce",
                              [sys.executable, "-c", "import sys; sys.exit('cadre: it broke')"])
    assert "compare_allreduce: cadre bench allreduce failed (exit code 1): cadre: it broke" in str(
        ended.value)
