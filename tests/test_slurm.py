"""`cadre run --backend slurm` on a real Slurm cluster started on this machine (slurm_cluster.py):
the learner contract from Slurm's facts, a failed learner, a cancel, a pending job past its
--queue-timeout, a job Slurm refuses, and no Slurm at all."""
import json
import os
import signal
import socket
import subprocess
import textwrap
import time
import types

import pytest

from runner_helpers import CADRE, ROOT, Job, interrupt_once_up
from slurm_cluster import SlurmCluster

DUMP_ENV = textwrap.dedent("""
    import json, os, socket
    env = dict(os.environ)
    # The learners' names resolve to their nodes' addresses for every program.
    env["__resolved__"] = {n: socket.gethostbyname(n)
                           for n in ("learner-1", "learner-2")}
    path = os.path.join(os.environ["RESULT_DIR"], "env-%s.json" % os.environ["CADRE_RANK"])
    with open(path, "w") as f:
        json.dump(env, f)
    print("dumped rank", os.environ["CADRE_RANK"], flush=True)
    if os.environ["CADRE_RANK"] == os.environ.get("FAIL_RANK"):
        raise SystemExit(3)
""")


def cadre_slurm(cluster, tmp_path, *args, timeout=120):
    proc = subprocess.run([CADRE, "run", "--backend", "slurm", "--store-host", "127.0.0.1",
                           *args], cwd=tmp_path, env=cluster.env, timeout=timeout,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return Job(proc, str(tmp_path))


def start_2x2_sleeping(cluster, tmp_path, *args, command="echo up; sleep 120"):
    """A running `cadre run ARGS` of 2 learners x 2 slots that each say "up" and sleep 2 minutes
    (or run `command`)."""
    return subprocess.Popen([CADRE, "run", "--backend", "slurm", "--store-host", "127.0.0.1",
                             *args, "-n", "2", "--compute", "cpux2", "--framework",
                             "pytorch-horovod", "--", "sh", "-c", command],
                            cwd=tmp_path, env=cluster.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def slurm_job_id(job):
    with open(os.path.join(job.job_dir, "slurm", "job_id")) as f:
        return f.read().strip()


def load_envs(job_dir):
    envs = {}
    for name in os.listdir(job_dir):
        if name.startswith("env-"):
            with open(os.path.join(job_dir, name)) as f:
                env = json.load(f)
            envs[int(env["CADRE_RANK"])] = env
    return envs


def test_the_contract_from_slurms_facts(slurm, tmp_path):
    (tmp_path / "dump_env.py").write_text(DUMP_ENV)
    job = cadre_slurm(slurm, tmp_path, "-n", "2", "--compute", "cpux2", "--framework",
                      "pytorch-horovod", "--", "python3", "dump_env.py")
    assert job.returncode == 0, job.stdout + job.stderr
    assert "submitted Slurm job" in job.stderr
    assert "[learner-2/1] dumped rank 3" in job.stdout
    envs = load_envs(job.job_dir)
    assert sorted(envs) == [0, 1, 2, 3]
    for rank, env in envs.items():
        learner, local = rank // 2 + 1, rank % 2
        # Slurm's own facts, and the contract made from them.
        assert env["SLURM_NODEID"] == str(learner - 1)
        assert env["SLURM_LOCALID"] == str(local)
        assert env["SLURM_JOB_NODELIST"] == "node[1-2]"
        assert env["LEARNER_ID"] == str(learner)
        assert env["NUM_LEARNERS"] == "2"
        assert env["CADRE_LOCAL_RANK"] == str(local)
        assert env["CADRE_SIZE"] == "4" and env["HOROVOD_SIZE"] == "4"
        assert env["CADRE_HOST"] == f"learner-{learner}"
        assert env["CADRE_LEARNER_ADDRESS"] == f"127.0.0.{learner + 1}"  # the node's NodeAddr
        assert env["__resolved__"] == {"learner-1": "127.0.0.2", "learner-2": "127.0.0.3"}
        assert env["CADRE_STORE"].startswith("127.0.0.1:")
        assert env["RESULT_DIR"] == job.job_dir
        assert env["CADRE_JOB_TOKEN"] == open(os.path.join(job.job_dir, "token")).read()
    status = job.status()
    assert status["state"] == "completed"
    assert slurm.job_state(slurm_job_id(job)) == "COMPLETED"
    assert oct(os.stat(os.path.join(job.job_dir, "token")).st_mode & 0o777) == "0o600"


def test_the_manifest_can_name_the_backend(slurm, tmp_path):
    (tmp_path / "job.yaml").write_text(textwrap.dedent("""
        name: from-manifest
        framework: {name: pytorch-horovod}
        execution:
          command: echo "learner $LEARNER_ID of $NUM_LEARNERS"
          compute_configuration: {name: cpux2, nodes: 2}
          backend: slurm
    """))
    # No --backend: the manifest's execution.backend chooses Slurm.
    proc = subprocess.run([CADRE, "run", "--store-host", "127.0.0.1", "job.yaml"], cwd=tmp_path,
                          env=slurm.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=120)
    job = Job(proc, str(tmp_path))
    assert job.returncode == 0, job.stdout + job.stderr
    assert "submitted Slurm job" in job.stderr
    assert "[learner-2/1] learner 2 of 2" in job.stdout


def test_a_failed_learner_fails_the_job_by_name(slurm, tmp_path):
    (tmp_path / "dump_env.py").write_text(DUMP_ENV)
    job = cadre_slurm(slurm, tmp_path, "-n", "2", "--compute", "cpux2", "--framework",
                      "pytorch-horovod", "--", "sh", "-c",
                      "FAIL_RANK=3 python3 dump_env.py && sleep 60")
    assert job.returncode == 1, job.stdout + job.stderr
    assert "learner-2 slot 1 exited with code 3" in job.stderr
    assert job.status()["state"] == "failed"
    # srun ended the other slots at once (--kill-on-bad-exit) rather than after their sleep.
    assert slurm.job_state(slurm_job_id(job)) in ("FAILED", "CANCELLED")


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGQUIT])
def test_ctrl_c_cancels_the_slurm_job(slurm, tmp_path, stop):
    proc = start_2x2_sleeping(slurm, tmp_path)
    # Every slot has said it is up (the job runs on the cluster), then Ctrl-C (or Ctrl-\, which
    # once dumped the runner's core and left the job running).
    job = interrupt_once_up(proc, str(tmp_path), slots=4, timeout=60, interrupt=stop)
    assert job.returncode == 128 + stop, job.stderr
    assert "cancelling job" in job.stderr
    assert job.status()["state"] == "stopped"
    assert slurm.job_state(slurm_job_id(job)) == "CANCELLED"


