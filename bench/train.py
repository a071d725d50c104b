#!/usr/bin/env python3
"""cadre bench train: training throughput of cadre's Horovod mode next to torch DDP (gloo).

Trains a CNN (--model: the Fashion-MNIST example's, or `heavy`, a communication-heavy one of
~10.7M parameters) at each of --sizes ranks on this machine for a fixed number of steps with
cadre.torch.DistributedOptimizer and with DistributedDataParallel (gloo), and the same steps in
one process alone with no communication: perfect scaling at n ranks is n times that. n processes
training alone at the same time ("n alone at once") show what the machine itself leaves for n
ranks, before any communication: they share its memory bus, caches and cores. Then (for
the mnist model) allreduces a synthetic ResNet-50 gradient set (161 tensors, ~100 MB) per step
with cadre's fusion, without fusion (threshold 0), and with gloo (all tensors submitted at
once); and the latency of a 4-byte allreduce through the Python API next to the raw C++
collective (`cadre bench allreduce`), both by the same rule (slowest rank's mean of back-to-back
calls), on one host (shared memory) and across two learners (TCP).

Every contender runs under the same CPU pinning (one equal share per rank). Throughput figures
are medians of --repeats rounds, the contenders interleaved within each round (cadre, DDP,
alone, at once, cadre, ...) so that a burst of load on a shared machine does not favour one;
each is printed with its spread ((max - min) / median) and every round's value, then where rank
0's CPU went per step, by thread (the training thread, cadre's engine thread, gloo's threads):
figures that a busy machine's wall-clock noise does not hide.

    PYTHONPATH=build/python:python /usr/bin/python3 bench/train.py [--sizes 2 4] [--steps 40]
    PYTHONPATH=build/python:python /usr/bin/python3 bench/train.py --model heavy \
        --batch-size 16 --momentum 0.9 --steps 60 [--fp16]

--batch-wait auto 1 0 runs cadre once per CADRE_BATCH_WAIT_MS value in every round (the engine's
batching window: measured, or fixed in milliseconds), each its own row; rank 0's choice under
`auto` is printed from its log. The measured window is tried over the first ~40 steps: --warmup
sets how many steps run before the timed ones.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.environ.get("CADRE_BUILD_DIR", os.path.join(ROOT, "build"))
# The extension cadre._core is built into BUILD/python; the rest of the package is in python/.
sys.path[:0] = [os.path.join(BUILD, "python"), os.path.join(ROOT, "python")]

try:
    from cadre.torch.testing import run_ranks  # noqa: E402
except ImportError as e:
    sys.exit(f"bench/train.py: cannot import cadre ({e}); build it first (`make build`) or set "
             "CADRE_BUILD_DIR to its build folder, and run with /usr/bin/python3 (Debian's torch)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(mode, size, steps, env=None, hosts=1, extra=()):
    e = {"BENCH_PORT": str(free_port())}
    e.update(env or {})
    results = run_ranks([os.path.join(HERE, "train_worker.py"), mode, "--steps", str(steps)]
                        + list(extra), size, env=e, timeout=600, hosts=hosts)
    for r in results:
        if r.returncode != 0:
            raise SystemExit("%s at %d ranks: rank %d failed:\n%s" % (mode, size, r.rank,
                                                                      r.stderr[-3000:]))
    for line in results[0].stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
            # Rank 0's one line on the measured batching window (CADRE_LOG_LEVEL=info).
            for err in results[0].stderr.splitlines():
                if "batch window" in err and "chosen from" in err:
                    result["batch_window"] = err[err.index("batch window"):]
            return result
    raise SystemExit("%s at %d ranks printed no result" % (mode, size))


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=positive, nargs="+", default=[2, 4],
                    help="ranks to train with, one row each (default 2 4)")
    ap.add_argument("--steps", type=positive, default=40,
                    help="timed steps per contender and round (default 40; 60 or more steadies "
                         "the rounds)")
    ap.add_argument("--grad-steps", type=positive, default=5,
                    help="mnist model only: steps of the ResNet-50 gradient allreduce (default 5)")
    ap.add_argument("--repeats", type=positive, default=3,
                    help="interleaved rounds per size (medians reported)")
    ap.add_argument("--model", choices=["mnist", "heavy"], default="mnist")
    ap.add_argument("--batch-size", type=positive, default=64, help="per rank")
    ap.add_argument("--momentum", type=float, default=0.0, help="SGD momentum (default 0)")
    ap.add_argument("--fp16", action="store_true", help="fp16 gradient compression, both sides")
    ap.add_argument("--warmup", type=non_negative, default=5, help="untimed steps before the timed ones")
    ap.add_argument("--batch-wait", nargs="+", metavar="MS",
                    help="run cadre once per CADRE_BATCH_WAIT_MS value (auto, or milliseconds) "
                         "in each round; default: the environment's setting")
    ap.add_argument("--cadre-only", action="store_true",
                    help="skip DDP and one process alone (comparing cadre settings only)")
    args = ap.parse_args()
    from cadre import _core
    backend = "comm" if _core.COMM_BUILT else "store (comm layer not built: numbers are not "\
                                              "representative)"
    print("cadre engine backend: %s; %d CPUs" % (backend, os.cpu_count()))
    print()
    extra = ["--model", args.model, "--batch-size", str(args.batch_size),
             "--momentum", str(args.momentum), "--warmup", str(args.warmup)]
    extra += ["--fp16"] if args.fp16 else []
    print("%s CNN, batch %d per rank, momentum %g%s, %d timed steps after %d untimed, "
          "%d interleaved rounds" % (args.model, args.batch_size, args.momentum,
                                     ", fp16 compression" if args.fp16 else "", args.steps,
                                     args.warmup, args.repeats))
    # One cadre contender per batching window asked for (None: the environment's setting).
    waits = args.batch_wait or [None]
    label = {w: "cadre" if w is None else "cadre, wait %s" % w for w in waits}
    print("%-6s %18s %18s %20s %20s %7s %11s %9s" % (
        "ranks", "cadre samples/s", "DDP samples/s", "perfect (n x alone)", "n alone at once",
        "vs DDP", "of perfect", "of once"))
    for n in args.sizes:
        cs = {w: [] for w in waits}
        ds, alone, at_once = [], [], []
        cpu, runq = {}, {}
        chosen = []
        for _ in range(args.repeats):
            for w in waits:
                env = {} if w is None else {"CADRE_BATCH_WAIT_MS": w, "CADRE_LOG_LEVEL": "info"}
                result = run("cadre", n, args.steps, env=env, extra=extra)
                cs[w].append(result["samples_per_s"])
                cpu.setdefault(label[w], []).append(result.get("cpu_ms_per_step", {}))
                runq.setdefault(label[w], []).append(runq_ms(result))
                if "batch_window" in result:
                    chosen.append(result["batch_window"])
            # n processes training alone at the same time: what the machine gives n ranks with
            # no communication at all (they share its memory bus and caches, and its cores).
            for name, mode, size, out in () if args.cadre_only else (
                    ("DDP", "ddp", n, ds), ("alone", "local", 1, alone),
                    ("at once", "local", n, at_once)):
                result = run(mode, size, args.steps, extra=extra)
                out.append(result["samples_per_s"])
                cpu.setdefault(name, []).append(result.get("cpu_ms_per_step", {}))
                runq.setdefault(name, []).append(runq_ms(result))
        for w in waits:
            c = statistics.median(cs[w])
            name = "" if w is None else " (CADRE_BATCH_WAIT_MS=%s)" % w
            if args.cadre_only:
                print("%-6d %18s %18s %20s %20s %7s %11s %9s   (rounds: cadre%s %s)"
                      % (n, spread(cs[w]), "-", "-", "-", "-", "-", "-", name, rounds(cs[w])),
                      flush=True)
                continue
            d, p, o = statistics.median(ds), statistics.median(alone), statistics.median(at_once)
            print("%-6d %18s %18s %20s %20s %6.2fx %10.0f%% %8.0f%%   (rounds: cadre%s %s; "
                  "DDP %s; alone %s; at once %s)"
                  % (n, spread(cs[w]), spread(ds), spread([n * x for x in alone]),
                     spread(at_once), c / d, 100 * c / (n * p), 100 * c / o, name,
                     rounds(cs[w]), rounds(ds), rounds(alone), rounds(at_once)), flush=True)
        names = [label[w] for w in waits] + ([] if args.cadre_only else
                                             ["DDP", "alone", "at once"])
        print("       CPU ms per step of rank 0's threads, medians of the rounds: %s"
              % "; ".join("%s %s" % (name, cpu_medians(cpu[name])) for name in names),
              flush=True)
        print("       ms per step they waited in the run queue (runnable, another task on the "
              "CPU): %s" % "; ".join("%s %s" % (name, cpu_medians(runq[name])) for name in names),
              flush=True)
        for line in chosen:
            print("       rank 0: %s" % line, flush=True)
    if args.model != "mnist":
        return
    print()
    if not _core.COMM_BUILT:
        print("(skipping the ResNet-50 gradient set: the store backend moves every byte "
              "through the rendezvous store)")
        return
    print("Synthetic ResNet-50 gradients (161 tensors, ~100 MB fp32), allreduce per step")
    print("%-6s %14s %14s %14s" % ("ranks", "cadre fused", "cadre unfused", "gloo async"))
    for n in args.sizes[:1]:
        fused = run("grads", n, args.grad_steps)["ms_per_step"]
        unfused = run("grads", n, args.grad_steps, {"HOROVOD_FUSION_THRESHOLD": "0"})["ms_per_step"]
        gloo = run("gloo", n, args.grad_steps)["ms_per_step"]
        print("%-6d %11.0f ms %11.0f ms %12.0f ms" % (n, fused, unfused, gloo), flush=True)
    print()
    print("4-byte allreduce at 2 ranks, us (slowest rank's mean of back-to-back calls): "
          "through cadre.torch vs the raw C++ collective (cadre bench allreduce)")
    print("%-30s %12s %12s %8s" % ("placement", "cadre.torch", "raw C++", "ratio"))
    for label, hosts, transport in (("1 learner x 2 slots (shm)", 1, "shm"),
                                    ("2 learners x 1 slot (TCP)", 2, "tcp")):
        lat = run("latency", 2, 2000, hosts=hosts)["mean_us"]
        raw = raw_latency_us(transport)
        print("%-30s %12.1f %12.1f %7.2fx" % (label, lat, raw, lat / raw), flush=True)


def runq_ms(result):
    """Rank 0's ms per step in the run queue by thread: time the thread could have run but another
    task held the CPU (train_worker.py's thread_stats; empty when the kernel does not say)."""
    return result.get("per_step", {}).get("runq_ms", {})


def cpu_medians(per_round):
    """'main 270, cadre-engine 7.2': each thread name's median CPU ms per step over the rounds
    (the training thread is 'main'; cadre's engine thread is 'cadre-engine', gloo's are
    'python3')."""
    names = sorted({k for r in per_round for k in r}, key=lambda k: (k != "main", k))
    return ", ".join("%s %.1f" % (k, statistics.median([r.get(k, 0.0) for r in per_round]))
                     for k in names)


def spread(xs):
    """'median (+-spread%)': spread is (max - min) / median."""
    m = statistics.median(xs)
    return "%.0f (%.0f%%)" % (m, 100 * (max(xs) - min(xs)) / m)


def rounds(xs):
    return " ".join("%.0f" % x for x in xs)


def raw_latency_us(transport):
    """The 4-byte float32 allreduce of `cadre bench allreduce` (2 ranks), in microseconds."""
    out = subprocess.run([os.path.join(BUILD, "cadre"), "bench", "allreduce", "-n", "2",
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
