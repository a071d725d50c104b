"""`cadre server` on a machine with GPUs, played by a fake `nvidia-smi` first on the server's PATH
(the server counts the machine's GPUs as `cadre run` does): concurrent jobs get disjoint GPUs
through their runners' CUDA_VISIBLE_DEVICES, a job waits in `queued`, saying why, until enough are
free, GPUs come back however a job ends (completed, failed, canceled, across a restart of the
server), a job without GPUs sees none, and a job needing more than the machine has is refused.
A queued job that no longer fits a restarted server (fewer GPUs or fewer slots) fails saying
why instead of holding back the queue forever."""
import os
import subprocess
import sys
import textwrap

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from test_run_gpus import fake_gpus  # noqa: E402

from service_helpers import CADRE, FINAL, wait_for, wml_body  # noqa: E402

# A learner that records the GPUs it sees, then holds them until the test writes its release
# file ("fail" makes it fail). Its own wait is bounded, so nothing outlives a broken test long.
HOLD = textwrap.dedent("""
    import os, pathlib, sys, time
    sync = pathlib.Path(sys.argv[1])
    me = os.environ["TRAINING_ID"]
    seen = "gpus-%s-%s" % (me, os.environ["LEARNER_ID"])
    (sync / (seen + ".tmp")).write_text(os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"))
    os.rename(sync / (seen + ".tmp"), sync / seen)
    release = sync / ("release-" + me)
    deadline = time.monotonic() + 300
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    sys.exit(3 if release.exists() and release.read_text() == "fail" else 0)
""")


class GpuJobs:
    """Submits holding jobs and reads what they saw."""

    def __init__(self, client, tmp_path):
        self.client = client
        self.sync = tmp_path / "sync"
        self.sync.mkdir(exist_ok=True)
        self.script = tmp_path / "hold.py"
        self.script.write_text(HOLD)

    def submit(self, compute="k80", nodes=1, name="gpu-job", framework="pytorch"):
        r = self.client.submit_json(wml_body(f"python3 {self.script} {self.sync}", nodes=nodes,
                                             compute=compute, name=name, framework=framework))
        assert r.status == 201, r
        return r.json()["metadata"]["id"]

    def gpus_seen(self, training_id, learner=1):
        """What the job's learner saw in CUDA_VISIBLE_DEVICES (waits for it to start)."""
        seen = self.sync / f"gpus-{training_id}-{learner}"
        wait_for(f"training {training_id}'s learner to start", seen.exists, timeout=120)
        return seen.read_text()

    def started(self, training_id):
        return any(self.sync.glob(f"gpus-{training_id}-*"))

    def release(self, training_id, how="ok"):
        (self.sync / f"release-{training_id}").write_text(how)

    def wait_queued_for(self, training_id, words):
        """Waits until the queued job's status message says `words` (the scheduler looked at it
        and kept it queued), and returns that message."""
        def check():
            status = self.client.get(training_id).json()["entity"]["status"]
            assert status["state"] == "queued", status
            text = status.get("message", {}).get("text", "")
            return text if words in text else None
        return wait_for(f"training {training_id} to wait for '{words}'", check, timeout=60)


def gpu_server(make_server, tmp_path, count, slots=8, **kw):
    env = dict(os.environ)
    for key, value in fake_gpus(tmp_path, count).items():
        env.pop(key, None)
        if value is not None:
            env[key] = value
    server = make_server(slots=slots, env=env, **kw)
    return server, GpuJobs(server.client(server.add_user("ada")), tmp_path)