def test_a_job_cancelled_from_outside_says_so(slurm, tmp_path):
    proc = start_2x2_sleeping(slurm, tmp_path)

    def cancel():
        job_dir = os.path.join(tmp_path, "runs", os.listdir(os.path.join(tmp_path, "runs"))[0])
        with open(os.path.join(job_dir, "slurm", "job_id")) as f:
            subprocess.run(["scancel", f.read().strip()], env=slurm.env, check=True, timeout=30)

    job = interrupt_once_up(proc, str(tmp_path), slots=4, timeout=60, while_up=cancel,
                            interrupt=None)
    assert job.returncode == 1, job.stdout + job.stderr
    assert "CANCELLED" in job.stderr
    assert "cancelled by someone other than this cadre run: scancel, an administrator" in \
        job.stderr, job.stderr
    assert job.status()["state"] == "failed"


def test_a_node_that_goes_down_fails_the_job_naming_its_learner(slurm, tmp_path):
    proc = start_2x2_sleeping(slurm, tmp_path)

    def node2_down():
        subprocess.run(["scontrol", "update", "nodename=node2", "state=down",
                        "reason=cadre test"], env=slurm.env, check=True, timeout=30)

    try:
        job = interrupt_once_up(proc, str(tmp_path), slots=4, timeout=60, while_up=node2_down,
                                interrupt=None)
    finally:
        slurm.resume("node2")
    assert job.returncode == 1, job.stdout + job.stderr
    assert "NODE_FAIL" in job.stderr and "node node2 (learner-2)" in job.stderr, job.stderr
    assert job.status()["state"] == "failed"
    # Failed, not requeued by Slurm to run again later against this run's rendezvous store.
    assert slurm.job_state(slurm_job_id(job)) == "NODE_FAIL"


