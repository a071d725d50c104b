"""`cadre run --backend kubernetes` against the kubectl emulator (k8s/fake_kubectl.py: the objects
cadre creates, their StatefulSet's pods run as local processes; not a cluster): the learner
contract in the pods and an allreduce across them, the pods' logs streamed per learner, a failed
learner, a pod deleted from outside, a cancel, pods unschedulable past --queue-timeout, kubectl's
own errors, no kubectl. In every case the job's objects and pods are gone when cadre run returns."""
import os
import shutil
import subprocess
import textwrap

from kubectl_emulator import learner_lines, read_objects_file
from runner_helpers import CADRE, Job, interrupt_once_up

REPORT = textwrap.dedent("""
    import json, os, socket
    env = {k: v for k, v in os.environ.items()}
    prefix = os.environ["LEARNER_NAME_PREFIX"]
    env["__resolved__"] = {n: socket.gethostbyname(n) for n in (prefix + "-1", prefix + "-2")}
    env["__hostname__"] = socket.gethostname()
    print("ENV", json.dumps(env), flush=True)
    import torch
    import cadre.torch as hvd
    hvd.init()
    total = hvd.allreduce(torch.ones(3), op=hvd.Sum)
    print("SUM", json.dumps(total.tolist()), flush=True)
""")


