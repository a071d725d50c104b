"""DistributedOptimizer and friends as multi-process jobs, against single-process results."""
import os

import pytest

torch = pytest.importorskip("torch")
from cadre.torch.testing import run_ranks  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def check(results):
    for res in results:
        assert res.returncode == 0, "rank %d failed:\n%s\n%s" % (res.rank, res.stdout, res.stderr)
        assert "OK %d" % res.rank in res.stdout


@pytest.mark.parametrize("size", [2, 3])
def test_distributed_optimizer_matches_single_process_training(size):
    check(run_ranks([os.path.join(HERE, "torch_job_training.py")], size, timeout=150))
