"""cadre.torch with tensors on a device, on machines without one: the staging rules (copy-in
after the producer, submission after the copy-in, copy-out before the consumer, pooled host
buffers, results on the tensor's device) against the simulated device of sim_device.py, then the
Horovod-mode jobs with every tensor on that device, and the NCCL path with Gloo in NCCL's place.
The same job scripts run on a real GPU through scripts/gpu-check.sh."""
import os
import subprocess

import pytest

from hvd_jobs import BUILD, HERE, PYTHON, ROOT, check_results, run_script
from test_torch_collectives import REQUIRED as COLLECTIVES
from test_torch_training import REQUIRED as TRAINING

pytest.importorskip("torch")

SIM = {"CADRE_TEST_DEVICE": "sim"}


def test_staging_rules_on_one_rank(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CADRE_", "HOROVOD_"))}
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(BUILD, "python"),
                                         os.path.join(ROOT, "python"), HERE])
    proc = subprocess.run([PYTHON, os.path.join(HERE, "gpu_staging_checks.py")], env=env,
                          cwd=str(tmp_path), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0 and "DONE rank=0 failed=0" in proc.stdout, \
        proc.stdout[-4000:] + proc.stderr[-4000:]


def test_every_collective_on_a_device(tmp_path):
    # sim+copies: also runs hvd_on_device.py, which puts the same checks on a real GPU.
    job = run_script(tmp_path, "torch_job_on_device.py", 2, "cpu",
                     script_args=["torch_job_collectives.py"],
                     env={"CADRE_TEST_DEVICE": "sim+copies"}, timeout=300)
    check_results(job, 2, COLLECTIVES)


def test_training_on_a_device(tmp_path):
    job = run_script(tmp_path, "torch_job_on_device.py", 2, "cpu",
                     script_args=["torch_job_training.py"], env=SIM, timeout=300)
    check_results(job, 2, TRAINING)


@pytest.mark.parametrize("stand_in", ["", "gloo"], ids=["staged", "nccl-path-on-gloo"])
def test_models_on_a_device(tmp_path, stand_in):
    job = run_script(tmp_path, "torch_job_gpu.py", 2, "cpu",
                     env=dict(SIM, CADRE_TEST_NCCL_STAND_IN=stand_in), timeout=240)
    check_results(job, 2, ["many_allreduces_submitted_in_different_orders",
                           "distributed_optimizer_trains_a_model_on_the_device"])
    assert ("NCCL path on" if stand_in else "NCCL path off") in job.logs[0]
