"""cadre.torch collectives as multi-process jobs (3 ranks over the real engine and store)."""
import os

import pytest

torch = pytest.importorskip("torch")
from cadre.torch.testing import run_ranks  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def check(results):
    for res in results:
        assert res.returncode == 0, "rank %d failed:\n%s\n%s" % (res.rank, res.stdout, res.stderr)
        assert "OK %d" % res.rank in res.stdout


@pytest.mark.parametrize("size", [1, 3])
def test_every_collective_matches_closed_form(size, tmp_path):
    check(run_ranks([os.path.join(HERE, "torch_job_collectives.py")], size,
                    env={"TEST_TMP": str(tmp_path)}, timeout=150))


def test_capability_queries_work_before_init():
    import horovod.torch as hvd

    assert hvd.mpi_built() is False and hvd.nccl_built() is False
    assert isinstance(hvd.gloo_built(), bool)
    assert not hvd.is_initialized()
    with pytest.raises(ValueError):
        hvd.rank()
