"""Helpers for the end-to-end tests of `cadre server`: a real server process on loopback, real
users made with `cadre users add`, and a small HTTP client. Every wait is bounded."""
import io
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
import zipfile

BUILD = os.environ.get("CADRE_BUILD_DIR",
                       os.path.join(os.path.dirname(__file__), "..", "..", "build"))
CADRE = os.path.abspath(os.path.join(BUILD, "cadre"))
VERSION = "2020-09-01"
FINAL = ("completed", "failed", "canceled")


def wait_for(what, predicate, timeout=60, interval=0.1):
    """Polls predicate() until it returns something truthy; fails naming `what` after timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


class Response:
    def __init__(self, status, body, headers):
        self.status = status
        self.body = body
        self.headers = headers

    def json(self):
        return json.loads(self.body)

    def error_codes(self):
        return [e["code"] for e in self.json()["errors"]]

    def error_targets(self):
        return [e.get("target", {}).get("name") for e in self.json()["errors"]]

    def __repr__(self):
        return f"Response({self.status}, {self.body[:500]!r})"


class Client:
    """HTTP against the server with an optional bearer token."""

    def __init__(self, url, token=None):
        self.url = url
        self.token = token

    def request(self, method, path, body=None, content_type=None, headers=None, timeout=60):
        hdrs = dict(headers or {})
        if self.token is not None:
            hdrs["Authorization"] = f"Bearer {self.token}"
        if content_type:
            hdrs["Content-Type"] = content_type
        data = body.encode() if isinstance(body, str) else body
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return Response(r.status, r.read().decode(), dict(r.headers))
        except urllib.error.HTTPError as e:
            return Response(e.code, e.read().decode(), dict(e.headers))

    def api(self, method, path, **kw):
        sep = "&" if "?" in path else "?"
        return self.request(method, f"/ml/v4/trainings{path}{sep}version={VERSION}", **kw)

    def submit_json(self, body):
        return self.api("POST", "", body=json.dumps(body), content_type="application/json")

    def submit_manifest(self, manifest, code=None):
        parts = [("manifest", "manifest.yaml", "application/x-yaml", manifest.encode())]
        if code is not None:
            parts.append(("model_definition", "code.zip", "application/zip", code))
        body, ctype = multipart(parts)
        return self.api("POST", "", body=body, content_type=ctype)

    def get(self, training_id):
        return self.api("GET", f"/{training_id}")

    def state(self, training_id):
        r = self.get(training_id)
        assert r.status == 200, r
        return r.json()["entity"]["status"]["state"]

    def wait_state(self, training_id, states, timeout=120):
        states = (states,) if isinstance(states, str) else tuple(states)

        def check():
            s = self.get(training_id).json()["entity"]["status"]
            return s if s["state"] in states else None
        return wait_for(f"training {training_id} to be {'/'.join(states)}", check, timeout)


def multipart(parts):
    boundary = "cadre-" + uuid.uuid4().hex
    out = io.BytesIO()
    for name, filename, ctype, data in parts:
        out.write(f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; "
                  f"filename=\"{filename}\"\r\nContent-Type: {ctype}\r\n\r\n".encode())
        out.write(data)
        out.write(b"\r\n")
    out.write(f"--{boundary}--\r\n".encode())
    return out.getvalue(), f"multipart/form-data; boundary={boundary}"


def make_zip(files):
    """files: {name: bytes or str}. Returns the zip's bytes."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return out.getvalue()


def wml_body(command, nodes=1, framework="pytorch", compute="cpu", name="test-job"):
    return {"name": name,
            "model_definition": {"command": command},
            "hardware_spec": {"name": compute, "nodes": nodes},
            "software_spec": {"name": framework}}


def pids_of_processes_mentioning(text):
    """Processes whose command line or environment mention `text` (a job or data directory)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "Z":
            continue
        environ = b""
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            pass
        if text.encode() in cmdline or text.encode() in environ:
            found.append(int(pid))
    return found


def kill_processes_mentioning(text, what):
    """SIGKILLs every process mentioning `text` (a data directory) and waits for them to end."""
    for pid in pids_of_processes_mentioning(text):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait_for(f"{what} to end", lambda: not pids_of_processes_mentioning(text), timeout=60)


class Server:
    """A `cadre server` process on a free loopback port with its own data directory."""

    def __init__(self, data_dir, slots=2, grace=2, extra=(), env=None, preexec_fn=None):
        self.preexec_fn = preexec_fn  # run in the server's process before it starts
        self.data_dir = str(data_dir)
        self.slots = slots  # None: no --slots (the server's own default)
        self.grace = grace
        self.extra = list(extra)
        self.env = env  # None: the test's own
        self.proc = None
        self.url = None
        self.output = []

    def start(self, timeout=60, same_port=False):
        """same_port: listen where the last start did (a restart seen by the same clients)."""
        self.output = []
        listen = self.url[len("http://"):] if same_port else "127.0.0.1:0"
        self.proc = subprocess.Popen(
            [CADRE, "server", "--data-dir", self.data_dir, "--listen", listen,
             *([] if self.slots is None else ["--slots", str(self.slots)]),
             "--grace", str(self.grace), *self.extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env,
            preexec_fn=self.preexec_fn)
        found = threading.Event()

        def read():
            for line in self.proc.stdout:
                self.output.append(line)
                m = re.search(r"listening on (http://\S+)", line)
                if m:
                    self.url = m.group(1)
                    found.set()
        threading.Thread(target=read, daemon=True).start()
        if not found.wait(timeout):
            self.kill()
            raise AssertionError(f"cadre server did not start: {''.join(self.output)}")
        return self

    def kill(self, sig=signal.SIGKILL):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)

    def add_user(self, name, plan="standard"):
        out = subprocess.run([CADRE, "users", "add", name, "--plan", plan, "--data-dir",
                              self.data_dir], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip().splitlines()[-1]

    def client(self, token=None):
        return Client(self.url, token)

    def cleanup(self):
        """Stops the server and anything its jobs left running (a test that failed midway)."""
        self.kill()
        kill_processes_mentioning(self.data_dir, "the jobs' processes")
