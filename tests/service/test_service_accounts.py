"""Accounts seen by an attacker: tokens that are missing, malformed or someone else's, another
account's trainings reached by id, by filters and by log streams, and a plan's limit under
submissions racing each other. Real server processes on loopback; every wait is bounded."""
import json
import os
import signal
import sqlite3
import subprocess
import threading

from service_helpers import CADRE, FINAL, Client, wait_for, wml_body

HOLD = ("touch started; for i in $(seq 1200); do [ -e release ] && exit 0; sleep 0.1; done; "
        "exit 9")


def release(server, training_id):
    open(os.path.join(server.data_dir, "trainings", training_id, "model", "release"), "w").close()


def users(server, *args):
    """`cadre users ARGS --data-dir <the server's>`: (exit status, stdout, stderr)."""
    out = subprocess.run([CADRE, "users", *args, "--data-dir", str(server.data_dir)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    return out.returncode, out.stdout, out.stderr


def test_a_revoked_token_is_refused_and_a_new_one_finds_the_same_jobs(server):
    ada_token = server.add_user("ada")
    bob_token = server.add_user("bob")
    ada = server.client(ada_token)
    r = ada.submit_json(wml_body("true", name="kept"))
    assert r.status == 201, r
    tid = r.json()["metadata"]["id"]
    rc, out, err = users(server, "revoke", "ada")
    assert rc == 0, err
    assert "revoked 1 token(s) of ada" in out
    # The server reads a token's row again after a few seconds (accounts.h).
    wait_for("the revoked token to be refused", lambda: ada.api("GET", "").status == 401,
             timeout=30)
    assert server.client(bob_token).api("GET", "").status == 200
    rc, out, err = users(server, "token", "ada")
    assert rc == 0, err
    again = server.client(out.strip().splitlines()[-1])
    assert again.get(tid).status == 200
    again.wait_state(tid, FINAL)
    assert again.get(tid).json()["metadata"]["name"] == "kept"
    assert ada.api("GET", "").status == 401
    for args in (("revoke", "nobody"), ("token", "nobody"), ("plan", "nobody", "lite")):
        rc, out, err = users(server, *args)
        assert rc == 2, (args, out, err)
        assert "no user named 'nobody'" in err


def test_a_new_plan_applies_to_later_submissions_and_spares_running_jobs(server):
    sam = server.client(server.add_user("sam", plan="standard"))
    r = sam.submit_json(wml_body(HOLD, nodes=2, name="wide"))
    assert r.status == 201, r
    tid = r.json()["metadata"]["id"]
    try:
        rc, out, err = users(server, "plan", "sam", "gold")
        assert rc == 2 and "unknown plan 'gold'" in err, (out, err)
        rc, out, err = users(server, "plan", "sam", "lite")
        assert rc == 0 and "sam is now on the lite plan" in out, (out, err)

        # The server reads a token's row, plan included, again after a few seconds (accounts.h).
        wait_for("the server to see the lite plan", lambda: json.loads(
            sam.request("GET", "/v1/me").body)["plan"]["name"] == "lite", timeout=30)
        wide = sam.submit_json(wml_body("true", nodes=2))
        assert wide.status == 403, wide
        assert wide.error_codes() == ["plan_not_supported"]
        # The running job counts against the new plan: 2 learners, lite's whole allowance.
        full = sam.submit_json(wml_body("true"))
        assert full.status == 403, full
        message = full.json()["errors"][0]["message"]
        assert "max_active_learners" in message and "2 are" in message, message
        assert sam.state(tid) not in FINAL
    finally:
        release(server, tid)
    assert sam.wait_state(tid, FINAL)["state"] == "completed"


def test_tokens_that_are_not_a_users_are_401(server):
    ada_token = server.add_user("ada")
    token_id = ada_token.split("_")[1]
    bad = [None, "", "cadre_", "cadre__", f"cadre_{token_id}", f"cadre_{token_id}_",
           f"cadre_{token_id}_" + "0" * 48, ada_token + "x", ada_token[:-1], "x" * 1000,
           ada_token.upper(), "cadre_../../etc_passwd", "cadre_' OR 1=1 --_x"]
    for token in bad:
        r = Client(server.url, token).api("GET", "")
        assert r.status == 401, (token, r)
        assert r.error_codes() == ["authentication_failed"] or r.status == 401
    for header in (f"Basic {ada_token}", f"Bearer{ada_token}", f"bearer  {ada_token} x"):
        r = Client(server.url).api("GET", "", headers={"Authorization": header})
        assert r.status == 401, (header, r)
    assert Client(server.url, ada_token).api("GET", "").status == 200


def test_tokens_are_stored_salted_and_hashed(server):
    token = server.add_user("ada")
    with sqlite3.connect(os.path.join(server.data_dir, "cadre.db")) as db:
        dump = "\n".join(db.iterdump())
    secret = token.split("_", 2)[2]
    assert secret not in dump


def test_another_accounts_training_is_not_found_by_any_route(server):
    ada = server.client(server.add_user("ada"))
    bob = server.client(server.add_user("bob"))
    r = ada.submit_json(wml_body(HOLD, name="ada-secret"))
    assert r.status == 201, r
    tid = r.json()["metadata"]["id"]
    try:
        for path, headers in ((f"/{tid}/logs", None), (f"/{tid}/logs?follow=true", None),
                              (f"/{tid}/logs?follow=true", {"Accept": "text/event-stream"}),
                              (f"/{tid}/logs?tail=5", None), (f"/{tid}", None)):
            other = bob.api("GET", path, headers=headers)
            assert other.status == 404, (path, other)
            assert "ada-secret" not in other.body
        for query in ("?state=queued", "?state=running", "?start=0&limit=200", "?start=1"):
            listed = bob.api("GET", query)
            assert listed.status == 200, listed
            assert listed.json()["total_count"] == 0, (query, listed)
        models = bob.request("GET", f"/ml/v4/models?version=2020-09-01&training_id={tid}")
        assert models.status == 200 and models.json()["total_count"] == 0, models
        # Cancelling is refused too: the job goes on running for its owner.
        assert bob.api("DELETE", f"/{tid}?hard_delete=true").status == 404
        assert ada.state(tid) not in FINAL
    finally:
        release(server, tid)
    ada.wait_state(tid, FINAL)


def test_twenty_racing_submissions_stay_within_the_plan(make_server):
    server = make_server(slots=1)
    lee = server.client(server.add_user("lee", plan="lite"))  # two learners at most
    results = [None] * 20

    def submit(i):
        results[i] = lee.submit_json(wml_body(HOLD, name=f"job-{i}"))
    threads = [threading.Thread(target=submit, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert all(r is not None for r in results)
    accepted = [r for r in results if r.status == 201]
    refused = [r for r in results if r.status != 201]
    assert len(accepted) == 2, results
    for r in refused:
        assert r.status == 403, r
        assert r.error_codes() == ["plan_limit_exceeded"]
        message = r.json()["errors"][0]["message"]
        assert "max_active_learners" in message and "2 are" in message, message
    listed = lee.api("GET", "?limit=200").json()
    assert listed["total_count"] == 2
    for r in accepted:
        tid = r.json()["metadata"]["id"]
        assert lee.api("DELETE", f"/{tid}").status == 204
        assert lee.wait_state(tid, FINAL)["state"] == "canceled"
    # With both ended, the plan has room again.
    again = lee.submit_json(wml_body("true"))
    assert again.status == 201, again
    lee.wait_state(again.json()["metadata"]["id"], FINAL)


def test_me_names_only_the_callers_account(server):
    ada_token = server.add_user("ada", plan="lite")
    server.add_user("bob", plan="premium")
    me = Client(server.url, ada_token).request("GET", "/v1/me")
    assert me.status == 200, me
    assert json.loads(me.body)["name"] == "ada"
    assert json.loads(me.body)["plan"]["name"] == "lite"
    assert Client(server.url, "cadre_0_0").request("GET", "/v1/me").status == 401


def test_revocations_and_plans_survive_a_restart(make_server, tmp_path):
    data = tmp_path / "data"
    server = make_server(data_dir=data)
    ada_token = server.add_user("ada", plan="premium")
    bob_token = server.add_user("bob")
    r = server.client(ada_token).submit_json(wml_body("true", name="before"))
    assert r.status == 201, r
    tid = r.json()["metadata"]["id"]
    server.client(ada_token).wait_state(tid, FINAL)
    assert users(server, "plan", "ada", "lite")[0] == 0
    assert users(server, "revoke", "bob")[0] == 0
    server.kill(signal.SIGTERM)

    again = make_server(data_dir=data)
    ada = again.client(ada_token)
    me = ada.request("GET", "/v1/me")
    assert me.status == 200 and json.loads(me.body)["plan"]["name"] == "lite", me
    assert ada.get(tid).json()["metadata"]["name"] == "before"
    assert ada.submit_json(wml_body("true", nodes=2)).error_codes() == ["plan_not_supported"]
    assert again.client(bob_token).api("GET", "").status == 401
