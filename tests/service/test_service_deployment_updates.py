"""Deployments updated to another model in `cadre server`: PATCH swaps scoring processes with no
prediction refused or lost, and an update that did not happen stays told. No timed assertions."""
import os
import signal
import threading

from deployment_helpers import (DOUBLE, GARBAGE, TINY, deploy, ml, model_of, run_cli, score,
                                serve_pids, train, wait_deployment)
from service_helpers import wait_for


def test_a_deployment_updated_to_another_model_answers_every_request(server):
    """PATCH's asset: the old model answers until the new one's process is ready, then the new
    one; no request is refused or lost on the way. A model that does not load leaves the old
    one answering; a failed deployment starts afresh with a model that does."""
    ada = server.client(server.add_user("ada"))
    bob = server.client(server.add_user("bob"))
    tiny_t, double_t, garbage_t = train(ada, TINY, DOUBLE, GARBAGE)
    tiny, double, garbage = (model_of(ada, t)["metadata"]["id"] for t in (tiny_t, double_t,
                                                                          garbage_t))
    did = deploy(ada, tiny, "online")
    assert wait_deployment(ada, did, ("ready", "failed"))["status"]["state"] == "ready"

    def patch(who, ops, target=did):
        return ml(who, "PATCH", f"deployments/{target}", ops)

    # Refusals: all or nothing, each naming its place.
    assert patch(ada, {"asset": {"id": double}}).status == 400
    assert patch(ada, "[1, 2").status == 400
    r = patch(ada, [{"op": "remove", "path": "/asset"},
                    {"op": "replace", "path": "/online", "value": {}},
                    {"op": "replace", "path": "/name", "value": ""}])
    assert r.status == 400, r
    assert r.error_targets() == ["[0].op", "[0].value", "[1].path", "[2].value"], r
    r = patch(ada, [{"op": "replace", "path": "/name", "value": "renamed"},
                    {"op": "replace", "path": "/asset", "value": {"id": "model-nope"}}])
    assert r.status == 404 and r.error_targets() == ["[1].value"], r
    assert ml(ada, "GET", f"deployments/{did}").json()["entity"]["name"] == "online"
    assert patch(bob, [{"op": "replace", "path": "/asset", "value": {"id": double}}]).status \
        == 404
    r = patch(bob, [{"op": "replace", "path": "/asset/id", "value": double}], "deployment-nope")
    assert r.status == 404 and r.error_targets() == ["id"], r
    r = patch(ada, [{"op": "replace", "path": "/name", "value": "renamed"}])
    assert r.status == 200 and r.json()["entity"]["name"] == "renamed", r
    assert r.json()["metadata"]["name"] == "renamed"

    # Updated while clients score it: every request answered 200, by one model or the other.
    answers, stop = [], threading.Event()

    def client_loop():
        while not stop.is_set():
            r = score(ada, did, [[1, 2, 3, 4]])
            answers.append((r.status, r.json()["predictions"][0]["values"][0][1]
                            if r.status == 200 else r.body))
    threads = [threading.Thread(target=client_loop) for _ in range(4)]
    for t in threads:
        t.start()
    wait_for("requests to be answered", lambda: len(answers) > 8)
    old_pids = serve_pids(server, did)
    r = patch(ada, [{"op": "replace", "path": "/asset", "value": {"id": double}}])
    assert r.status == 202 and r.json()["entity"]["status"]["state"] == "updating", r
    assert r.json()["entity"]["asset"]["id"] == tiny  # until the new model answers
    entity = wait_deployment(ada, did, "ready")
    wait_for("the new model's answers", lambda: answers and answers[-1][1] == [2.0, 4.0, 6.0])
    stop.set()
    for t in threads:
        t.join(timeout=120)
    assert {status for status, _ in answers} == {200}, [a for a in answers if a[0] != 200]
    assert {tuple(v) for _, v in answers} == {(1.0, 2.0, 3.0), (2.0, 4.0, 6.0)}
    entity = ml(ada, "GET", f"deployments/{did}").json()["entity"]
    assert entity["asset"]["id"] == double and entity["restarts"] == 0, entity
    assert "updated to model " + double in entity["status"]["message"]["text"], entity
    wait_for("the replaced process to end",
             lambda: not set(old_pids) & set(serve_pids(server, did)))
    assert len(serve_pids(server, did)) == 1

    # A model that does not load: the one before keeps answering, the message says why.
    r = patch(ada, [{"op": "replace", "path": "/asset/id", "value": garbage}])
    assert r.status == 202, r
    entity = wait_for("the update to fail", lambda: (
        lambda e: e if "failed" in e["status"]["message"]["text"] else None)(
        ml(ada, "GET", f"deployments/{did}").json()["entity"]))
    assert entity["status"]["state"] == "ready" and entity["asset"]["id"] == double, entity
    assert "cadre-serve:" in entity["status"]["message"]["text"], entity
    r = score(ada, did, [[1, 2, 3, 4]])
    assert r.status == 200 and r.json()["predictions"][0]["values"][0][1] == [2.0, 4.0, 6.0], r
    assert len(serve_pids(server, did)) == 1

    # From the terminal: `cadre deploy TRAINING --update DEPLOYMENT` waits for the swap.
    env = {"CADRE_SERVER": server.url, "CADRE_TOKEN": ada.token}
    out = run_cli("deploy", tiny_t, "--update", did, env_extra=env)
    assert out.returncode == 0 and out.stdout.strip() == did, out.stderr
    assert ml(ada, "GET", f"deployments/{did}").json()["entity"]["asset"]["id"] == tiny
    assert score(ada, did, [[1, 2, 3, 4]]).json()["predictions"][0]["values"][0][1] == \
        [1.0, 2.0, 3.0]
    out = run_cli("deploy", garbage_t, "--update", did, env_extra=env)
    assert out.returncode == 1 and "was not updated" in out.stderr, out.stderr
    out = run_cli("deploy", tiny_t, "--update", "deployment-nope", env_extra=env)
    assert out.returncode == 1 and "does not exist" in out.stderr, out.stderr
    out = run_cli("deploy", tiny_t, "--update", "../x", env_extra=env)
    assert out.returncode == 2 and "deployment" in out.stderr, out.stderr

    # A deployment that failed starts afresh with another model.
    broken = deploy(ada, garbage, "broken")
    assert wait_deployment(ada, broken, ("ready", "failed"))["status"]["state"] == "failed"
    r = patch(ada, [{"op": "add", "path": "/asset", "value": {"id": tiny}}], broken)
    assert r.status == 202 and r.json()["entity"]["status"]["state"] == "initializing", r
    entity = wait_deployment(ada, broken, ("ready", "failed"))
    assert entity["status"]["state"] == "ready" and entity["asset"]["id"] == tiny, entity
    assert "failure" not in entity["status"], entity
    r = score(ada, broken, [[1, 2, 3, 4]])
    assert r.status == 200 and r.json()["predictions"][0]["values"][0][1] == [1.0, 2.0, 3.0], r
    assert ml(ada, "DELETE", f"deployments/{broken}").status == 204
    wait_for("the deleted deployment's process to end", lambda: not serve_pids(server, broken))


