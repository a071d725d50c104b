#!/usr/bin/env python3
"""Training throughput of two builds of cadre side by side, interleaved, with DDP and one process
alone in every round: the before/after check for a change to the core.

    PYTHONPATH=build/python:python /usr/bin/python3 bench/train_ab.py \\
        --before /path/to/old/build --after build [--ranks 2] [--steps 25] [--rounds 3] [--fp16]

Both builds run bench/train_worker.py of this checkout (the heavy CNN of bench/train.py, batch 16,
momentum 0.9), each with the Python layer (python/) of the checkout it was built from; each prints its median samples/s with every round's value and rank 0's engine CPU
per step.
"""
import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import train  # noqa: E402


def python_source(build):
    """The python/ folder of the checkout `build` was configured from (its CMakeCache.txt), so
    that each build runs its own Python layer; this checkout's when that cannot be read."""
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("CMAKE_HOME_DIRECTORY:"):
                    return os.path.join(line.split("=", 1)[1].strip(), "python")
    except OSError:
        pass
    return os.path.join(os.path.dirname(HERE), "python")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="build directory of the old cadre")
    ap.add_argument("--after", required=True, help="build directory of the new cadre")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fp16", action="store_true")
    args = ap.parse_args()
    extra = ["--model", "heavy", "--batch-size", "16", "--momentum", "0.9"]
    extra += ["--fp16"] if args.fp16 else []
    builds = {"before": os.path.abspath(args.before), "after": os.path.abspath(args.after)}
    for name, build in builds.items():
        if not os.path.isdir(os.path.join(build, "python")):
            raise SystemExit("%s: %s has no python/ (not a cadre build directory)" % (name, build))
    results = {}
    for r in range(args.rounds):
        for name, build in builds.items():
            env = {"PYTHONPATH": os.path.join(build, "python") + ":" + python_source(build),
                   "CADRE_BUILD_DIR": build}
            results.setdefault(name, []).append(
                train.run("cadre", args.ranks, args.steps, env=env, extra=extra))
        results.setdefault("DDP", []).append(train.run("ddp", args.ranks, args.steps, extra=extra))
        results.setdefault("alone", []).append(train.run("local", 1, args.steps, extra=extra))
        print("round %d: %s" % (r + 1, ", ".join("%s %.1f" % (k, v[-1]["samples_per_s"])
                                                 for k, v in results.items())), flush=True)
    medians = {}
    for name, runs in results.items():
        rates = [x["samples_per_s"] for x in runs]
        medians[name] = statistics.median(rates)
        cpu = [x.get("cpu_ms_per_step", {}) for x in runs]
        runq = [train.runq_ms(x) for x in runs]
        print("%-7s %7.1f samples/s (%s); CPU ms per step: %s; run-queue wait ms per step: %s"
              % (name, medians[name], train.rounds(rates), train.cpu_medians(cpu),
                 train.cpu_medians(runq)))
    for name in builds:
        print("%s: %.2fx DDP, %.0f%% of perfect" % (
            name, medians[name] / medians["DDP"],
            100 * medians[name] / (args.ranks * medians["alone"])))


if __name__ == "__main__":
    main()
