"""Failures as users meet them: a Horovod-style script training, and a rank dying mid-training."""
import os
import re

import pytest

torch = pytest.importorskip("torch")
from cadre.torch.testing import run_ranks  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = "/usr/share/datasets/fashion-mnist"


@pytest.mark.skipif(not os.path.isdir(DATA), reason="needs Debian's dataset-fashion-mnist")
def test_unmodified_horovod_mnist_script_trains():
    results = run_ranks([os.path.join(HERE, "horovod_mnist.py"), "--max-batches", "60",
                         "--log-interval", "10", "--lr", "0.02"], 2, timeout=240)
    for res in results:
        assert res.returncode == 0, "rank %d:\n%s\n%s" % (res.rank, res.stdout, res.stderr)
    losses = [float(x) for x in re.findall(r"Loss: ([0-9.]+)", results[0].stdout)]
    assert len(losses) == 6, results[0].stdout
    assert losses[-1] < losses[0], losses


def test_killed_rank_makes_the_others_fail_naming_it():
    results = run_ranks([os.path.join(HERE, "torch_job_killed.py")], 3, timeout=120,
                        env={"CADRE_TIMEOUT_SECONDS": "5"})
    assert results[1].returncode == -9
    for res in (results[0], results[2]):
        assert res.returncode == 3, "rank %d:\n%s\n%s" % (res.rank, res.stdout, res.stderr)
        assert "rank 1" in res.stdout, res.stdout