def test_an_update_abandoned_when_the_server_stops_is_told_until_one_succeeds(make_server):
    """PATCH to another model, then the server stops before that model's process is ready: it
    comes back with the model it had, and its status says the update was abandoned, also once
    ready and after another restart, until an update succeeds."""
    server = make_server()
    token = server.add_user("ada")
    ada = server.client(token)
    tiny_t, double_t = train(ada, TINY, DOUBLE)
    tiny, double = (model_of(ada, t)["metadata"]["id"] for t in (tiny_t, double_t))
    did = deploy(ada, tiny, "online")
    assert wait_deployment(ada, did, ("ready", "failed"))["status"]["state"] == "ready"
    # The new model's file made a FIFO: its process waits to read it, so the update is still
    # under way when the server stops, however fast the machine.
    model_file = os.path.join(server.data_dir, "models", double, "model.pt")
    saved = model_file + ".saved"
    os.rename(model_file, saved)
    os.mkfifo(model_file)
    r = ml(ada, "PATCH", f"deployments/{did}",
           [{"op": "replace", "path": "/asset", "value": {"id": double}}])
    assert r.status == 202 and r.json()["entity"]["status"]["state"] == "updating", r
    server.kill(signal.SIGTERM)
    os.remove(model_file)
    os.rename(saved, model_file)

    abandoned = f"the update to model {double} was abandoned"
    for _ in range(2):  # the note outlives a ready state and a second restart
        server = make_server(data_dir=server.data_dir)
        ada = server.client(token)
        entity = wait_deployment(ada, did, ("ready", "failed"))
        assert entity["status"]["state"] == "ready" and entity["asset"]["id"] == tiny, entity
        text = entity["status"]["message"]["text"]
        assert text.startswith("ready; ") and abandoned in text and "send the update again" in \
            text, entity
        r = score(ada, did, [[1, 2, 3, 4]])
        assert r.status == 200 and r.json()["predictions"][0]["values"][0][1] == \
            [1.0, 2.0, 3.0], r
        server.kill(signal.SIGTERM)

    server = make_server(data_dir=server.data_dir)
    ada = server.client(token)
    assert wait_deployment(ada, did, ("ready", "failed"))["status"]["state"] == "ready"
    r = ml(ada, "PATCH", f"deployments/{did}",
           [{"op": "replace", "path": "/asset", "value": {"id": double}}])
    assert r.status == 202, r
    entity = wait_for("the update to succeed", lambda: (
        lambda e: e if e["asset"]["id"] == double and e["status"]["state"] == "ready" else None)(
        ml(ada, "GET", f"deployments/{did}").json()["entity"]))
    assert "abandoned" not in entity["status"]["message"]["text"], entity
