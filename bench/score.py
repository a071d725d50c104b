#!/usr/bin/env python3
"""The scoring benchmark of issue 15: the Fashion-MNIST CNN, one image per request, over HTTP on
loopback, side by side in one run:

- cadre-serve with dynamic batching (max batch 32, delay 0) and without (max batch 1);
- the server a user would write without cadre (bench/score_python_server.py: eager torch behind
  Python's stock HTTP server, one request at a time);
- the bare limit: libtorch's own forward at batch sizes 1, 16 and 32 (no HTTP, no JSON);
- one loopback HTTP round trip of the same request and answer sizes, no model.

Clients are C++ (build/bench/score_load), one keep-alive connection per concurrent client, so
that the client side costs little of the 2 cores. Prints a table and the issue's four ratios.

    PYTHONPATH=build/python:python /usr/bin/python3 bench/score.py [--requests 2000]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.environ.get("CADRE_BUILD_DIR", os.path.join(ROOT, "build"))
# The extension cadre._core is built into BUILD/python; the rest of the package is in python/.
sys.path[:0] = [os.path.join(BUILD, "python"), os.path.join(ROOT, "python")]
sys.path.insert(0, os.path.join(ROOT, "examples", "fashion_mnist"))

import torch  # noqa: E402

import cadre  # noqa: E402
from train_horovod import Net  # noqa: E402


def wait_port(proc, port_file, timeout=120):
    deadline = time.monotonic() + timeout
    while not os.path.exists(port_file):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            sys.exit("bench/score.py: a server did not start: %s" % proc.communicate()[0])
        time.sleep(0.05)
    with open(port_file) as f:
        return int(f.read())


def load(tool, *args):
    out = subprocess.run([tool, *map(str, args)], check=True, stdout=subprocess.PIPE,
                         text=True, timeout=1800).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=BUILD)
    parser.add_argument("--requests", type=int, default=2000, help="per measurement")
    args = parser.parse_args()
    tool = os.path.join(args.build, "bench", "score_load")
    serve = os.path.join(args.build, "cadre-serve")
    work = tempfile.mkdtemp(prefix="cadre-bench-score-")
    torch.manual_seed(0)
    model = Net().eval()
    model_dir = cadre.save_model(model, torch.zeros(1, 1, 28, 28), path=os.path.join(work, "fmnist"))
    torch.save(model.state_dict(), os.path.join(work, "state.pt"))
    image = torch.randn(1, 1, 28, 28)
    body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 1, 28, 28],
                                   "data": image.flatten().tolist()}]})
    body_file = os.path.join(work, "body.json")
    with open(body_file, "w") as f:
        f.write(body)
    path = "/v2/models/fmnist/infer"
    rows = []

    def http_rows(name, port, concurrencies):
        for c in concurrencies:
            r = load(tool, "http", "127.0.0.1", port, path, body_file, c, args.requests)
            rows.append((name, c, r))

    servers = [("cadre-serve batched", ["--max-batch-size", "32"]),
               ("cadre-serve unbatched", ["--max-batch-size", "1"])]
    for name, flags in servers:
        port_file = os.path.join(work, name.replace(" ", "-") + ".port")
        proc = subprocess.Popen([serve, model_dir, "--port", "0", "--port-file", port_file,
                                 *flags], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        port = wait_port(proc, port_file)
        http_rows(name, port, [1, 16, 32])
        proc.terminate()
        proc.communicate(timeout=60)
    port_file = os.path.join(work, "python.port")
    # The example's model module imports cadre: give the server the paths this script found.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.join(args.build, "python"), os.path.join(ROOT, "python")]
        + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "score_python_server.py"),
                             os.path.join(work, "state.pt"), port_file],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    http_rows("python http.server + eager torch", wait_port(proc, port_file), [1, 16])
    proc.terminate()
    proc.communicate(timeout=60)

    answer_bytes = len(json.dumps({"model_name": "fmnist", "model_version": "1", "outputs": [{
        "name": "output", "datatype": "FP32", "shape": [1, 10], "data": [-2.302585] * 10}]}))
    echo = load(tool, "echo", body_file, answer_bytes, args.requests)
    bare = {b: load(tool, "bare", model_dir, b, max(20, args.requests // b)) for b in (1, 16, 32)}

    print("%-34s %5s %10s %9s %9s %7s" % ("server", "conc", "req/s", "p50 ms", "p99 ms", "errors"))
    for name, c, r in rows:
        print("%-34s %5d %10.1f %9.3f %9.3f %7d" % (name, c, r["per_second"], r["p50_ms"],
                                                   r["p99_ms"], r["errors"]))
    print("%-34s %5d %10.1f %9.3f %9.3f" % ("loopback round trip, no model", 1,
                                            echo["per_second"], echo["p50_ms"], echo["p99_ms"]))
    for b, r in bare.items():
        print("%-34s %5s %10.1f %9.3f %9s" % ("libtorch forward, batch %d (rows/s)" % b, "-",
                                              r["per_second"], r["p50_ms"], "-"))

    def rps(name, c):
        return next(r["per_second"] for n, cc, r in rows if n == name and cc == c)

    batched16 = rps("cadre-serve batched", 16)
    print()
    print("targets (issue 15):")
    print("  batched vs python server at 16:    %.2fx (target >= 3x)"
          % (batched16 / rps("python http.server + eager torch", 16)))
    print("  batched vs unbatched at 16:        %.2fx (target >= 2x)"
          % (batched16 / rps("cadre-serve unbatched", 16)))
    print("  batched at 32 vs bare forward b32: %.0f%% (target >= 70%%)"
          % (100 * rps("cadre-serve batched", 32) / bare[32]["per_second"]))
    p50 = next(r["p50_ms"] for n, c, r in rows if n == "cadre-serve batched" and c == 1)
    print("  p50 at 1 vs bare b1 + round trip:  %.2fx (target <= 1.5x)"
          % (p50 / (bare[1]["p50_ms"] + echo["p50_ms"])))


if __name__ == "__main__":
    main()
