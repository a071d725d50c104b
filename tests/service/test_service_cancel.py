"""Cancel at every moment of a job's start: queued, while its runner is being started, while the
runner starts its learners. Whatever the moment, the training ends `canceled` and nothing of it
is left running. The server's grace period (SIGTERM to SIGKILL) is far longer than any wait
here, so a stop that was lost on the way and had to wait for the SIGKILL fails the test."""
import time

from service_helpers import FINAL, pids_of_processes_mentioning, wait_for, wml_body

GRACE = 600  # seconds; every wait below is bounded well under it


def test_cancel_right_after_submit_ends_canceled_and_leaves_no_process(make_server):
    server = make_server(slots=4, grace=GRACE)
    ada = server.client(server.add_user("ada"))
    for delay in (0, 0.002, 0.01, 0.03, 0.06, 0.1, 0.2, 0.4, 0.8):
        r = ada.submit_json(wml_body("sleep 600", nodes=2, name=f"cancel-after-{delay}"))
        assert r.status == 201, r
        training_id = r.json()["metadata"]["id"]
        time.sleep(delay)
        d = ada.api("DELETE", f"/{training_id}")
        assert d.status == 204, d
        status = ada.wait_state(training_id, FINAL, timeout=120)
        assert status["state"] == "canceled", (delay, status)
        wait_for(f"every process of {training_id} (canceled {delay} s after submit) to end",
                 lambda: not pids_of_processes_mentioning(training_id), timeout=120)


def test_a_queued_job_behind_one_that_does_not_fit_is_canceled_at_once(make_server):
    # The scheduler stopped at the first queued job that did not fit, so a canceled job behind
    # it stayed `queued` (and a hard delete kept its files) until everything ahead had run.
    server = make_server(slots=2, grace=GRACE)
    ada = server.client(server.add_user("ada"))
    ids = []
    for name in ("running", "head", "behind"):
        r = ada.submit_json(wml_body("sleep 600", nodes=2, framework="pytorch-horovod", name=name))
        assert r.status == 201, r
        ids.append(r.json()["metadata"]["id"])
    running, head, behind = ids
    ada.wait_state(running, "running", timeout=60)
    assert ada.state(head) == "queued"
    assert ada.api("DELETE", f"/{behind}").status == 204
    assert ada.wait_state(behind, FINAL, timeout=10)["state"] == "canceled"
    assert ada.state(head) == "queued" and ada.state(running) == "running"
    for training_id in (running, head):
        assert ada.api("DELETE", f"/{training_id}").status == 204
        assert ada.wait_state(training_id, FINAL, timeout=60)["state"] == "canceled"
