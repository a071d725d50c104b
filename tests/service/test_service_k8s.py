"""`cadre server --backend kubernetes`: the service runs the jobs it admits through `cadre run
--backend kubernetes`, here against the kubectl emulator (tests/k8s/fake_kubectl.py; not a
cluster). A job runs to completion in pods, with the learners' logs in the training's log and
nothing left behind, a cancel deletes its pods; the server needs --slots and refuses manifests
without an image."""
import os
import signal
import subprocess

from service_helpers import CADRE, FINAL, wait_for


def start_two_learner_job(make_server, kubectl_emulator, name, *extra):
    """A server on the kubernetes backend running a 2-learner job `name` whose learners print
    "up" and sleep; returns (server, client, training id, the service's work folder) once both
    learners' pods have printed it."""
    server = make_server(slots=4, extra=["--backend", "kubernetes", *extra],
                         env=kubectl_emulator.env)
    ada = server.client(server.add_user("ada"))
    r = ada.submit_manifest(
        f"name: {name}\nframework: {{name: pytorch-horovod}}\nimage: img\n"
        "execution: {command: 'echo up; sleep 300', compute_configuration: {name: cpu, nodes: 2}}\n")
    assert r.status == 201, r
    tid = r.json()["metadata"]["id"]
    work = os.path.join(server.data_dir, "trainings", tid)
    log = os.path.join(work, "training.log")

    def both_up():
        text = open(log).read() if os.path.exists(log) else ""
        return "[learner-1] up" in text and "[learner-2] up" in text
    wait_for("both learners' pods to run", both_up, timeout=120)
    return server, ada, tid, work


def test_a_job_runs_to_completion_in_pods(make_server, kubectl_emulator):
    server = make_server(slots=4, extra=["--backend", "kubernetes", "--namespace", "ml"],
                         env=kubectl_emulator.env)
    assert any("4 slots on the kubernetes backend" in line for line in server.output)
    ada = server.client(server.add_user("ada"))
    r = ada.submit_manifest(
        "name: on-k8s\nframework: {name: pytorch-horovod}\nimage: registry.example/cadre:1\n"
        "execution: {command: 'echo learner $LEARNER_ID of $NUM_LEARNERS named $(hostname)',\n"
        "            compute_configuration: {name: cpu, nodes: 2}}\n")
    assert r.status == 201, r
    tid = r.json()["metadata"]["id"]
    status = ada.wait_state(tid, FINAL, timeout=180)
    with open(os.path.join(server.data_dir, "trainings", tid, "training.log")) as f:
        log = f.read()
    assert status["state"] == "completed", (status, log)
    assert "created StatefulSet on-k8s-" in log and "in namespace ml" in log, log
    name = "on-k8s-" + tid[-6:]
    for k in (1, 2):
        assert f"[learner-{k}] learner {k} of 2 named {name}-{k}" in log, log
    assert kubectl_emulator.wait_gone(timeout=5)
    assert kubectl_emulator.objects("ml") == [] and kubectl_emulator.pods("ml") == []


def test_the_server_needs_slots_and_jobs_need_an_image(make_server, kubectl_emulator, tmp_path):
    out = subprocess.run([CADRE, "server", "--data-dir", str(tmp_path / "d"), "--listen",
                          "127.0.0.1:0", "--backend", "kubernetes"], env=kubectl_emulator.env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert out.returncode == 2 and "--slots" in out.stderr, out
    server = make_server(slots=2, extra=["--backend", "kubernetes"], env=kubectl_emulator.env)
    ada = server.client(server.add_user("ada"))
    r = ada.submit_manifest(
        "name: no-image\nframework: {name: pytorch}\n"
        "execution: {command: 'true', compute_configuration: {name: cpu, nodes: 1}}\n")
    assert r.status == 400, r
    assert r.error_targets() == ["image"], r


def test_a_cancel_deletes_the_jobs_pods(make_server, kubectl_emulator):
    server, ada, tid, _ = start_two_learner_job(make_server, kubectl_emulator, "long")
    assert len(kubectl_emulator.pods()) == 2
    assert ada.api("DELETE", f"/{tid}").status == 204
    assert ada.wait_state(tid, FINAL, timeout=120)["state"] == "canceled"
    assert kubectl_emulator.wait_gone(timeout=60)
    assert kubectl_emulator.objects() == [] and kubectl_emulator.pods() == []


def test_a_killed_runners_objects_are_deleted_by_the_service(make_server, kubectl_emulator):
    # A runner killed by SIGKILL cannot delete its objects; they ran on, pods and all, until
    # someone deleted them by hand. The service, which sees the runner gone, deletes them.
    server, ada, tid, work = start_two_learner_job(make_server, kubectl_emulator, "orphan",
                                                   "--namespace", "ml")
    assert len(kubectl_emulator.pods("ml")) == 2
    with open(os.path.join(work, "runner.pid")) as f:
        os.kill(int(f.read()), signal.SIGKILL)
    status = ada.wait_state(tid, FINAL, timeout=120)
    assert status["state"] == "failed", status
    message = status["failure"]["errors"][0]["message"]
    assert "were deleted from namespace ml" in message, message
    assert kubectl_emulator.wait_gone(timeout=60)
    assert kubectl_emulator.objects("ml") == [] and kubectl_emulator.pods("ml") == []
