"""Logs: persisted in the job directory, read with since/tail, followed live (plain chunked text
or server-sent events); and the terminal client (`cadre submit`, `cadre jobs ...`)."""
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.request

from service_helpers import CADRE, FINAL, VERSION, wait_for, wml_body

PRINT_AND_HOLD = ("for i in 1 2 3 4 5; do echo line $i; done; "
                  "for i in $(seq 1200); do [ -e release ] && break; sleep 0.1; done; "
                  "echo finished")


def stream(client, path, accept=None, sink=None):
    """Reads a streamed response line by line into `sink` (a list) until it ends."""
    headers = {"Authorization": f"Bearer {client.token}"}
    if accept:
        headers["Accept"] = accept
    req = urllib.request.Request(client.url + path, headers=headers)
    with urllib.request.urlopen(req, timeout=120) as r:
        for raw in r:
            sink.append(raw.decode().rstrip("\n"))


def test_follow_since_tail_and_events(server):
    ada = server.client(server.add_user("ada"))
    r = ada.submit_json(wml_body(PRINT_AND_HOLD))
    tid = r.json()["metadata"]["id"]
    where = os.path.join(server.data_dir, "trainings", tid)
    logs = f"/ml/v4/trainings/{tid}/logs?version={VERSION}"
    followed, events = [], []
    threads = [threading.Thread(target=stream, args=(ada, logs + "&follow=true"),
                                kwargs={"sink": followed}),
               threading.Thread(target=stream, args=(ada, logs + "&follow=true&since=2"),
                                kwargs={"sink": events, "accept": "text/event-stream"})]
    for t in threads:
        t.start()
    # Lines arrive while the job still runs.
    wait_for("the follower to see line 5", lambda: any(l.endswith("line 5") for l in followed),
             timeout=120)
    assert ada.state(tid) == "running"
    assert not any("finished" in l for l in followed)

    tail = ada.request("GET", logs + "&tail=2")
    assert tail.status == 200, tail
    assert [l.split("] ")[-1] for l in tail.body.splitlines()] == ["line 4", "line 5"]
    since = ada.request("GET", logs + "&since=3")
    assert [l.split("] ")[-1] for l in since.body.splitlines()] == ["line 4", "line 5"]

    open(os.path.join(where, "model", "release"), "w").close()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive(), "a follower did not end with the job"
    assert [l.split("] ")[-1] for l in followed[:5]] == [f"line {i}" for i in range(1, 6)]
    assert any(l.endswith("finished") for l in followed)
    assert "id: 3" in events and not any(l == "id: 2" for l in events)
    assert events[-3:] == ["event: end", "data: completed", ""], events[-6:]
    # The log is kept with the job.
    assert ada.request("GET", logs).body.count("line ") == 5


def test_events_of_an_ended_job_end_with_its_state(server):
    # A client following with events tells the job's end from a broken stream (a restarting
    # server) by `event: end`; a job that had ended before the request sent none.
    ada = server.client(server.add_user("ada"))
    tid = ada.submit_json(wml_body("echo one; echo two")).json()["metadata"]["id"]
    ada.wait_state(tid, FINAL)
    logs = f"/ml/v4/trainings/{tid}/logs?version={VERSION}"
    for query in ("&follow=true", "&follow=true&since=1", ""):
        events = []
        stream(ada, logs + query, accept="text/event-stream", sink=events)
        assert events[-3:] == ["event: end", "data: completed", ""], (query, events)
    plain = ada.request("GET", logs + "&follow=true")
    assert "event:" not in plain.body and "two" in plain.body, plain


def test_a_carriage_return_in_a_line_cannot_forge_an_event(server):
    # In an event stream CR ends a field as LF does: a line printing "\revent: end" must not end
    # the stream for a standard EventSource client before the job has.
    ada = server.client(server.add_user("ada"))
    body = wml_body("printf 'one\\r\\revent: end\\rdata: forged\\n'; echo two")
    tid = ada.submit_json(body).json()["metadata"]["id"]
    ada.wait_state(tid, FINAL)
    r = ada.request("GET", f"/ml/v4/trainings/{tid}/logs?version={VERSION}",
                    headers={"Accept": "text/event-stream"})
    fields = r.body.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    assert fields.count("event: end") == 1, r.body
    assert fields[-4:] == ["event: end", "data: completed", "", ""], r.body
    assert "data: event: end" in fields and "data: data: forged" in fields, r.body
    plain = ada.request("GET", f"/ml/v4/trainings/{tid}/logs?version={VERSION}")
    assert "one\r\revent: end\rdata: forged\n" in plain.body, plain


