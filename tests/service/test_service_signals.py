"""Stopping `cadre server` with Ctrl-C (SIGINT), as docs/service.md promises: the first signal
stops it gracefully (requests in flight are finished, running jobs keep running); a second one
exits at once with 128 + the signal, and running jobs keep running then too. Either way a server
started again on the same data directory finds the jobs."""
import os
import signal
import socket

from service_helpers import FINAL, wait_for, wml_body
from test_service_trainings import HOLD, release, wait_started


def start_job(server):
    ada_token = server.add_user("ada")
    ada = server.client(ada_token)
    r = ada.submit_json(wml_body(HOLD))
    assert r.status == 201, r
    tid = r.json()["metadata"]["id"]
    wait_started(server, tid)
    runner = int(open(os.path.join(server.data_dir, "trainings", tid, "runner.pid")).read())
    return ada_token, tid, runner


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def said(server, words):
    return any(words in line for line in server.output)


def check_found_again(make_server, server, token, tid):
    again = make_server(data_dir=server.data_dir)
    ada = again.client(token)
    assert ada.state(tid) == "running"
    release(again, tid)
    assert ada.wait_state(tid, FINAL)["state"] == "completed"


def test_one_ctrl_c_stops_the_server_and_leaves_jobs_running(make_server):
    server = make_server()
    token, tid, runner = start_job(server)
    server.proc.send_signal(signal.SIGINT)
    assert server.proc.wait(timeout=60) == 0, "".join(server.output)
    wait_for("the server to say it stopped", lambda: said(server, "Interrupt; stopping"))
    assert alive(runner)
    check_found_again(make_server, server, token, tid)


def test_a_second_ctrl_c_exits_at_once_without_waiting_for_requests(make_server):
    server = make_server()
    token, tid, runner = start_job(server)
    # A request in flight that the first Ctrl-C waits for: its body comes slowly (here: not at
    # all; the server would wait out its read timeout for it). Its head is read once the server
    # has answered 100 Continue.
    port = int(server.url.rsplit(":", 1)[1])
    slow = socket.create_connection(("127.0.0.1", port))
    slow.settimeout(60)
    try:
        slow.sendall(b"POST /ml/v4/trainings?version=2020-09-01 HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 1000\r\n"
                     b"Expect: 100-continue\r\n\r\n")
        assert slow.recv(4096).startswith(b"HTTP/1.1 100 Continue")
        slow.sendall(b'{"na')
        server.proc.send_signal(signal.SIGINT)
        wait_for("the server to say it is stopping",
                 lambda: said(server, "Interrupt; stopping"), timeout=60)
        assert server.proc.poll() is None, "".join(server.output)
        server.proc.send_signal(signal.SIGINT)
        assert server.proc.wait(timeout=60) == 128 + signal.SIGINT, "".join(server.output)
        # (Its output is read by another thread: the last line may come after the exit.)
        wait_for("the server to say it exits now",
                 lambda: said(server, "Interrupt again; exiting now"))
        # The client in flight is not left hanging: its connection ends with the server.
        assert slow.recv(4096) == b""
    finally:
        slow.close()
    assert alive(runner)
    check_found_again(make_server, server, token, tid)
