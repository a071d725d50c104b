"""`cadre jobs` as a client of any WML-shaped server: it follows every page of the list and
never lets an id reach another route. The server here is a small stand-in that records what it
was asked, so that the requests themselves can be checked."""
import json
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from service_helpers import CADRE

TRAININGS = 450


class Recorder(BaseHTTPRequestHandler):
    paths = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        url = urlsplit(self.path)
        if url.path == "/v2/health/live":  # the client asks first whether a server listens
            self.answer(200, {"live": True})
            return
        Recorder.paths.append(self.path)
        if url.path != "/ml/v4/trainings":
            self.answer(404, {"errors": [{"code": "not_found", "message": "no such training"}]})
            return
        query = parse_qs(url.query)
        limit = int(query["limit"][0])
        start = int(query.get("start", ["0"])[0])
        resources = [{"metadata": {"id": f"t{i:04d}", "name": f"job {i}",
                                   "created_at": "2026-12-03T00:00:00Z"},
                      "entity": {"status": {"state": "completed"}}}
                     for i in range(start, min(start + limit, TRAININGS))]
        body = {"total_count": TRAININGS, "limit": limit, "resources": resources}
        if start + limit < TRAININGS:
            body["next"] = {"href": f"/ml/v4/trainings?version=2020-09-01&limit={limit}"
                                    f"&start={start + limit}"}
        self.answer(200, body)

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def run_against_stand_in(*args):
    Recorder.paths = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        env = dict(os.environ, CADRE_SERVER=f"http://127.0.0.1:{httpd.server_address[1]}",
                   CADRE_TOKEN="cadre_x_y")
        return subprocess.run([CADRE, *args], env=env, capture_output=True, text=True,
                              timeout=60)
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_jobs_list_follows_every_page():
    out = run_against_stand_in("jobs", "list")
    assert out.returncode == 0, out.stderr
    rows = out.stdout.splitlines()[1:]
    assert [r.split()[0] for r in rows] == [f"t{i:04d}" for i in range(TRAININGS)]
    assert len(Recorder.paths) == 3, Recorder.paths


def test_an_id_that_is_not_one_path_segment_is_not_sent():
    out = run_against_stand_in("jobs", "get", "../trainings?limit=1")
    assert out.returncode == 2
    assert Recorder.paths == []
    assert "'../trainings?limit=1' is not a training id" in out.stderr