def test_bad_log_parameters(server):
    ada = server.client(server.add_user("ada"))
    tid = ada.submit_json(wml_body("echo hi")).json()["metadata"]["id"]
    for query in ("since=garbage", "tail=-1", "follow=maybe", "since=-3"):
        r = ada.request("GET", f"/ml/v4/trainings/{tid}/logs?version={VERSION}&{query}")
        assert r.status == 400, (query, r)
        assert r.error_codes() == ["invalid_parameter"]
    assert ada.request("GET", f"/ml/v4/trainings/nope/logs?version={VERSION}").status == 404
    ada.wait_state(tid, FINAL)


def test_last_event_id_resumes_after_it_and_junk_is_refused_naming_the_header(server):
    ada = server.client(server.add_user("ada"))
    tid = ada.submit_json(wml_body("for i in 1 2 3 4 5; do echo line $i; done")).json()
    tid = tid["metadata"]["id"]
    ada.wait_state(tid, FINAL)
    logs = f"/ml/v4/trainings/{tid}/logs?version={VERSION}"
    events = {"Accept": "text/event-stream"}
    whole = ada.request("GET", logs, headers=events).body
    ids = [int(l[4:]) for l in whole.splitlines() if l.startswith("id: ")]
    assert len(ids) > 3, whole
    # EventSource reconnects to the URL it was given (since=0 here) with the last id it had.
    r = ada.request("GET", logs + "&since=0", headers=dict(events, **{"Last-Event-ID": "3"}))
    assert r.status == 200, r
    assert [int(l[4:]) for l in r.body.splitlines() if l.startswith("id: ")] == ids[3:], r.body
    for junk in ("garbage", "-1", "3.0", "3a", "99999999999999999999", str(ids[-1] + 1)):
        r = ada.request("GET", logs, headers=dict(events, **{"Last-Event-ID": junk}))
        assert r.status == 400, (junk, r)
        assert r.error_codes() == ["invalid_header"] and "Last-Event-ID" in r.body, (junk, r)
    r = ada.request("GET", logs, headers=dict(events, **{"Last-Event-ID": str(ids[-1])}))
    assert r.status == 200 and "id: " not in r.body and "event: end" in r.body, r


def test_terminal_client(server, tmp_path):
    token = server.add_user("ada")
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "train.py").write_text("print('hello from the upload')\n")
    (tmp_path / "job" / "job.yaml").write_text(
        "name: uploaded\nframework: {name: pytorch}\n"
        "execution: {command: python3 train.py, compute_configuration: {name: cpu, nodes: 1}}\n")
    env = dict(os.environ, CADRE_SERVER=server.url, CADRE_TOKEN=token)

    def cadre(*args):
        return subprocess.run([CADRE, *args], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=300)
    submitted = cadre("submit", str(tmp_path / "job" / "job.yaml"))
    assert submitted.returncode == 0, submitted.stderr
    tid = submitted.stdout.strip().splitlines()[-1]
    followed = cadre("jobs", "logs", "-f", tid)
    assert followed.returncode == 0, followed.stderr
    assert "hello from the upload" in followed.stdout
    listed = cadre("jobs", "list")
    assert tid in listed.stdout and "uploaded" in listed.stdout
    server.client(token).wait_state(tid, FINAL)
    assert '"state": "completed"' in cadre("jobs", "get", tid).stdout
    assert cadre("jobs", "cancel", tid, "--hard-delete").returncode == 0
    missing = cadre("jobs", "get", tid)
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    no_token = subprocess.run([CADRE, "jobs", "list", "--server", server.url],
                              env={k: v for k, v in env.items() if k != "CADRE_TOKEN"},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=60)
    assert no_token.returncode == 2 and "CADRE_TOKEN" in no_token.stderr


