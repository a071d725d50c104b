"""`cadre server --backend slurm`: the service admits jobs and runs them on a real Slurm cluster
started on this machine (tests/slurm_cluster.py), through `cadre run --backend slurm`. The
server sizes itself from the cluster, the learners get the contract from Slurm's facts, a
cancel ends the Slurm job, and a manifest that names another backend is refused."""
import json
import os
import subprocess

import pytest

from service_helpers import FINAL, make_zip, pids_of_processes_mentioning, wait_for, wml_body

REPORT = ("import os\n"
          "print('learner', os.environ['LEARNER_ID'], 'rank', os.environ['CADRE_RANK'],\n"
          "      'slurm job', os.environ['SLURM_JOB_ID'], 'node', os.environ['SLURMD_NODENAME'],\n"
          "      flush=True)\n")


@pytest.fixture
def slurm_server(make_server, slurm):
    # No --slots: the server asks the cluster how many CPUs it has. --heartbeat-timeout reaches
    # every job's cadre run (the server passed none: each ran with cadre run's default).
    return make_server(slots=None, extra=["--backend", "slurm", "--store-host", "127.0.0.1",
                                          "--heartbeat-timeout", "7"], env=slurm.env)


def training_log(server, tid):
    with open(os.path.join(server.data_dir, "trainings", tid, "training.log")) as f:
        return f.read()


def slurm_job_state(slurm, job_id):
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], env=slurm.env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
    for field in out.stdout.split():
        if field.startswith("JobState="):
            return field.split("=", 1)[1]
    return "gone"  # forgotten by slurmctld (MinJobAge)


def test_jobs_run_on_the_cluster_with_slurms_facts(slurm, slurm_server):
    server = slurm_server
    assert any("8 slots on the slurm backend" in line for line in server.output), server.output
    ada = server.client(server.add_user("ada"))
    r = ada.submit_manifest(
        "name: on-slurm\nframework: {name: pytorch-horovod}\n"
        "execution: {command: python3 report.py, compute_configuration: {name: cpux2, nodes: 2}}\n",
        code=make_zip({"report.py": REPORT}))
    assert r.status == 201, r
    tid = r.json()["metadata"]["id"]
    status = ada.wait_state(tid, FINAL, timeout=180)
    log = training_log(server, tid)
    assert status["state"] == "completed", (status, log)
    assert "submitted Slurm job" in log, log
    with open(os.path.join(server.data_dir, "jobs", tid, "slurm", "job_id")) as f:
        job_id = f.read().strip()
    # The plan every slot's cadre task read: the server's --heartbeat-timeout.
    with open(os.path.join(server.data_dir, "jobs", tid, "task.json")) as f:
        assert json.load(f)["heartbeat_timeout_ms"] == 7000
    # Every slot ran under that Slurm job, learner k on node k.
    for learner, rank in ((1, 0), (1, 1), (2, 2), (2, 3)):
        assert (f"learner {learner} rank {rank} slurm job {job_id} node node{learner}"
                in log), log


def test_a_cancel_ends_the_slurm_job(slurm, slurm_server):
    server = slurm_server
    ada = server.client(server.add_user("ada"))
    r = ada.submit_json(wml_body("touch started-$CADRE_RANK; sleep 300", nodes=2,
                                 framework="pytorch-horovod", compute="cpu"))
    assert r.status == 201, r
    tid = r.json()["metadata"]["id"]
    model = os.path.join(server.data_dir, "trainings", tid, "model")
    wait_for("both learners to start on the cluster",
             lambda: all(os.path.exists(os.path.join(model, f"started-{k}")) for k in (0, 1)),
             timeout=180)
    id_file = os.path.join(server.data_dir, "jobs", tid, "slurm", "job_id")
    job_id = open(id_file).read().strip()
    assert slurm_job_state(slurm, job_id) == "RUNNING"
    assert ada.api("DELETE", f"/{tid}").status == 204
    assert ada.wait_state(tid, FINAL, timeout=120)["state"] == "canceled"
    wait_for("Slurm to end the job", lambda: slurm_job_state(slurm, job_id)
             in ("CANCELLED", "COMPLETED", "FAILED", "gone"), timeout=60)
    wait_for("the job's processes to end",
             lambda: not pids_of_processes_mentioning(os.path.join(server.data_dir, "jobs", tid)),
             timeout=60)


def test_a_manifest_for_another_backend_is_refused(slurm, slurm_server):
    ada = slurm_server.client(slurm_server.add_user("ada"))
    r = ada.submit_manifest(
        "name: elsewhere\nframework: {name: pytorch}\n"
        "execution: {command: 'true', backend: mpi,\n"
        "            compute_configuration: {name: cpu, nodes: 1}}\n")
    assert r.status == 400, r
    assert "this server runs jobs on the slurm backend, not 'mpi'" in r.body, r
    assert r.error_targets() == ["execution.backend"], r


def test_a_server_without_its_engine_says_so_before_serving(tmp_path):
    from service_helpers import CADRE
    env = dict(os.environ, PATH="/nonexistent")
    out = subprocess.run([CADRE, "server", "--data-dir", str(tmp_path / "d"), "--listen",
                          "127.0.0.1:0", "--backend", "slurm"], env=env, timeout=60,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert out.returncode == 1, out
    assert "sbatch" in out.stderr and "listening" not in out.stdout, out
    bad = subprocess.run([CADRE, "server", "--data-dir", str(tmp_path / "d"), "--backend",
                          "pbs"], timeout=60, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    assert bad.returncode == 2 and "--backend" in bad.stderr and "slurm" in bad.stderr, bad
    k8s = subprocess.run([CADRE, "server", "--data-dir", str(tmp_path / "d"), "--backend",
                          "kubernetes"], timeout=60, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert k8s.returncode == 2 and "--slots" in k8s.stderr, k8s
    mpi = subprocess.run([CADRE, "server", "--data-dir", str(tmp_path / "d"), "--backend",
                          "mpi"], timeout=60, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    assert mpi.returncode == 2 and "--hostfile" in mpi.stderr, mpi
    # Its jobs would otherwise each be refused by `cadre run`, or run without the flag.
    (tmp_path / "hosts").write_text("127.0.0.2\n")
    partition = subprocess.run([CADRE, "server", "--data-dir", str(tmp_path / "d"), "--backend",
                                "mpi", "--hostfile", str(tmp_path / "hosts"), "--partition", "gpu"],
                               timeout=60, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    assert partition.returncode == 2, partition
    assert "--partition is for --backend slurm, not mpi" in partition.stderr, partition
    local = subprocess.run([CADRE, "server", "--data-dir", str(tmp_path / "d"),
                            "--heartbeat-timeout", "5"], timeout=60, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    assert local.returncode == 2, local
    assert "--heartbeat-timeout is for --backend slurm or mpi, not local" in local.stderr, local
    beat = subprocess.run([CADRE, "server", "--data-dir", str(tmp_path / "d"), "--backend",
                           "mpi", "--hostfile", str(tmp_path / "hosts"), "--slots", "1",
                           "--heartbeat-timeout", "0.5"], timeout=60, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    assert beat.returncode == 2, beat
    assert "--heartbeat-timeout must be 0 (no heartbeats) or 1..86400 seconds" in beat.stderr, beat
