"""Start-up overhead of the Slurm backend over the local one (issue 16's target: at most 3 s for a
2 x 2 job on the 2-core VM).

Starts the tests' two-node Slurm cluster (tests/slurm_cluster.py; root, slurm-wlm and munge), then
times `cadre run` of a 2 learners x 2 slots job whose command only records when it started, on
the local backend and on the Slurm backend, alternating, N times each. Start-up is from launching
`cadre run` to the last slot's first line; the whole run is printed too. Run it on an idle machine:

    sudo /usr/bin/python3 bench/backend_startup.py --repeats 5
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from slurm_cluster import SlurmCluster, missing_programs  # noqa: E402

CADRE = os.path.join(os.environ.get("CADRE_BUILD_DIR", os.path.join(ROOT, "build")), "cadre")
STAMP = "import os, time; open(os.path.join(os.environ['RESULT_DIR'], 'start-%s' % " \
        "os.environ['CADRE_RANK']), 'w').write(repr(time.time()))"


def one_run(backend, env, where):
    args = [CADRE, "run", "-q", "-n", "2", "--compute", "cpux2", "--framework", "pytorch-horovod",
            "-o", os.path.join(where, "job")]
    if backend == "slurm":
        args[2:2] = ["--backend", "slurm", "--store-host", "127.0.0.1"]
    t0 = time.time()
    subprocess.run(args + ["--", "python3", "-c", STAMP], cwd=where, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    total = time.time() - t0
    job = os.path.join(where, "job")
    starts = [float(open(os.path.join(job, n)).read()) for n in os.listdir(job)
              if n.startswith("start-")]
    assert len(starts) == 4, starts
    return max(starts) - t0, total


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    if missing_programs() or os.geteuid() != 0:
        sys.exit("needs root and slurm-wlm + munge (scripts/install-deps)")
    cluster = SlurmCluster(nodes=2).start()
    results = {"local": [], "slurm": []}
    try:
        for _ in range(a.repeats):
            for backend in ("local", "slurm"):
                with tempfile.TemporaryDirectory() as where:
                    env = cluster.env if backend == "slurm" else dict(os.environ)
                    results[backend].append(one_run(backend, env, where))
    finally:
        cluster.stop()
    for backend, runs in results.items():
        starts = [s for s, _ in runs]
        totals = [t for _, t in runs]
        print("%-5s start-up median %.2f s (min %.2f, max %.2f); whole run median %.2f s"
              % (backend, statistics.median(starts), min(starts), max(starts),
                 statistics.median(totals)))
    over = statistics.median(s for s, _ in results["slurm"]) - \
        statistics.median(s for s, _ in results["local"])
    print("slurm over local: %.2f s (target: at most 3 s)" % over)


if __name__ == "__main__":
    main()
