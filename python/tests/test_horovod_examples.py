"""An existing Horovod script, unchanged, under `cadre run`: horovod_pytorch_mnist.py has the
shape of Horovod's examples/pytorch/pytorch_mnist.py (torchvision's MNIST, DistributedSampler,
broadcast_parameters, broadcast_optimizer_state, DistributedOptimizer with named_parameters and
fp16 compression, metric_average through allreduce) and imports `horovod.torch`. Fashion-MNIST
from Debian's dataset-fashion-mnist stands in for MNIST (same file names and format), unpacked
where torchvision looks, so nothing is downloaded."""
import gzip
import os
import re
import shutil
import subprocess
import textwrap

import pytest

from hvd_jobs import BUILD, HERE, PYTHON, ROOT, cadre_run

pytest.importorskip("torch")
pytest.importorskip("torchvision")
pytest.importorskip("filelock")

SCRIPT = os.path.join(HERE, "horovod_pytorch_mnist.py")
FASHION = "/usr/share/datasets/fashion-mnist"
FILES = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
         "t10k-labels-idx1-ubyte"]


@pytest.fixture
def data_dir(tmp_path):
    if not os.path.isdir(FASHION):
        pytest.skip("needs Debian's dataset-fashion-mnist")
    raw = tmp_path / "data" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in FILES:  # what docs/horovod.md tells users to do with gunzip
        with gzip.open(os.path.join(FASHION, name + ".gz"), "rb") as src, \
                open(raw / name, "wb") as dst:
            shutil.copyfileobj(src, dst)
    return str(tmp_path / "data")


def test_horovod_mnist_script_runs_unchanged_under_cadre_run(tmp_path, data_dir):
    # The command of docs/horovod.md: 2 learners x 2 slots, `python3` as the user types it.
    job = cadre_run(tmp_path, ["-q", "-n", "2", "--compute", "cpux2", "--framework",
                               "pytorch-horovod", "--", "python3", SCRIPT, "--fp16-allreduce",
                               "--batches-per-epoch", "40", "--data-dir", data_dir],
                    timeout=400)
    assert job.returncode == 0 and not job.timed_out, job.describe()
    assert sorted(job.logs) == [0, 1, 2, 3], job.describe()
    # Every worker trains on its own quarter of the 60000 images.
    for rank in range(4):
        assert "Train Epoch: 1 [0/15000]" in job.logs[rank], job.describe()
    # The first rank alone prints the metrics averaged over the workers.
    tests = re.findall(r"Test set: Average loss: ([0-9.]+), Accuracy: ([0-9.]+)%", job.logs[0])
    assert len(tests) == 1, job.describe()
    loss, accuracy = map(float, tests[0])
    assert accuracy > 40.0 and loss < 2.0, tests  # ten classes: 10% by chance
    print("test loss %.4f, accuracy %.2f%%" % (loss, accuracy))
    assert all("Test set" not in job.logs[k] for k in (1, 2, 3)), job.describe()
    assert "Replicas identical: True (4 workers)" in job.logs[0], job.describe()


def test_horovod_run_in_a_script_says_to_use_cadre_run(tmp_path):
    # The example's --num-proc path calls horovod.run(), which cadre does not serve.
    proc = subprocess.run([PYTHON, SCRIPT, "--num-proc", "2", "--data-dir", str(tmp_path)],
                          cwd=str(tmp_path), capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                              [os.path.join(BUILD, "python"), os.path.join(ROOT, "python")])))
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "NotImplementedError: horovod.run() starts its own workers" in proc.stderr, \
        proc.stderr[-3000:]
    assert "cadre run -n LEARNERS" in proc.stderr


def test_horovod_mnist_script_from_a_manifest(tmp_path, data_dir):
    # The user's other path: a manifest, `python3` as the command, the data from
    # training_data_reference (the script reads $DATA_DIR), 2 learners x k80x2 (CPU slots here).
    (tmp_path / "job.yaml").write_text(textwrap.dedent("""\
        name: horovod-mnist-test
        framework: {name: pytorch-horovod}
        execution:
          command: python3 %s --batches-per-epoch 60 --log-interval 10
          compute_configuration: {name: k80x2, nodes: 2}
        training_data_reference: {type: fs, location: {path: %s}}
        training_results_reference: {type: fs, location: {path: runs}}
        """ % (SCRIPT, data_dir)))
    job = cadre_run(tmp_path, ["-q", "job.yaml"], timeout=400)
    assert job.returncode == 0 and not job.timed_out, job.describe()
    assert len(job.slots) == 4, job.status
    losses = [float(x) for x in re.findall(r"Loss: ([0-9.]+)", job.logs[0])]
    assert len(losses) == 6, job.describe()
    assert losses[-1] < losses[0], losses
    assert "Replicas identical: True (4 workers)" in job.logs[0], job.describe()