def test_concurrent_jobs_get_their_own_gpus_and_the_next_waits_for_a_free_one(make_server,
                                                                             tmp_path):
    server, jobs = gpu_server(make_server, tmp_path, 2)
    assert any("and 2 GPUs (nvidia-smi -L)" in line for line in server.output), server.output
    first, second = jobs.submit(name="first"), jobs.submit(name="second")
    assert {jobs.gpus_seen(first), jobs.gpus_seen(second)} == {"0", "1"}
    assert jobs.client.state(first) == "running" and jobs.client.state(second) == "running"

    # Slots are free, but no GPU: a CPU job still runs, seeing no GPU at all.
    cpu = jobs.submit(compute="cpu", name="cpu")
    assert jobs.gpus_seen(cpu) == ""
    jobs.release(cpu)
    assert jobs.client.wait_state(cpu, FINAL)["state"] == "completed"

    third = jobs.submit(name="third")
    message = jobs.wait_queued_for(third, "waiting for GPUs")
    assert "it needs 1 and 0 of the machine's 2 are free" in message, message
    behind = jobs.submit(compute="cpu", name="behind")  # first come, first served
    assert "waiting behind training " + third in jobs.wait_queued_for(behind, "waiting behind")
    assert not jobs.started(third) and not jobs.started(behind)

    # A completed job's GPU goes to the waiting one.
    freed = jobs.gpus_seen(first)
    jobs.release(first)
    assert jobs.client.wait_state(first, FINAL)["state"] == "completed"
    assert jobs.gpus_seen(third) == freed
    assert jobs.gpus_seen(behind) == ""
    status = jobs.client.wait_state(third, "running")
    assert "waiting" not in status.get("message", {}).get("text", ""), status

    # So does a canceled job's.
    fourth = jobs.submit(name="fourth")
    jobs.wait_queued_for(fourth, "waiting for GPUs")
    freed = jobs.gpus_seen(second)
    assert jobs.client.api("DELETE", f"/{second}").status == 204
    assert jobs.client.wait_state(second, FINAL)["state"] == "canceled"
    assert jobs.gpus_seen(fourth) == freed
    for training_id in (third, fourth, behind):
        jobs.release(training_id)
        assert jobs.client.wait_state(training_id, FINAL)["state"] == "completed"


def test_a_restarted_server_knows_which_gpus_its_running_jobs_hold(make_server, tmp_path):
    server, jobs = gpu_server(make_server, tmp_path, 1)
    holder = jobs.submit(name="holder")
    assert jobs.gpus_seen(holder) == "0"
    server.kill()
    server.start()
    jobs.client.url = server.url
    waiting = jobs.submit(name="waiting")
    jobs.wait_queued_for(waiting, "waiting for GPUs")
    # A failed job's GPU is free again too.
    jobs.release(holder, "fail")
    assert jobs.client.wait_state(holder, FINAL)["state"] == "failed"
    assert jobs.gpus_seen(waiting) == "0"
    jobs.release(waiting)
    assert jobs.client.wait_state(waiting, FINAL)["state"] == "completed"


def test_a_queued_job_that_no_longer_fits_after_a_restart_fails_saying_why(make_server,
                                                                          tmp_path):
    server, jobs = gpu_server(make_server, tmp_path, 2)
    holder = jobs.submit(name="holder")
    jobs.gpus_seen(holder)
    pair = jobs.submit(nodes=2, name="pair", framework="pytorch-ddl")
    jobs.wait_queued_for(pair, "waiting for GPUs")
    server.kill()
    server.env["CUDA_VISIBLE_DEVICES"] = jobs.gpus_seen(holder)  # one GPU left to the server
    server.start()
    jobs.client.url = server.url
    status = jobs.client.wait_state(pair, FINAL)
    assert status["state"] == "failed", status
    assert ("the job needs 2 GPUs, but the server now has 1 (CUDA_VISIBLE_DEVICES='"
            in status["failure"]["errors"][0]["message"]), status
    jobs.release(holder)
    assert jobs.client.wait_state(holder, FINAL)["state"] == "completed"


