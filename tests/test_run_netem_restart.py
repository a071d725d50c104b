"""A link cut between emulated nodes (`cadre run --emulate-network`): a learner's link goes down
mid-training, the others fail within CADRE_TIMEOUT_SECONDS naming the unreachable learner, and
`--max-restarts` restarts the job with every link back up, to the end of training."""
import os
import re
import shutil
import subprocess

import pytest

from runner_helpers import CADRE, ROOT

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                                reason="emulated nodes need root and iproute2")


def test_a_cut_link_fails_within_the_timeout_naming_the_learner_then_restarts(tmp_path):
    pytest.importorskip("torch")
    env = dict(os.environ, CADRE_TIMEOUT_SECONDS="10", OMP_NUM_THREADS="1")
    for key in ("CADRE_HOSTS_METHOD", "PYTHONPATH"):
        env.pop(key, None)
    job = tmp_path / "job"
    proc = subprocess.run(
        [CADRE, "run", "-q", "-o", str(job), "-n", "2", "--compute", "cpu", "--framework",
         "pytorch-horovod", "--emulate-network", "1gbit", "--max-restarts", "1", "--grace", "5",
         "--", "/usr/bin/python3", os.path.join(ROOT, "tests", "netem_cut_job.py")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        timeout=400)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"cadre: restart 1 of 1 after learner-\d slot 0 exited with code 3",
                     proc.stderr), proc.stderr
    rank0 = (job / "learner-1" / "slot-0.log").read_text()
    failed = [line for line in rank0.splitlines() if line.startswith("FAILED")]
    # Rank 0 noticed by itself (exit 3), naming the learner it could not reach.
    assert failed and "waiting for rank 1 (host learner-2)" in failed[0], rank0
    assert "DONE restart=1" in rank0, rank0
