"""bench/train.py as a reader of docs/benchmarks.md runs it: found from any directory without
PYTHONPATH, bad counts refused before anything starts, and a short run printing every table."""
import os
import subprocess

import pytest

from runner_helpers import BUILD, ROOT

SCRIPT = os.path.join(ROOT, "bench", "train.py")
PYTHON = "/usr/bin/python3"  # Debian's torch


def run(args, tmp_path, timeout=120):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["CADRE_BUILD_DIR"] = BUILD
    return subprocess.run([PYTHON, SCRIPT, *args], cwd=tmp_path, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)


def test_help_needs_no_pythonpath(tmp_path):
    proc = run(["--help"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    for flag in ["--sizes", "--steps", "--repeats", "--model", "--fp16", "--batch-wait"]:
        assert flag in proc.stdout


@pytest.mark.parametrize("args, message", [
    (["--steps", "0"], "argument --steps: must be at least 1, got 0"),
    (["--sizes", "2", "-1"], "argument --sizes: must be at least 1, got -1"),
    (["--repeats", "x"], "argument --repeats"),
    (["--warmup", "-1"], "argument --warmup"),
    (["--model", "resnet"], "invalid choice"),
])
def test_bad_arguments_are_refused(tmp_path, args, message):
    proc = run(args, tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert proc.stdout == ""  # nothing ran


def test_a_short_run_prints_every_table(tmp_path):
    proc = run(["--sizes", "2", "--steps", "1", "--repeats", "1", "--warmup", "0",
                "--grad-steps", "1"], tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert "n alone at once" in next(line for line in lines if line.startswith("ranks "))
    row = next(line for line in lines if line.startswith("2 "))
    # cadre, DDP, perfect and n alone at once, each "median (spread%)"
    rates = [float(x) for x in row.split()[1:9:2]]
    assert len(rates) == 4 and all(r > 0 for r in rates), row
    # Where rank 0's threads spent each step: CPU, and waiting for a CPU (schedstat).
    cpu = next(line for line in lines if "CPU ms per step of rank 0's threads" in line)
    runq = next(line for line in lines if "waited in the run queue" in line)
    for line in (cpu, runq):
        assert "cadre main " in line and "DDP main " in line and "alone main " in line, line
    assert "cadre-engine " in cpu, cpu
    assert any("Synthetic ResNet-50 gradients" in line for line in lines)
    assert any(line.startswith("1 learner x 2 slots (shm)") for line in lines)
    assert any(line.startswith("2 learners x 1 slot (TCP)") for line in lines)