def test_a_job_pending_past_its_queue_timeout_is_cancelled(slurm, tmp_path):
    # The cluster's "closed" partition is down: jobs queue there and never start.
    job = cadre_slurm(slurm, tmp_path, "-n", "1", "--partition", "closed", "--queue-timeout", "2",
                      "--", "true")
    assert job.returncode == 1, job.stderr
    assert "still pending after 2.0 s (--queue-timeout)" in job.stderr
    assert job.status()["state"] == "failed"
    assert slurm.job_state(slurm_job_id(job)) == "CANCELLED"


def test_a_job_asking_for_more_nodes_than_the_cluster_has_says_why_it_waits(slurm, tmp_path):
    # Slurm queues it (the partition's nodes could come) rather than refusing it.
    job = cadre_slurm(slurm, tmp_path, "-n", "3", "--queue-timeout", "6", "--", "true")
    assert job.returncode == 1, job.stderr
    assert "waiting: Slurm job" in job.stderr, job.stderr
    assert "the job asks for 3 nodes (one per learner)" in job.stderr, job.stderr
    assert "still pending after 6.0 s (--queue-timeout)" in job.stderr
    assert slurm.job_state(slurm_job_id(job)) == "CANCELLED"


@pytest.mark.parametrize("args,asked,said", [
    (["-n", "1", "--partition", "nosuch"], "--partition nosuch", "nvalid partition"),
    # The test cluster's nodes have no GPUs.
    (["-n", "2", "--compute", "k80x2", "--framework", "pytorch-horovod"],
     "--gres=gpu:2 (compute configuration k80x2", "node configuration is not available"),
])
def test_a_job_slurm_refuses_is_an_error_naming_sbatch(slurm, tmp_path, args, asked, said):
    job = cadre_slurm(slurm, tmp_path, *args, "--", "true")
    assert job.returncode == 1
    assert "sbatch refused the job" in job.stderr
    assert asked in job.stderr and said in job.stderr, job.stderr
    # The job's record says it never ran, not "running" for ever.
    assert job.status()["state"] == "failed"
    assert said in job.status()["failure"]


@pytest.mark.parametrize("setting,said", [
    # A controller that does not answer (slurmctld stopped): a port nobody listens on.
    ("SlurmctldPort=", "Slurm's controller (slurmctld) could not be reached"),
    # munged stopped: its socket is gone.
    ("AuthInfo=", "Slurm's authentication (munge: munged on this machine) failed"),
])
def test_a_slurm_that_is_down_is_named_not_blamed_on_the_job(slurm, tmp_path, setting, said):
    # It said "sbatch refused the job ..., which asks for 1 node", as if the request were wrong.
    with open(slurm.conf) as f:
        lines = f.read().splitlines()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    down = {"SlurmctldPort=": f"SlurmctldPort={closed_port}",
            "AuthInfo=": f"AuthInfo=socket={tmp_path / 'no-munge.sock'}"}[setting]
    conf = tmp_path / "slurm.conf"
    conf.write_text("\n".join(down if l.startswith(setting) else l for l in lines) + "\n")
    cluster = types.SimpleNamespace(env=dict(slurm.env, SLURM_CONF=str(conf)))
    job = cadre_slurm(cluster, tmp_path, "-n", "1", "--", "true")
    assert job.returncode == 1, job.stderr
    assert said in job.stderr and "refused the job" not in job.stderr, job.stderr
    assert job.status()["state"] == "failed" and said in job.status()["failure"]


