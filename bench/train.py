#!/usr/bin/env python3
"""cadre bench train: training throughput of cadre's Horovod mode next to torch DDP (gloo).

Runs, at 2 and 4 ranks on this machine, the Fashion-MNIST CNN for a fixed number of steps with
cadre.torch.DistributedOptimizer and with DistributedDataParallel (gloo), and prints samples/s
and the ratio; then allreduces a synthetic ResNet-50 gradient set (161 tensors, ~100 MB) per
step with cadre's fusion, without fusion (threshold 0), and with gloo one tensor at a time; and
the latency of a 4-byte allreduce through the Python API.

    PYTHONPATH=build/python:python /usr/bin/python3 bench/train.py [--sizes 2 4] [--steps 40]
"""
import argparse
import json
import os
import socket
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

from cadre.torch.testing import run_ranks  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(mode, size, steps, env=None):
    e = {"BENCH_PORT": str(free_port())}
    e.update(env or {})
    results = run_ranks([os.path.join(HERE, "train_worker.py"), mode, "--steps", str(steps)],
                        size, env=e, timeout=600)
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
    args = ap.parse_args()
    from cadre import _core
    backend = "comm" if _core.COMM_BUILT else "store (comm layer not built: numbers are not "\
                                              "representative)"
    print("cadre engine backend: %s; %d CPUs" % (backend, os.cpu_count()))
    print()
    print("Fashion-MNIST CNN, batch 64 per rank, %d steps" % args.steps)
    print("%-6s %16s %16s %8s" % ("ranks", "cadre samples/s", "DDP samples/s", "ratio"))
    for n in args.sizes:
        c = run("cadre", n, args.steps)["samples_per_s"]
        d = run("ddp", n, args.steps)["samples_per_s"]
        print("%-6d %16.0f %16.0f %7.2fx" % (n, c, d, c / d), flush=True)
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
    lat = run("latency", 2, 200)["median_us"]
    print("4-byte allreduce through cadre.torch at 2 ranks: median %.0f us" % lat)


if __name__ == "__main__":
    main()
