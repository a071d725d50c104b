"""ddl_allreduce_bench's flat baselines (--flat): cadre's flat choice with same-host messages over
shared memory ("flat" rows, the default), over TCP inside the host ("flat-tcp"), or both, each
beside the hierarchical allreduce; a bad choice is refused (exit code 2, naming the flag)."""
import os

import pytest

from runner_helpers import BUILD, CADRE
from test_bench_sizes import DDL, run


def rows(stdout):
    return [line.split() for line in stdout.splitlines() if line.strip()[:1].isdigit()]


def test_a_flat_baseline_that_is_neither_shm_nor_tcp_is_refused():
    if not os.path.exists(DDL):
        pytest.skip("ddl_allreduce_bench is not built")
    bad = run([DDL, "--flat", "udp"])
    assert bad.returncode == 2 and "--flat udp: use shm, tcp or both" in bad.stderr


@pytest.mark.parametrize("flat, names", [
    (None, ["flat", "hierarchical"]),
    ("tcp", ["flat-tcp", "hierarchical"]),
    ("both", ["flat", "flat-tcp", "hierarchical"]),
])
def test_each_flat_baseline_runs_beside_the_hierarchical_allreduce(flat, names):
    if not os.path.exists(DDL):
        pytest.skip("ddl_allreduce_bench is not built")
    if os.geteuid() != 0:
        pytest.skip("emulated nodes need root")
    argv = [CADRE, "netem", "exec", "--hosts", "2", "--link", "1gbit", "--", DDL, "--slots", "2",
            "--min-bytes", "4K", "--max-bytes", "64K", "--seconds", "0.05", "--max-reps", "3"]
    proc = run(argv + (["--flat", flat] if flat else []))
    if proc.returncode != 0 and "netns" in proc.stderr:
        pytest.skip("no network namespaces here: " + proc.stderr.strip()[-200:])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = rows(proc.stdout)
    for size in ("4096", "16384", "65536"):
        assert [r[1] for r in got if r[0] == size] == names, proc.stdout
    # The flat rows name the algorithm cadre chose: recursive doubling up to 16 KiB.
    assert [r[2] for r in got if r[0] == "4096" and r[1] != "hierarchical"] == \
        ["rd"] * (len(names) - 1), proc.stdout
    assert all(float(r[-4]) > 0 for r in got), proc.stdout  # the time, ms