def test_a_queued_job_needing_more_slots_than_a_restarted_server_has_fails_saying_why(
        make_server, tmp_path):
    server = make_server(slots=4)
    jobs = GpuJobs(server.client(server.add_user("ada")), tmp_path)
    holder = jobs.submit(compute="cpu", name="holder")
    jobs.gpus_seen(holder)
    big = jobs.submit(compute="cpu", nodes=4, name="big")  # 4 slots, 3 free
    jobs.wait_queued_for(big, "waiting for slots")
    behind = jobs.submit(compute="cpu", name="behind")
    jobs.wait_queued_for(behind, "waiting behind training " + big)
    server.kill()
    server.slots = 2
    server.start()
    jobs.client.url = server.url
    status = jobs.client.wait_state(big, FINAL)
    assert status["state"] == "failed", status
    assert ("the job runs 4 processes (slots) at once, but the server now has 2 (--slots)"
            in status["failure"]["errors"][0]["message"]), status
    # The job behind it is no longer held back: 1 slot next to the holder's fits in 2.
    jobs.gpus_seen(behind)
    for training_id in (holder, behind):
        jobs.release(training_id)
        assert jobs.client.wait_state(training_id, FINAL)["state"] == "completed"


def test_a_job_needing_more_gpus_than_the_machine_has_is_refused_naming_the_field(make_server,
                                                                                 tmp_path):
    server, jobs = gpu_server(make_server, tmp_path, 2)
    r = jobs.client.submit_json(wml_body("true", nodes=2, compute="k80x2",
                                         framework="pytorch-horovod"))
    assert r.status == 400, r
    assert r.error_codes() == ["exceeds_capacity"] and r.error_targets() == ["hardware_spec.name"]
    assert ("hardware_spec.name: compute configuration 'k80x2' asks for 2 GPU(s) per learner x 2 "
            "learner(s) = 4 GPUs, but this machine has 2 (nvidia-smi -L)") in r.json()[
                "errors"][0]["message"], r
    manifest = textwrap.dedent("""
        name: too-big
        framework: {name: pytorch-horovod}
        execution:
          command: "true"
          compute_configuration: {name: k80x4, nodes: 2}
    """)
    r = jobs.client.submit_manifest(manifest)
    assert r.status == 400, r
    assert r.error_targets() == ["execution.compute_configuration.name"], r
    assert jobs.client.api("GET", "").json()["total_count"] == 0
    # What fits is taken: 2 learners x 1 GPU.
    fits = jobs.submit(nodes=2, name="fits", framework="pytorch-ddl")
    assert [jobs.gpus_seen(fits, learner) for learner in (1, 2)] == ["0", "1"]
    jobs.release(fits)
    assert jobs.client.wait_state(fits, FINAL)["state"] == "completed"


def test_a_server_whose_cuda_visible_devices_names_no_gpu_does_not_start(tmp_path):
    env = dict(os.environ, PATH=fake_gpus(tmp_path, 2)["PATH"], CUDA_VISIBLE_DEVICES="0,5")
    out = subprocess.run([CADRE, "server", "--data-dir", str(tmp_path / "data"), "--listen",
                          "127.0.0.1:0"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, timeout=60)
    assert out.returncode != 0
    assert "CUDA_VISIBLE_DEVICES='0,5': '5' names no GPU of this machine" in out.stderr, out.stderr


def test_parameter_servers_hold_no_gpu(make_server, tmp_path):
    # Two parameter-server jobs (learner 1 serves, learner 2 works) on 2 GPUs: the servers run
    # their optimizer on CPUs, so each job holds only its worker's GPU and both run at once.
    server, jobs = gpu_server(make_server, tmp_path, 2)
    first, second = (jobs.submit(nodes=2, name=name) for name in ("first", "second"))
    assert {jobs.gpus_seen(first, learner=2), jobs.gpus_seen(second, learner=2)} == {"0", "1"}
    assert jobs.gpus_seen(first, learner=1) == "" and jobs.gpus_seen(second, learner=1) == ""
    for training_id in (first, second):
        assert jobs.client.state(training_id) == "running"
        jobs.release(training_id)
        assert jobs.client.wait_state(training_id, FINAL)["state"] == "completed"