def k8s_run(emulator, tmp_path, *args, timeout=180, env=None):
    proc = subprocess.run([CADRE, "run", "--backend", "kubernetes", *args], cwd=tmp_path,
                          env=dict(emulator.env, **(env or {})), timeout=timeout,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return Job(proc, str(tmp_path))


def assert_nothing_left(emulator):
    assert emulator.wait_gone(timeout=5), "the StatefulSet's controller still runs"
    assert emulator.objects() == []
    assert emulator.pods() == []


def test_the_contract_in_the_pods_and_their_logs(kubectl_emulator, tmp_path):
    (tmp_path / "report.py").write_text(REPORT)
    job = k8s_run(kubectl_emulator, tmp_path, "-n", "2", "--compute", "cpux2", "--framework",
                  "pytorch-horovod", "--image", "registry.example/cadre:1", "--name", "Hello K8s",
                  "--", "python3", "report.py")
    assert job.returncode == 0, job.stdout + job.stderr
    assert "created StatefulSet hello-k8s-" in job.stderr
    status = job.status()
    assert status["state"] == "completed"
    name = "hello-k8s-" + status["training_id"][-6:]
    objects = read_objects_file(job.job_dir)
    assert objects["StatefulSet"]["metadata"]["name"] == name
    token = objects["Secret"]["stringData"]["token"]
    assert oct(os.stat(os.path.join(job.job_dir, "kubernetes", "objects.yaml")).st_mode
               & 0o777) == "0o600"

    envs = learner_lines(job.stdout, "ENV")
    assert sorted(int(e["CADRE_RANK"]) for _, e in envs) == [0, 1, 2, 3], job.stdout
    addresses = {}
    for learner, env in envs:
        rank = int(env["CADRE_RANK"])
        # Each pod's lines are its own learner's, prefixed like a local job's.
        assert env["LEARNER_ID"] == str(learner) == str(rank // 2 + 1)
        assert env["CADRE_LOCAL_RANK"] == str(rank % 2)
        assert env["NUM_LEARNERS"] == "2" and env["CADRE_SIZE"] == "4"
        assert env["LEARNER_NAME_PREFIX"] == name
        assert env["CADRE_POD_NAME"] == env["__hostname__"] == f"{name}-{learner}"
        assert env["CADRE_HOST"] == f"{name}-{learner}"
        assert env["CADRE_STORE"] == f"{name}-1:29400"
        assert env["TRAINING_ID"] == status["training_id"]
        assert env["CADRE_JOB_TOKEN"] == token
        # RESULT_DIR is the pod's own volume (the emulator's folder for /cadre/job).
        assert env["RESULT_DIR"].endswith(f"/pods/{name}-{learner}/volumes/job")
        # Every learner's name resolves, to its own address, the same in every pod.
        assert env["CADRE_LEARNER_ADDRESS"] == env["__resolved__"][f"{name}-{learner}"]
        addresses.setdefault(str(env["__resolved__"]), []).append(rank)
    assert len(addresses) == 1, addresses
    # The four slots in two pods reduced together through learner 1's store.
    sums = learner_lines(job.stdout, "SUM")
    assert [s for _, s in sums] == [[4.0, 4.0, 4.0]] * 4, job.stdout + job.stderr
    # The learners said they finished, and that ended the job.
    assert "[learner-2] cadre task: learner-2 finished" in job.stdout
    assert_nothing_left(kubectl_emulator)


def test_a_failed_learner_fails_the_job_by_name(kubectl_emulator, tmp_path):
    job = k8s_run(kubectl_emulator, tmp_path, "-n", "2", "--compute", "cpux2", "--framework",
                  "pytorch-horovod", "--image", "img", "--", "sh", "-c",
                  'echo "rank $CADRE_RANK up"; [ "$CADRE_RANK" = 3 ] && exit 3; sleep 300')
    assert job.returncode == 1, job.stdout + job.stderr
    assert "learner-2 exited with code 3" in job.stderr, job.stderr
    # The failed learner's last lines, from its pod's log.
    assert "[learner-2] rank 3 up" in job.stdout
    assert "rank 3 up" in job.stderr.split("last lines of", 1)[1]
    status = job.status()
    assert status["state"] == "failed"
    assert status["failure"].startswith("learner-2 exited with code 3")
    assert_nothing_left(kubectl_emulator)


def start_sleeping_job(emulator, tmp_path, compute):
    """A running 2-learner `cadre run --backend kubernetes` whose slots print "up" and sleep."""
    return subprocess.Popen([CADRE, "run", "--backend", "kubernetes", "--image", "img", "-n", "2",
                             "--compute", compute, "--framework", "pytorch-horovod", "--", "sh",
                             "-c", "echo up; sleep 300"],
                            cwd=tmp_path, env=emulator.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_ctrl_c_deletes_the_job(kubectl_emulator, tmp_path):
    proc = start_sleeping_job(kubectl_emulator, tmp_path, "cpux2")
    def two_pods():
        assert len(kubectl_emulator.pods()) == 2

    job = interrupt_once_up(proc, str(tmp_path), slots=4, timeout=120, while_up=two_pods)
    assert job.returncode == 130, job.stderr
    assert "cancelling job" in job.stderr
    assert job.status()["state"] == "stopped"
    assert_nothing_left(kubectl_emulator)


def test_pods_unschedulable_past_the_queue_timeout_are_deleted(kubectl_emulator, tmp_path):
    # k80: one GPU per learner; the emulated node has none, so the pods stay Pending.
    job = k8s_run(kubectl_emulator, tmp_path, "-n", "2", "--compute", "k80", "--image", "img",
                  "--queue-timeout", "2", "--", "true")
    assert job.returncode == 1, job.stdout + job.stderr
    assert "still pending after 2.0 s (--queue-timeout)" in job.stderr
    assert "Unschedulable: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu." in job.stderr
    assert job.status()["state"] == "failed"
    assert_nothing_left(kubectl_emulator)


NO_CLUSTER_KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: none
  cluster: {server: "http://127.0.0.1:1"}
contexts:
- name: none
  context: {cluster: none, user: none}
users:
- name: none
  user: {}
current-context: none
"""


def test_kubectls_own_error_when_there_is_no_cluster(kubectl_emulator, tmp_path):
    job = k8s_run(kubectl_emulator, tmp_path, "--image", "img", "--", "true",
                  env={"FAKE_KUBECTL_NO_CLUSTER": "1"})
    assert job.returncode == 1
    assert "kubectl create failed (exit code 1): The connection to the server localhost:8080 " \
           "was refused" in job.stderr, job.stderr
    real = shutil.which("kubectl", path="/usr/local/bin:/usr/bin:/bin")
    if real is not None:
        # The real client with no cluster behind its configuration says it its own way.
        os.symlink(real, os.path.join(tmp_path, "kubectl"))
        # A cluster at a port nothing listens on (without a configuration kubectl would try
        # localhost:8080, where another program of this machine may answer).
        (tmp_path / "kubeconfig").write_text(NO_CLUSTER_KUBECONFIG)
        env = dict(kubectl_emulator.env, PATH=f"{tmp_path}:/usr/bin:/bin",
                   KUBECONFIG=str(tmp_path / "kubeconfig"))
        proc = subprocess.run([CADRE, "run", "--backend", "kubernetes", "--image", "img", "-o",
                               str(tmp_path / "real"), "--", "true"], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=180)
        assert proc.returncode == 1, proc.stderr
        assert "kubectl create failed" in proc.stderr and "refused" in proc.stderr, proc.stderr


def test_no_kubectl_or_no_image_is_one_clear_error_before_anything_starts(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path / "empty"))
    proc = subprocess.run([CADRE, "run", "--backend", "kubernetes", "--image", "img", "--",
                           "true"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode == 2
    assert "the kubernetes backend needs `kubectl`, which is not on PATH" in proc.stderr
    proc = subprocess.run([CADRE, "run", "--backend", "kubernetes", "--", "true"], cwd=tmp_path,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--image" in proc.stderr and "container image" in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_parameter_servers_end_with_the_workers(kubectl_emulator, tmp_path):
    # Learner 1 serves and never ends by itself; the job completes when the worker has finished.
    job = k8s_run(kubectl_emulator, tmp_path, "-n", "2", "--framework", "pytorch",
                  "--parameter-servers", "1", "--image", "img", "--", "sh", "-c",
                  '[ "$LEARNER_ID" = 1 ] && exec sleep 300; echo worker done')
    assert job.returncode == 0, job.stdout + job.stderr
    assert "[learner-2] worker done" in job.stdout
    assert job.status()["state"] == "completed"
    assert_nothing_left(kubectl_emulator)


def test_a_cluster_that_ignores_ordinals_start_is_named(kubectl_emulator, tmp_path):
    job = k8s_run(kubectl_emulator, tmp_path, "-n", "2", "--image", "img", "--", "sleep", "300",
                  env={"FAKE_KUBECTL_NO_ORDINALS": "1"})
    assert job.returncode == 1, job.stdout + job.stderr
    assert "-0 is not one of" in job.stderr and "ordinals.start (Kubernetes 1.27 or later" \
        in job.stderr, job.stderr
    assert_nothing_left(kubectl_emulator)


def test_log_streams_that_end_early_are_followed_again(kubectl_emulator, tmp_path):
    # Every `kubectl logs -f` ends after 1 s; the learners print, wait, print and finish.
    job = k8s_run(kubectl_emulator, tmp_path, "-n", "2", "--image", "img", "--", "sh", "-c",
                  "echo before; sleep 6; echo after", env={"FAKE_KUBECTL_STREAMS_END_AFTER": "1"})
    assert job.returncode == 0, job.stdout + job.stderr
    for k in (1, 2):
        assert f"[learner-{k}] after" in job.stdout
        assert f"[learner-{k}] cadre task: learner-{k} finished" in job.stdout
    assert_nothing_left(kubectl_emulator)


def test_a_deleted_pod_fails_the_job_naming_its_learner(kubectl_emulator, tmp_path):
    # `kubectl delete pod` from outside: the StatefulSet makes a new pod, whose learner would start
    # the command again alone; the job fails naming the learner, and its objects are deleted.
    proc = start_sleeping_job(kubectl_emulator, tmp_path, "cpu")

    def delete_second_pod():
        pod = sorted(kubectl_emulator.pods())[1]
        subprocess.run(["kubectl", "delete", "pod", pod], env=kubectl_emulator.env, check=True,
                       timeout=60, stdout=subprocess.DEVNULL)

    job = interrupt_once_up(proc, str(tmp_path), slots=2, timeout=120,
                            while_up=delete_second_pod, interrupt=None)
    assert job.returncode == 1, job.stderr
    assert job.status()["state"] == "failed", job.stderr
    assert "learner-2" in job.status()["failure"], job.status()
    assert_nothing_left(kubectl_emulator)