def test_no_sbatch_is_one_clear_error_before_anything_starts(tmp_path):
    # No Slurm cluster needed: the engine's commands are looked for first.
    env = dict(os.environ, PATH=str(tmp_path / "empty"))
    proc = subprocess.run([CADRE, "run", "--backend", "slurm", "--", "true"], cwd=tmp_path,
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert "the slurm backend needs `sbatch`, which is not on PATH" in proc.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.skipif(not os.path.isdir("/usr/share/datasets/fashion-mnist"),
                    reason="Fashion-MNIST is not installed (scripts/install-deps installs it)")
def test_fashion_mnist_horovod_example_trains_through_slurm(slurm, tmp_path):
    # The example's script on 2 nodes x 2 slots, a short run (20 batches a rank): it learns.
    example = os.path.join(ROOT, "examples", "fashion_mnist", "train_horovod.py")
    job = cadre_slurm(slurm, tmp_path, "-n", "2", "--compute", "cpux2", "--framework",
                      "pytorch-horovod", "--data-dir", "/usr/share/datasets/fashion-mnist",
                      "--", "python3", example, "--epochs", "1", "--max-batches", "20",
                      timeout=600)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr
    assert "on 4 ranks" in job.stdout
    with open(os.path.join(job.job_dir, "accuracy.txt")) as f:
        accuracy = float(f.read())
    assert accuracy > 0.5, accuracy  # chance is 0.1


def wait_for_job_end(cluster, job_id, timeout):
    """The Slurm job's final state, polled (at most `timeout` s; None if it still runs)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = cluster.job_state(job_id)
        if state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            return state
        time.sleep(0.5)
    return None


def test_a_killed_runner_takes_its_slurm_job_with_it(slurm, tmp_path):
    # cadre run dies by SIGKILL (no cleanup, no scancel): its slots no longer hear from it
    # through its store and stop, so the job ends and frees its nodes, as srun's tasks end with
    # a foreground srun, rather than holding them until its time limit.
    proc = start_2x2_sleeping(slurm, tmp_path, "--heartbeat-timeout", "3",
                              command="echo up; sleep 300")
    job = interrupt_once_up(proc, str(tmp_path), slots=4, timeout=60, interrupt=signal.SIGKILL)
    assert job.returncode == -signal.SIGKILL
    job_id = slurm_job_id(job)
    # Bounded well below the sleep: the job ends because its runner is gone.
    state = wait_for_job_end(slurm, job_id, timeout=120)
    assert state in ("FAILED", "CANCELLED"), state
    # The first slot to notice ends the step (srun --kill-on-bad-exit ends the others, which
    # may not have noticed yet): its record and log say why.
    said = []
    for learner, slot in ((1, 0), (1, 1), (2, 0), (2, 1)):
        path = os.path.join(job.job_dir, f"learner-{learner}", f"slot-{slot}")
        if not os.path.exists(path + ".exit"):
            continue
        with open(path + ".exit") as f:
            record = json.load(f)
        if "has answered no heartbeat" in record.get("runner_lost", ""):
            with open(path + ".log") as f:
                assert f"cadre task: stopping learner-{learner} slot {slot}: cadre run's " \
                       "rendezvous store" in f.read()
            said.append((learner, slot))
    assert said, "no slot recorded that it stopped because cadre run was gone"


def test_nodes_that_cannot_reach_the_runner_fail_the_job_saying_so(slurm, tmp_path):
    # --store-host names an address where the nodes cannot reach the store: ::1, on this machine
    # (a test sends nothing off it), where nothing listens at the store's port, since the store
    # listens on IPv4 only (0.0.0.0). The slots hear nothing from cadre run, stop, and cadre
    # run, which is there, says what that means.
    proc = subprocess.run([CADRE, "run", "--backend", "slurm", "--store-host", "::1",
                           "--heartbeat-timeout", "3", "-n", "1", "--", "sleep", "300"],
                          cwd=tmp_path, env=slurm.env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=120)
    job = Job(proc, str(tmp_path))
    assert job.returncode == 1, job.stdout + job.stderr
    assert "learner-1 slot 0 stopped itself: cadre run's rendezvous store at ::1:" in \
        job.stderr, job.stderr
    assert "the node cannot reach this machine's store, see --store-host" in job.stderr
    assert job.status()["state"] == "failed"


def test_a_slow_runner_is_not_taken_for_a_dead_one(slurm, tmp_path):
    # cadre run stopped (SIGSTOP) for less than the heartbeat timeout, then continued: the job
    # goes on and completes.
    proc = start_2x2_sleeping(slurm, tmp_path, "--heartbeat-timeout", "30",
                              command="echo up; while [ ! -e resumed ]; do sleep 0.2; done")

    def pause():
        proc.send_signal(signal.SIGSTOP)
        time.sleep(5)  # several heartbeats go unanswered meanwhile
        proc.send_signal(signal.SIGCONT)
        (tmp_path / "resumed").write_text("")

    job = interrupt_once_up(proc, str(tmp_path), slots=4, timeout=60, while_up=pause,
                            interrupt=None)
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.status()["state"] == "completed"


def test_a_job_whose_slurm_controller_is_lost_ends_with_its_learners_outcome(slurm, tmp_path):
    # slurmctld is SIGKILLed while the learners run, and stays down: scontrol cannot say when the
    # job ends, but every slot records its end in the job directory, so cadre run ends with the
    # learners' outcome (learner 2 fails) rather than waiting for the controller for ever. A
    # cluster of its own (`slurm` only for its skips), so the module's keeps its controller.
    cluster = SlurmCluster(nodes=2).start()
    try:
        proc = start_2x2_sleeping(cluster, tmp_path, command='echo up; sleep 4; '
                                  '[ "$LEARNER_ID" = 2 ] && { echo giving up; exit 3; }; exit 0')
        job = interrupt_once_up(proc, str(tmp_path), slots=4, timeout=150,
                                while_up=cluster.kill_controller, interrupt=None)
    finally:
        cluster.stop()
    assert job.returncode == 1, job.stdout + job.stderr
    assert "Unable to contact slurm controller" in job.stderr, job.stderr
    assert "following the job by its slots' exit records and heartbeats" in job.stderr
    assert "learner-2 slot" in job.stderr and "exited with code 3" in job.stderr, job.stderr
    status = job.status()
    assert status["state"] == "failed"
    assert status["failed_slot"]["learner_id"] == 2, status
    assert "exited with code 3" in status["failure"], status


def test_a_node_lost_with_no_failing_learner_is_named_before_slurm_notices(slurm, tmp_path):
    # Node 2 is lost at once and no learner fails (they do not talk to each other): Slurm would
    # notice after SlurmdTimeout (5 minutes here); the slots' heartbeats name the node at once.
    proc = start_2x2_sleeping(slurm, tmp_path, "--heartbeat-timeout", "3",
                              command="echo up; sleep 300")
    try:
        job = interrupt_once_up(proc, str(tmp_path), slots=4, timeout=120,
                                while_up=lambda: slurm.kill_node("node2"), interrupt=None)
    finally:
        slurm.restart_node("node2", timeout=600)
    assert job.returncode == 1, job.stdout + job.stderr
    assert "ending the job: learner-2 (node node2) slots 0, 1: not heard from" in job.stderr, \
        job.stderr
    status = job.status()
    assert status["state"] == "failed"
    assert status["failure"].startswith("learner-2 (node node2) slots 0, 1: not heard from")
    assert status["failed_slot"] == {"learner_id": 2, "local_rank": 0}
    lost = [(s["rank"], s["state"], s.get("node")) for s in status["learners"][1]["slots"]]
    assert lost == [(2, "lost", "node2"), (3, "lost", "node2")], status["learners"]


def test_a_failed_learner_ends_the_job_when_a_lost_node_does_not_answer(slurm, tmp_path):
    # Node 2 is lost at once (its slurmd, steps and tasks killed); learner 1 then fails, as a
    # training script does when its peers are gone. srun waits for the lost node's tasks until
    # Slurm declares the node down (SlurmdTimeout, 5 minutes here); cadre run cancels the job at
    # once, and follows it at most 30 s more while it is COMPLETING on the node that is gone.
    # (Last in this file, as it brings node 2 back.)
    proc = subprocess.Popen([CADRE, "run", "--backend", "slurm", "--store-host", "127.0.0.1",
                             "-n", "2", "--compute", "cpux2", "--framework", "pytorch-horovod",
                             "--", "sh", "-c", 'echo up; [ "$LEARNER_ID" = 2 ] && exec sleep 300; '
                             'while [ ! -e learner-2.lost ]; do sleep 0.2; done; echo peers lost; exit 3'],
                            cwd=tmp_path, env=slurm.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)

    lost = []

    def lose_node2():
        slurm.kill_node("node2")
        lost.append(time.monotonic())
        (tmp_path / "learner-2.lost").write_text("gone\n")

    try:
        job = interrupt_once_up(proc, str(tmp_path), slots=4, timeout=90, while_up=lose_node2,
                                interrupt=None)
        took = time.monotonic() - lost[0]
    finally:
        slurm.restart_node("node2", timeout=600)
    assert job.returncode == 1, job.stdout + job.stderr
    assert "ending the job: learner-1 slot" in job.stderr, job.stderr
    assert "exited with code 3" in job.stderr
    assert took < 60, "cadre run followed the job %.0f s after its node was lost" % took
    assert job.status()["state"] == "failed"

