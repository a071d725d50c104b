"""Issue 16's target: the same training script and manifest reach the same final accuracy (within
1%) whichever engine starts the learners. The Fashion-MNIST Horovod example, a short run (2
learners x 2 slots, 20 batches a rank, the same seed), on the local backend, on a real Slurm
cluster started on this machine (slurm_cluster.py) and on Open MPI with emulated nodes."""
import os
import shutil
import subprocess

import pytest

from runner_helpers import CADRE, ROOT, Job, write_mpi_agent

DATA = "/usr/share/datasets/fashion-mnist"
EXAMPLE = os.path.join(ROOT, "examples", "fashion_mnist", "train_horovod.py")
JOB = ["-n", "2", "--compute", "cpux2", "--framework", "pytorch-horovod", "--data-dir", DATA,
       "--", "python3", EXAMPLE, "--epochs", "1", "--max-batches", "20", "--seed", "7"]


def train(cwd, backend_args, env=None):
    os.makedirs(cwd)
    proc = subprocess.run([CADRE, "run", *backend_args, *JOB], cwd=cwd, env=env or os.environ,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=900)
    job = Job(proc, str(cwd))
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr
    assert "on 4 ranks" in job.stdout, job.stdout[-3000:]
    with open(os.path.join(job.job_dir, "accuracy.txt")) as f:
        return float(f.read())


@pytest.mark.skipif(not os.path.isdir(DATA),
                    reason="Fashion-MNIST is not installed (scripts/install-deps installs it)")
def test_the_same_accuracy_on_every_engine(tmp_path, slurm):
    if shutil.which("mpirun") is None:
        pytest.skip("Open MPI is not installed here (no mpirun): scripts/install-deps installs it")
    accuracy = {"local": train(tmp_path / "local", [])}

    agent = write_mpi_agent(tmp_path)  # emulated nodes (runner_helpers.MPI_AGENT)
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("127.0.0.2\n127.0.0.3\n")
    accuracy["mpi"] = train(tmp_path / "mpi",
                            ["--backend", "mpi", "--hostfile", str(hosts), "--store-host",
                             "127.0.0.1"],
                            env=dict(os.environ, OMPI_MCA_plm_rsh_agent=agent))

    accuracy["slurm"] = train(tmp_path / "slurm",
                              ["--backend", "slurm", "--store-host", "127.0.0.1"], env=slurm.env)

    print("final test accuracy by engine:", accuracy)
    assert accuracy["local"] > 0.5, accuracy  # it learned (chance is 0.1)
    for engine in ("mpi", "slurm"):
        assert abs(accuracy[engine] - accuracy["local"]) <= 0.01, accuracy
