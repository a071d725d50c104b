#!/usr/bin/env python3
"""cadre bench train: training throughput of cadre's Horovod mode next to torch DDP (gloo).

Runs, at 2 and 4 ranks on this machine, the Fashion-MNIST CNN for a fixed number of steps with
cadre.torch.DistributedOptimizer and with DistributedDataParallel (gloo), and prints samples/s
and the ratio, next to the same steps with no communication at all (the ceiling any
distributed optimizer could reach here, and its ratio to DDP); then allreduces a synthetic ResNet-50 gradient set (161 tensors, ~100 MB) per
step with cadre's fusion, without fusion (threshold 0), and with gloo one tensor at a time; and
the latency of a 4-byte allreduce through the Python API next to the raw C++ collective
(`cadre bench allreduce`), on one host (shared memory) and across two learners (TCP).

Every throughput figure is the median of --repeats runs, the contenders interleaved (cadre, DDP,
cadre, DDP, ...) so that a burst of load on a shared machine does not favour one of them.

    PYTHONPATH=build/python:python /usr/bin/python3 bench/train.py [--sizes 2 4] [--steps 40]
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

from cadre.torch.testing import run_ranks  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(mode, size, steps, env=None, hosts=1):
    e = {"BENCH_PORT": str(free_port())}
    e.update(env or {})
    results = run_ranks([os.path.join(HERE, "train_worker.py"), mode, "--steps", str(steps)],
                        size, env=e, timeout=600, hosts=hosts)
    for r in results:
        if r.returncode != 0:
            raise SystemExit("%s at %d ranks: rank %d failed:\n%s" % (mode, size, r.rank,
                                                                      r.stderr[-3000:]))
    for line in results[0].stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise SystemExit("%s at %d ranks printed no result" % (mode, size))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--grad-steps", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3,
                    help="runs per contender and size (median reported)")
    args = ap.parse_args()
    from cadre import _core
    backend = "comm" if _core.COMM_BUILT else "store (comm layer not built: numbers are not "\
                                              "representative)"
    print("cadre engine backend: %s; %d CPUs" % (backend, os.cpu_count()))
    print()
    print("Fashion-MNIST CNN, batch 64 per rank, %d steps" % args.steps)
    print("%-6s %16s %16s %8s %18s" % ("ranks", "cadre samples/s", "DDP samples/s", "ratio",
                                       "no comm. (ceiling)"))
    for n in args.sizes:
        cs, ds, ls = [], [], []
        for _ in range(args.repeats):
            cs.append(run("cadre", n, args.steps)["samples_per_s"])
            ds.append(run("ddp", n, args.steps)["samples_per_s"])
            ls.append(run("local", n, args.steps)["samples_per_s"])
        c, d, lo = statistics.median(cs), statistics.median(ds), statistics.median(ls)
        print("%-6d %16.0f %16.0f %7.2fx %11.0f (%.2fx)   (runs: cadre %s; DDP %s; no comm. %s)"
              % (n, c, d, c / d, lo, lo / d, " ".join("%.0f" % x for x in cs),
                 " ".join("%.0f" % x for x in ds), " ".join("%.0f" % x for x in ls)),
              flush=True)
    print()
    if not _core.COMM_BUILT:
        print("(skipping the ResNet-50 gradient set: the store backend moves every byte "
              "through the rendezvous store)")
        return
    print("Synthetic ResNet-50 gradients (161 tensors, ~100 MB fp32), allreduce per step")
    print("%-6s %14s %14s %14s" % ("ranks", "cadre fused", "cadre unfused", "gloo per-tensor"))
    for n in args.sizes[:1]:
        fused = run("grads", n, args.grad_steps)["ms_per_step"]
        unfused = run("grads", n, args.grad_steps, {"HOROVOD_FUSION_THRESHOLD": "0"})["ms_per_step"]
        gloo = run("gloo", n, args.grad_steps)["ms_per_step"]
        print("%-6d %11.0f ms %11.0f ms %12.0f ms" % (n, fused, unfused, gloo), flush=True)
    print()
    print("4-byte allreduce at 2 ranks, median us: through cadre.torch vs the raw C++ "
          "collective (cadre bench allreduce)")
    print("%-30s %12s %12s %8s" % ("placement", "cadre.torch", "raw C++", "ratio"))
    for label, hosts, transport in (("1 learner x 2 slots (shm)", 1, "shm"),
                                    ("2 learners x 1 slot (TCP)", 2, "tcp")):
        lat = run("latency", 2, 2000, hosts=hosts)["median_us"]
        raw = raw_latency_us(transport)
        print("%-30s %12.1f %12.1f %7.2fx" % (label, lat, raw, lat / raw), flush=True)


def raw_latency_us(transport):
    """The 4-byte float32 allreduce of `cadre bench allreduce` (2 ranks), in microseconds."""
    build = os.environ.get("CADRE_BUILD_DIR", os.path.join(os.path.dirname(HERE), "build"))
    out = subprocess.run([os.path.join(build, "cadre"), "bench", "allreduce", "-n", "2",
                          "--sizes", "4", "--transport", transport, "--json"],
                         check=True, capture_output=True, text=True, timeout=300).stdout
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{"):
            row = json.loads(line)
            if row.get("bytes") == 4:
                return row["time_us"]
    raise SystemExit("cadre bench allreduce printed no 4-byte result:\n" + out)


if __name__ == "__main__":
    main()