def test_the_client_follows_a_job_across_a_server_restart(server):
    # `cadre jobs logs -f` ended with "cannot reach the server" when the server restarted,
    # though the job ran on; it now takes the log up again after the last whole line.
    token = server.add_user("ada")
    ada = server.client(token)
    tid = ada.submit_json(wml_body(PRINT_AND_HOLD)).json()["metadata"]["id"]
    env = dict(os.environ, CADRE_SERVER=server.url, CADRE_TOKEN=token)
    follower = subprocess.Popen([CADRE, "jobs", "logs", "-f", tid], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for("line 5 in the job's log", lambda: "line 5" in ada.request(
            "GET", f"/ml/v4/trainings/{tid}/logs?version={VERSION}").body, timeout=120)
        time.sleep(0.5)  # for the follower to have it too
        server.kill(signal.SIGKILL)
        time.sleep(2)  # the follower finds nothing there meanwhile
        server.start(same_port=True)
        open(os.path.join(server.data_dir, "trainings", tid, "model", "release"), "w").close()
        out, err = follower.communicate(timeout=120)
    finally:
        follower.kill()
    assert follower.returncode == 0, err
    shown = [l.split("] ")[-1] for l in out.splitlines()]
    assert shown[:6] == [f"line {i}" for i in range(1, 6)] + ["finished"], out
    assert "trying again" in err, err


def open_follower(host, port, request):
    """The connection and its answer so far: the head, and the whole body unless 200."""
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(request)
    answer = b""
    while b"\r\n\r\n" not in answer:  # the head and body may come in separate segments
        chunk = s.recv(4096)
        if not chunk:
            break
        answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    length = re.search(rb"Content-Length: (\d+)", head)
    while not head.startswith(b"HTTP/1.1 200") and length and len(body) < int(length[1]):
        chunk = s.recv(4096)
        if not chunk:
            break
        body += chunk
    return s, (head + b"\r\n\r\n" + body).decode()


def follow_request(server, ada, tid):
    host, port = server.url[len("http://"):].split(":")
    request = (f"GET /ml/v4/trainings/{tid}/logs?version={VERSION}&follow=true HTTP/1.1\r\n"
               f"Host: {host}\r\nAuthorization: Bearer {ada.token}\r\n\r\n").encode()
    return host, port, request


def test_followers_are_capped_at_half_the_threads(make_server):
    # Each follower holds an HTTP thread: 64 of them (the default --threads) made the server
    # answer nobody, not even the dashboard's sign-in.
    server = make_server(extra=["--threads", "8"])
    ada = server.client(server.add_user("ada"))
    tid = ada.submit_json(wml_body("echo start; sleep 600")).json()["metadata"]["id"]
    ada.wait_state(tid, "running")
    host, port, request = follow_request(server, ada, tid)

    def follow():
        return open_follower(host, port, request)
    followers = [follow() for _ in range(4)]
    assert all(answer.startswith("HTTP/1.1 200") for _, answer in followers), followers
    s, answer = follow()
    s.close()
    assert answer.startswith("HTTP/1.1 503") and "too_many_followers" in answer, answer
    assert "Retry-After: 5\r\n" in answer, answer
    assert ada.api("GET", "").status == 200  # the others still answer
    followers.pop()[0].close()
    wait_for("a follower's place to be given back", lambda: follow()[1].startswith("HTTP/1.1 200"),
             timeout=30)
    for s, _ in followers:
        s.close()
    assert ada.api("DELETE", f"/{tid}").status == 204


def test_followers_and_large_uploads_leave_threads_to_the_rest(make_server):
    # Followers may hold half the threads, bodies a worker reads (over 64 KiB, chunked, after
    # 100 Continue) a quarter: with 4 threads, 2 followers and 1 slow upload leave one to
    # everyone else, and a second upload is refused at once (it took the last thread, and a
    # slow one held it until its deadline).
    server = make_server(extra=["--threads", "4", "--request-timeout", "3600"])
    ada = server.client(server.add_user("ada"))
    tid = ada.submit_json(wml_body("echo start; sleep 600")).json()["metadata"]["id"]
    ada.wait_state(tid, "running")
    host, port, request = follow_request(server, ada, tid)
    followers = [open_follower(host, port, request) for _ in range(2)]
    assert all(answer.startswith("HTTP/1.1 200") for _, answer in followers), followers
    upload = (b"POST /ml/v4/trainings?version=2020-09-01 HTTP/1.1\r\nHost: x\r\n"
              b"Content-Length: 1000000\r\nExpect: 100-continue\r\n\r\n")
    first = socket.create_connection((host, int(port)), timeout=60)
    first.sendall(upload)
    assert first.recv(64).startswith(b"HTTP/1.1 100 Continue")  # a worker reads it
    first.sendall(b"a" * 1000)
    second = socket.create_connection((host, int(port)), timeout=60)
    second.sendall(upload)
    answer = b""
    while b"server_busy" not in answer and (chunk := second.recv(4096)):
        answer += chunk
    second.close()
    assert answer.startswith(b"HTTP/1.1 503 Service Unavailable"), answer
    assert b"Retry-After: 5\r\n" in answer and b"large request bodies" in answer, answer
    # The fourth thread answers the rest.
    assert ada.api("GET", f"/{tid}").status == 200
    first.close()
    for s, _ in followers:
        s.close()
    assert ada.api("DELETE", f"/{tid}").status == 204
