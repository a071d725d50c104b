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


def test_every_collective_under_cadre_run(tmp_path):
    """The same job as 2 learners x 2 slots started by `cadre run` (TCP between learners,
    shared memory inside one), with `import horovod.torch` found through the runner's
    PYTHONPATH."""
    import subprocess

    root = os.path.dirname(os.path.dirname(HERE))
    build = os.environ.get("CADRE_BUILD_DIR", os.path.join(root, "build"))
    cadre = os.path.join(build, "cadre")
    if not os.path.exists(cadre):
        pytest.skip("no cadre binary in %s" % build)
    env = dict(os.environ, TEST_TMP=str(tmp_path))
    proc = subprocess.run(
        [cadre, "run", "-n", "2", "--compute", "cpux2", "--framework", "pytorch-horovod",
         "--results-dir", str(tmp_path), "--", "/usr/bin/python3",
         os.path.join(HERE, "torch_job_collectives.py")],
        env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    for rank in range(4):
        assert "OK %d" % rank in proc.stdout + proc.stderr
