"""`cadre run` on machines with GPUs, played by a fake `nvidia-smi` first on PATH (the runner
counts the machine's GPUs with `nvidia-smi -L`): every slot sees its learner's GPUs with its own
at its local rank, a job asking for more GPUs than the machine has stops with a clear error
before any slot starts, and cpu configurations see no GPU."""
import os
import shutil
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


def fake_gpus(tmp_path, count, mig_per_gpu=0, exit_code=0, visible=None):
    """An environment whose nvidia-smi lists `count` GPUs (each with `mig_per_gpu` MIG
    instances under it, as `nvidia-smi -L` shows them), and the runner's own
    CUDA_VISIBLE_DEVICES: unset when `visible` is None."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    lines = ""
    for i in range(count):
        lines += "GPU %d: Fake GPU (UUID: GPU-fake-%d)\\n" % (i, i)
        lines += "".join("  MIG 1g.10gb     Device  %d: (UUID: MIG-fake-%d-%d)\\n" % (m, i, m)
                         for m in range(mig_per_gpu))
    if count == 0:
        lines = "No devices were found\\n"
    smi.write_text("#!/bin/sh\nprintf '%s'\nexit %d\n" % (lines, exit_code))
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    env = {"PATH": "%s:%s" % (bin_dir, os.environ.get("PATH", "/usr/bin:/bin"))}
    env["CUDA_VISIBLE_DEVICES"] = visible  # None: removed (cadre_run drops None values)
    return env


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
    assert job.returncode == 2, job.stderr  # an invalid job: nothing started
    assert ("cadre run: --compute: compute configuration 'k80x2' asks for 2 GPU(s) per learner x "
            "2 learner(s) = 4 GPUs, but this machine has 3 (nvidia-smi -L)") in job.stderr, \
        job.stderr
    runs = tmp_path / "runs"
    assert not any(runs.rglob("env-*.json")) if runs.exists() else True


def test_cpu_configurations_see_no_gpu(cadre_run, tmp_path):
    (tmp_path / "dump_env.py").write_text(DUMP_ENV)
    job = cadre_run("-n", "2", "--compute", "cpux2", "--framework", "pytorch-horovod",
                    "--", "python3", "dump_env.py", env=fake_gpus(tmp_path, 2))
    assert job.returncode == 0, job.stderr
    for env in load_envs(job.job_dir).values():
        assert env["CUDA_VISIBLE_DEVICES"] == "" and env["GPU_COUNT"] == "0"


def test_ddl_learners(cadre_run, tmp_path):
    (tmp_path / "dump_env.py").write_text(DUMP_ENV)
    job = cadre_run("-n", "2", "--compute", "k80", "--framework", "pytorch-ddl",
                    "--", "python3", "dump_env.py", env=fake_gpus(tmp_path, 4))
    assert job.returncode == 0, job.stderr
    for rank, env in load_envs(job.job_dir).items():
        assert env["CUDA_VISIBLE_DEVICES"] == str(int(env["LEARNER_ID"]) - 1), rank


def test_parameter_servers_take_no_gpu_and_workers_take_the_shares(cadre_run, tmp_path):
    # 1 server and 2 workers of k80x2 on 4 GPUs: the server's optimizer runs on CPUs, so it sees
    # none and the job needs 2 x 2 GPUs, not 3 x 2.
    (tmp_path / "dump_env.py").write_text(DUMP_ENV)
    job = cadre_run("-n", "3", "--compute", "k80x2", "--framework", "pytorch",
                    "--parameter-servers", "1", "--", "python3", "dump_env.py",
                    env=fake_gpus(tmp_path, 4))
    assert job.returncode == 0, job.stderr
    seen = {int(env["LEARNER_ID"]): (env["CUDA_VISIBLE_DEVICES"], env["GPU_COUNT"])
            for env in load_envs(job.job_dir).values()}
    assert seen == {1: ("", "0"), 2: ("0,1", "2"), 3: ("2,3", "2")}, seen
    # One more worker does not fit: the error counts the workers' GPUs only.
    job = cadre_run("-n", "4", "--compute", "k80x2", "--framework", "pytorch",
                    "--parameter-servers", "1", "--", "python3", "dump_env.py",
                    env=fake_gpus(tmp_path, 4))
    assert job.returncode != 0
    assert "2 GPU(s) per learner x 3 learner(s) (the 1 parameter server(s) take none) = 6 GPUs" \
        in job.stderr, job.stderr


def test_an_ffdl_manifest_asking_for_more_gpus_names_its_field(cadre_run, tmp_path):
    (tmp_path / "dump_env.py").write_text(DUMP_ENV)
    (tmp_path / "job.yaml").write_text(textwrap.dedent("""
        name: too-many
        learners: 3
        gpus: 2
        framework: {name: pytorch-horovod, command: python3 dump_env.py}
    """))
    job = cadre_run("job.yaml", env=fake_gpus(tmp_path, 4))
    assert job.returncode == 2, job.stderr
    assert "cadre run: gpus: compute configuration 'k80x2' asks for 2 GPU(s) per learner x " \
        "3 learner(s) = 6 GPUs, but this machine has 4" in job.stderr, job.stderr


def test_mig_instances_are_not_counted_as_gpus(cadre_run, tmp_path):
    (tmp_path / "dump_env.py").write_text(DUMP_ENV)
    job = cadre_run("-n", "2", "--compute", "k80", "--framework", "pytorch-horovod",
                    "--", "python3", "dump_env.py", env=fake_gpus(tmp_path, 1, mig_per_gpu=3))
    assert job.returncode == 2, job.stderr
    assert "= 2 GPUs, but this machine has 1 (nvidia-smi -L)" in job.stderr, job.stderr


def test_the_runners_cuda_visible_devices_is_the_machine(cadre_run, tmp_path):
    """Under a scheduler's allocation (or a user's choice) of GPUs 3 and 1 of 4, the learners get
    those, in that order, and never the others."""
    (tmp_path / "dump_env.py").write_text(DUMP_ENV)
    job = cadre_run("-n", "2", "--compute", "k80", "--framework", "pytorch-horovod",
                    "--", "python3", "dump_env.py", env=fake_gpus(tmp_path, 4, visible="3,1"))
    assert job.returncode == 0, job.stderr
    envs = load_envs(job.job_dir)
    assert {rank: env["CUDA_VISIBLE_DEVICES"] for rank, env in envs.items()} == {0: "3", 1: "1"}
    assert all(env["GPU_COUNT"] == "1" for env in envs.values())

    job = cadre_run("-n", "3", "--compute", "k80", "--framework", "pytorch-horovod",
                    "--", "python3", "dump_env.py", env=fake_gpus(tmp_path, 4, visible="3,1"))
    assert job.returncode == 2
    assert "= 3 GPUs, but this machine has 2 (CUDA_VISIBLE_DEVICES='3,1')" in job.stderr, \
        job.stderr


@pytest.mark.parametrize("hide", ["", "-1"])
def test_a_runner_that_sees_no_gpu_runs_cpu_slots_that_see_none(cadre_run, tmp_path, hide):
    (tmp_path / "dump_env.py").write_text(DUMP_ENV)
    job = cadre_run("-n", "2", "--compute", "k80x2", "--framework", "pytorch-horovod",
                    "--", "python3", "dump_env.py", env=fake_gpus(tmp_path, 4, visible=hide))
    assert job.returncode == 0, job.stderr
    for env in load_envs(job.job_dir).values():
        assert env["CUDA_VISIBLE_DEVICES"] == hide and env["GPU_COUNT"] == "0"
    assert job.stderr.count("--compute: compute configuration 'k80x2' asks for 2 GPU(s) per "
                            "learner but the runner's CUDA_VISIBLE_DEVICES='%s' leaves no GPU; "
                            "its slots run as CPU processes" % hide) == 1, job.stderr


def test_a_cuda_visible_devices_naming_no_gpu_here_is_refused(cadre_run, tmp_path):
    (tmp_path / "dump_env.py").write_text(DUMP_ENV)
    job = cadre_run("-n", "2", "--compute", "k80", "--framework", "pytorch-horovod",
                    "--", "python3", "dump_env.py", env=fake_gpus(tmp_path, 2, visible="0,2"))
    assert job.returncode == 2
    assert ("cadre run: CUDA_VISIBLE_DEVICES='0,2': '2' names no GPU of this machine (2 GPU(s) "
            "by nvidia-smi -L; entries are 0..1 or GPU-/MIG- UUIDs); nothing was started"
            ) in job.stderr, job.stderr
    assert not (tmp_path / "runs").exists()


def test_no_devices_found_is_a_machine_without_gpus(cadre_run, tmp_path):
    """nvidia-smi installed but no GPU ("No devices were found"): the CPU fallback, with the
    warning naming the manifest's field."""
    (tmp_path / "dump_env.py").write_text(DUMP_ENV)
    (tmp_path / "job.yaml").write_text(textwrap.dedent("""
        framework: {name: pytorch-horovod}
        execution:
          command: python3 dump_env.py
          compute_configuration: {name: v100x2, nodes: 2}
    """))
    for code in (0, 6):
        job = cadre_run("job.yaml", env=fake_gpus(tmp_path, 0, exit_code=code))
        assert job.returncode == 0, job.stderr
        assert ("cadre: warning: execution.compute_configuration.name: compute configuration "
                "'v100x2' asks for 2 GPU(s) per learner but this machine has none; its slots run "
                "as CPU processes (GPU_COUNT=0)") in job.stderr, job.stderr
        for env in load_envs(job.job_dir).values():
            assert "CUDA_VISIBLE_DEVICES" not in env and env["GPU_COUNT"] == "0"
        shutil.rmtree(tmp_path / "runs")
