"""`cadre run` on machines with GPUs, played by a fake `nvidia-smi` first on PATH (the runner
counts the machine's GPUs with `nvidia-smi -L`): every slot sees its learner's GPUs with its own
at its local rank, a job asking for more GPUs than the machine has stops with a clear error
before any slot starts, and cpu configurations see no GPU."""
import os
import stat
import textwrap

import pytest

from test_run_contract import DUMP_ENV, load_envs

# What a slot does first in Horovod's examples: pin local_rank's device, which must exist.
PIN_DEVICE = textwrap.dedent("""
    import os
    visible = os.environ["CUDA_VISIBLE_DEVICES"].split(",")
    local = int(os.environ["LOCAL_RANK"])
    assert local < len(visible), "invalid device ordinal %d of %s" % (local, visible)
    print("slot", os.environ["CADRE_RANK"], "uses GPU", visible[local])
""")


def fake_gpus(tmp_path, count):
    """A PATH whose nvidia-smi lists `count` GPUs."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    lines = "".join("GPU %d: Fake GPU (UUID: GPU-fake-%d)\\n" % (i, i) for i in range(count))
    smi.write_text("#!/bin/sh\nprintf '%s'\n" % lines)
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    return {"PATH": "%s:%s" % (bin_dir, os.environ.get("PATH", "/usr/bin:/bin"))}


def test_each_slot_sees_its_learners_gpus_and_local_rank_indexes_its_own(cadre_run, tmp_path):
    (tmp_path / "dump_env.py").write_text(DUMP_ENV + PIN_DEVICE)
    job = cadre_run("-n", "2", "--compute", "k80x2", "--framework", "pytorch-horovod",
                    "--", "python3", "dump_env.py", env=fake_gpus(tmp_path, 4))
    assert job.returncode == 0, job.stderr
    envs = load_envs(job.job_dir)
    assert sorted(envs) == [0, 1, 2, 3]
    for rank, env in envs.items():
        learner, local = rank // 2, rank % 2
        assert env["GPU_COUNT"] == "2"
        assert env["CUDA_VISIBLE_DEVICES"] == ("0,1" if learner == 0 else "2,3")
        assert f"slot {rank} uses GPU {2 * learner + local}" in job.stdout
    assert "run as CPU processes" not in job.stderr


def test_more_gpus_than_the_machine_has_is_a_clear_error(cadre_run, tmp_path):
    (tmp_path / "dump_env.py").write_text(DUMP_ENV)
    job = cadre_run("-n", "2", "--compute", "k80x2", "--framework", "pytorch-horovod",
                    "--", "python3", "dump_env.py", env=fake_gpus(tmp_path, 3))
    assert job.returncode != 0
    assert ("'k80x2' asks for 2 GPU(s) per learner x 2 learner(s) = 4 GPUs, but this machine "
            "has 3") in job.stderr, job.stderr
    runs = tmp_path / "runs"
    assert not any(runs.rglob("env-*.json")) if runs.exists() else True


def test_cpu_configurations_see_no_gpu(cadre_run, tmp_path):
    (tmp_path / "dump_env.py").write_text(DUMP_ENV)
    job = cadre_run("-n", "2", "--compute", "cpux2", "--framework", "pytorch-horovod",
                    "--", "python3", "dump_env.py", env=fake_gpus(tmp_path, 2))
    assert job.returncode == 0, job.stderr
    for env in load_envs(job.job_dir).values():
        assert env["CUDA_VISIBLE_DEVICES"] == "" and env["GPU_COUNT"] == "0"


@pytest.mark.parametrize("framework,compute,learners", [
    ("pytorch", "k80x2", 2), ("pytorch-ddl", "k80", 2)])
def test_parameter_server_and_ddl_learners(cadre_run, tmp_path, framework, compute, learners):
    (tmp_path / "dump_env.py").write_text(DUMP_ENV)
    args = ["-n", str(learners), "--compute", compute, "--framework", framework]
    if framework == "pytorch":
        args += ["--parameter-servers", "1"]
    job = cadre_run(*args, "--", "python3", "dump_env.py", env=fake_gpus(tmp_path, 4))
    assert job.returncode == 0, job.stderr
    envs = load_envs(job.job_dir)
    per = 2 if compute == "k80x2" else 1
    for rank, env in envs.items():
        learner = int(env["LEARNER_ID"])
        want = ",".join(str((learner - 1) * per + i) for i in range(per))
        assert env["CUDA_VISIBLE_DEVICES"] == want, (rank, env["CUDA_VISIBLE_DEVICES"])
