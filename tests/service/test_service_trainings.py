"""`cadre server` end to end: real server processes on loopback, driven over HTTP, with real jobs
run by `cadre run` underneath. No timed assertions: every wait is bounded, none is measured."""
import json
import os
import signal
import threading

from service_helpers import (FINAL, make_zip, pids_of_processes_mentioning, wait_for, wml_body)

# A learner command that holds its slot until the test creates the file `release` in its folder
# (bounded: it gives up after 120 s and fails).
HOLD = ("touch started; for i in $(seq 1200); do [ -e release ] && exit 0; sleep 0.1; done; "
        "exit 9")


def job_dir(client, training_id):
    """The job's RESULT_DIR."""
    return client.get(training_id).json()["entity"]["results_reference"]["location"]["path"]


def work_dir(server, training_id):
    """The service's folder for the job: model/ (the code, where the command runs), the log."""
    return os.path.join(server.data_dir, "trainings", training_id)


def release(server, training_id):
    open(os.path.join(work_dir(server, training_id), "model", "release"), "w").close()


def wait_started(server, training_id):
    path = os.path.join(work_dir(server, training_id), "model", "started")
    wait_for(f"{training_id}'s learner to start", lambda: os.path.exists(path), timeout=120)


def test_submit_queue_run_complete_with_logs_and_metrics(make_server):
    server = make_server(slots=1)
    ada = server.client(server.add_user("ada"))
    first = ada.submit_json(wml_body(HOLD, name="first"))
    assert first.status == 201, first
    first_id = first.json()["metadata"]["id"]
    assert first.headers["Location"] == f"/ml/v4/trainings/{first_id}"
    wait_started(server, first_id)
    assert ada.state(first_id) == "running"

    script = ("import cadre\n"
              "for step in range(3):\n"
              "    cadre.log_metrics(step, loss=1.0 / (step + 1), accuracy=0.3 * step)\n"
              "print('hello from the learner', flush=True)\n")
    second = ada.submit_manifest(
        "name: second\nframework: {name: pytorch}\n"
        "execution: {command: python3 train.py, compute_configuration: {name: cpu, nodes: 1}}\n",
        code=make_zip({"train.py": script}))
    assert second.status == 201, second
    second_id = second.json()["metadata"]["id"]
    # The only slot is taken: the second job waits its turn.
    assert ada.state(second_id) == "queued"
    release(server, first_id)
    assert ada.wait_state(first_id, FINAL)["state"] == "completed"
    status = ada.wait_state(second_id, FINAL)
    assert status["state"] == "completed", status
    assert status["running_at"] and status["completed_at"]
    metrics = status["metrics"]
    assert [m["iteration"] for m in metrics] == [0, 1, 2]
    assert metrics[2]["ml_metrics"] == {"loss": 1.0 / 3, "accuracy": 0.3 * 2}
    log = open(os.path.join(work_dir(server, second_id), "training.log")).read()
    assert "[learner-1] hello from the learner" in log or "hello from the learner" in log, log

    listed = ada.api("GET", "?state=completed&limit=1")
    assert listed.status == 200, listed
    page = listed.json()
    assert page["total_count"] == 2 and len(page["resources"]) == 1
    assert "start=1" in page["next"]["href"]


def test_failure_names_the_learner_and_its_exit_status(server):
    ada = server.client(server.add_user("ada"))
    r = ada.submit_json(wml_body("exit 3", nodes=2))
    assert r.status == 201, r
    status = ada.wait_state(r.json()["metadata"]["id"], FINAL)
    assert status["state"] == "failed"
    message = status["failure"]["errors"][0]["message"]
    assert "learner-" in message and "code 3" in message, message
    assert status["message"]["level"] == "error", status  # it said "info"


def test_cancel_stops_every_learner(server):
    ada = server.client(server.add_user("ada"))
    r = ada.submit_json(wml_body(HOLD, nodes=2))
    assert r.status == 201, r
    tid = r.json()["metadata"]["id"]
    wait_started(server, tid)
    where = job_dir(ada, tid)
    assert pids_of_processes_mentioning(where)
    assert ada.api("DELETE", f"/{tid}").status == 204
    assert ada.wait_state(tid, FINAL)["state"] == "canceled"
    # No orphan: nothing that was started for the job is left in the process table.
    wait_for("the job's processes to end", lambda: not pids_of_processes_mentioning(where),
             timeout=30)
    # Canceling a queued job and hard-deleting a finished one.
    assert ada.api("DELETE", f"/{tid}?hard_delete=true").status == 204
    assert ada.get(tid).status == 404
    wait_for("the job's folders to be removed", lambda: not os.path.exists(where) and
             not os.path.exists(work_dir(server, tid)), timeout=30)


