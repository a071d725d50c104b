"""Starting `cadre serve` on a model folder for the tests, and talking to it over HTTP."""
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("CADRE_BUILD_DIR", os.path.join(ROOT, "build"))
CADRE = os.path.join(BUILD, "cadre")
CADRE_SERVE = os.path.join(BUILD, "cadre-serve")


class Server:
    """`cadre serve MODEL_DIR --port 0 ...` started with a port file; stop() ends it."""

    def __init__(self, model_dir, *args, env=None, start_timeout=120):
        self.port_file = os.path.join(os.path.dirname(os.path.abspath(model_dir)),
                                      "port-%d" % time.monotonic_ns())
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [CADRE, "serve", model_dir, "--port", "0", "--port-file", self.port_file, *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env)
        deadline = time.monotonic() + start_timeout
        while not os.path.exists(self.port_file):
            if self.proc.poll() is not None:
                raise RuntimeError("cadre serve exited %d:\n%s"
                                   % (self.proc.returncode, self.proc.stdout.read()))
            if time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError("cadre serve did not start within %d s" % start_timeout)
            time.sleep(0.05)
        with open(self.port_file) as f:
            self.port = int(f.read())
        self.url = "http://127.0.0.1:%d" % self.port
        self.output = ""

    def stop(self, timeout=60):
        """SIGTERM, then the exit code and everything the server printed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.output = self.proc.communicate(timeout=timeout)[0]
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.output = self.proc.communicate()[0]
            raise
        return self.proc.returncode

    def request(self, method, path, body=None, headers=None, raw=None, timeout=60):
        """(status, parsed JSON or text) of one request; errors are answers, not exceptions."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None
                                            else None)
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json",
                                              **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                status, text = resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode()
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def infer(self, name, tensors, **kwargs):
        """POST /v2/models/NAME/infer with {name: (datatype, shape, flat data)}."""
        body = {"inputs": [{"name": n, "datatype": d, "shape": list(s), "data": list(v)}
                           for n, (d, s, v) in tensors.items()]}
        return self.request("POST", "/v2/models/%s/infer" % name, body, **kwargs)

    def predict(self, name, fields, values, **kwargs):
        """POST /ml/v4/deployments/NAME/predictions with one input_data entry."""
        body = {"input_data": [{"fields": fields, "values": values}]}
        return self.request("POST", "/ml/v4/deployments/%s/predictions" % name, body, **kwargs)
