"""The Fashion-MNIST Horovod example under `cadre run --max-restarts 1`: SIGKILL of a learner
mid-epoch (from outside, as the kernel's OOM killer would) restarts the job, the example resumes
from its last epoch's checkpoint, and the test accuracy is within 1% of an undisturbed run's."""
import json
import os
import re
import subprocess
import time

import pytest

from runner_helpers import CADRE, ROOT

DATA = "/usr/share/datasets/fashion-mnist"
EXAMPLE = os.path.join(ROOT, "examples", "fashion_mnist", "train_horovod.py")
ARGS = ["--epochs", "2", "--max-batches", "60", "--log-interval", "10"]

pytestmark = pytest.mark.skipif(not os.path.isdir(DATA),
                                reason="needs Debian's dataset-fashion-mnist")


def start(tmp_path, name):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for key in ("CADRE_HOSTS_METHOD", "PYTHONPATH"):
        env.pop(key, None)
    return subprocess.Popen(
        [CADRE, "run", "-q", "-n", "2", "--compute", "cpu", "--framework", "pytorch-horovod",
         "--max-restarts", "1", "--grace", "30", "-o", str(tmp_path / name), "--",
         "/usr/bin/python3", EXAMPLE, *ARGS],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc):
    try:
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, err


def accuracy(job_dir):
    return float((job_dir / "accuracy.txt").read_text())


def command_pid(keeper):
    """The slot's command: the only child of its keeper process."""
    with open(f"/proc/{keeper}/task/{keeper}/children") as f:
        (pid,) = f.read().split()
    return int(pid)


def test_killed_learner_restarts_and_reaches_the_undisturbed_accuracy(tmp_path):
    undisturbed = start(tmp_path, "undisturbed")
    code, err = finish(undisturbed)
    assert code == 0, err
    expected = accuracy(tmp_path / "undisturbed")

    proc = start(tmp_path, "killed")
    job = tmp_path / "killed"
    rank0 = job / "learner-1" / "slot-0.log"
    try:
        deadline = time.monotonic() + 400
        while not (rank0.exists() and "epoch 2 batch 20/" in rank0.read_text()):
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "epoch 2 never started"
            time.sleep(0.1)
        status = json.loads((job / "status.json").read_text())
        keeper = status["learners"][1]["slots"][0]["pid"]
        os.kill(command_pid(keeper), 9)
    except BaseException:
        proc.kill()
        raise
    code, err = finish(proc)
    assert code == 0, err
    # The cause is the killed learner, unless its peer's own failure was seen first.
    assert re.search(r"restart 1 of 1 after learner-\d slot 0 (was killed by SIGKILL|exited)",
                     err), err
    log = rank0.read_text()
    assert "cadre: restart 1 of 1" in log and "resuming after epoch 1" in log, log
    assert abs(accuracy(job) - expected) <= 0.01, (accuracy(job), expected)