def test_users_see_only_their_own_jobs(server):
    ada = server.client(server.add_user("ada"))
    bob = server.client(server.add_user("bob"))
    r = ada.submit_json(wml_body("true"))
    assert r.status == 201, r
    tid = r.json()["metadata"]["id"]
    for method in ("GET", "DELETE"):
        other = bob.api(method, f"/{tid}")
        assert other.status == 404, other
        assert other.error_codes() == ["training_not_found"]
    assert bob.api("GET", "").json()["total_count"] == 0
    assert ada.api("GET", "").json()["total_count"] == 1
    ada.wait_state(tid, FINAL)


def test_lite_plan_is_refused_distributed_jobs(server):
    lite = server.client(server.add_user("lee", plan="lite"))
    for body in (wml_body("true", nodes=2),
                 wml_body("true", nodes=2, framework="pytorch-horovod")):
        r = lite.submit_json(body)
        assert r.status == 403, r
        assert r.error_codes() == ["plan_not_supported"]
        assert "lite" in r.json()["errors"][0]["message"]
    ok = lite.submit_json(wml_body("true"))
    assert ok.status == 201, ok
    lite.wait_state(ok.json()["metadata"]["id"], FINAL)


def test_over_the_plan_limit_names_the_limit(server):
    standard = server.client(server.add_user("sam", plan="standard"))
    r = standard.submit_json(wml_body("true", nodes=9))
    assert r.status == 403, r
    assert r.error_codes() == ["plan_limit_exceeded"]
    assert "max_nodes" in r.json()["errors"][0]["message"]


def test_fifty_concurrent_submissions_are_all_recorded_once(make_server):
    server = make_server(slots=1)
    ada = server.client(server.add_user("ada", plan="premium"))
    # One job holds the only slot, so the fifty stay queued and cost nothing to run.
    blocker = ada.submit_json(wml_body(HOLD, name="blocker"))
    assert blocker.status == 201, blocker
    results = [None] * 50

    def submit(i):
        results[i] = ada.submit_json(wml_body("true", name=f"job-{i}"))
    threads = [threading.Thread(target=submit, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert all(r is not None and r.status == 201 for r in results), results
    ids = [r.json()["metadata"]["id"] for r in results]
    assert len(set(ids)) == 50
    listed = ada.api("GET", "?limit=200").json()
    assert listed["total_count"] == 51
    names = sorted(t["metadata"]["name"] for t in listed["resources"])
    assert names == sorted([f"job-{i}" for i in range(50)] + ["blocker"])
    for tid in ids:
        assert ada.api("DELETE", f"/{tid}").status == 204
    for tid in ids:
        assert ada.wait_state(tid, FINAL)["state"] == "canceled"
    release(server, blocker.json()["metadata"]["id"])


def test_a_job_survives_the_server_being_killed(make_server, tmp_path):
    data = tmp_path / "data"
    server = make_server(data_dir=data)
    ada_token = server.add_user("ada")
    ada = server.client(ada_token)
    r = ada.submit_json(wml_body(HOLD))
    tid = r.json()["metadata"]["id"]
    wait_started(server, tid)
    doomed = ada.submit_json(wml_body(HOLD, name="doomed"))
    doomed_id = doomed.json()["metadata"]["id"]
    wait_started(server, doomed_id)
    where = job_dir(ada, tid)
    server.kill(signal.SIGKILL)

    # While the server is down: one job's runner dies too, the other carries on.
    doomed_runner = int(open(os.path.join(work_dir(server, doomed_id), "runner.pid")).read())
    os.kill(doomed_runner, signal.SIGKILL)
    assert pids_of_processes_mentioning(where)
    release_file = os.path.join(work_dir(server, tid), "model", "release")

    again = make_server(data_dir=data)
    ada = again.client(ada_token)
    assert ada.state(tid) == "running"
    open(release_file, "w").close()
    assert ada.wait_state(tid, FINAL)["state"] == "completed"
    status = ada.wait_state(doomed_id, FINAL)
    assert status["state"] == "failed"
    assert "runner" in status["failure"]["errors"][0]["message"]


def test_a_job_its_runner_refuses_fails_with_the_runners_reason(make_server):
    # The service lets the job through (its runner's variables are not the submission's), and the
    # runner refuses it before it starts: the failure once said the runner "was killed or the
    # machine restarted", since the service cannot see a detached runner's exit status.
    env = dict(os.environ, CADRE_CPU_BIND="sideways")
    server = make_server(env=env)
    ada = server.client(server.add_user("ada"))
    r = ada.submit_json(wml_body("true", nodes=1))
    assert r.status == 201, r
    status = ada.wait_state(r.json()["metadata"]["id"], FINAL)
    assert status["state"] == "failed", status
    message = status["failure"]["errors"][0]["message"]
    assert "CADRE_CPU_BIND" in message and "sideways" in message, message
    assert "killed" not in message, message
