"""Every benchmark reads sizes through cadre's one parser (base/byte_size.h), so "64K" and "16M"
mean the same bytes everywhere and a bad size is refused the same way (exit code 2, quoting it):
`cadre bench allreduce|ps` (tests/test_bench_allreduce.py, python/tests/test_ps.py),
ddl_allreduce_bench, mpi_allreduce, single_copy_allreduce, bench/compare_allreduce,
`python3 -m cadre.ps bench`."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from runner_helpers import BUILD, CADRE, ROOT

DDL = os.path.join(BUILD, "bench", "ddl_allreduce_bench")
MPI = os.path.join(BUILD, "bench", "mpi_allreduce")
SINGLE_COPY = os.path.join(BUILD, "bench", "single_copy_allreduce")
ENV = dict(os.environ, CADRE_BUILD_DIR=BUILD,
           PYTHONPATH=os.pathsep.join([os.path.join(BUILD, "python"), os.path.join(ROOT, "python")]))


def run(argv, timeout=120):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout, env=ENV)


def test_ddl_allreduce_bench_takes_cadre_units():
    if not os.path.exists(DDL):
        pytest.skip("ddl_allreduce_bench is not built")
    bad = run([DDL, "--min-bytes", "4X"])
    assert bad.returncode == 2 and "--min-bytes: '4X' is not a byte count" in bad.stderr
    if os.geteuid() != 0:
        pytest.skip("emulated nodes need root")
    proc = run([CADRE, "netem", "exec", "--hosts", "2", "--link", "1gbit", "--", DDL, "--slots",
                "1", "--min-bytes", "16K", "--max-bytes", "64K", "--seconds", "0.05",
                "--max-reps", "3"])
    if proc.returncode != 0 and "netns" in proc.stderr:
        pytest.skip("no network namespaces here: " + proc.stderr.strip()[-200:])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert sorted({r[0] for r in rows}) == ["16384", "65536"], proc.stdout


def test_mpi_allreduce_takes_cadre_units():
    if not os.path.exists(MPI) or not shutil.which("mpirun"):
        pytest.skip("mpi_allreduce or mpirun missing")
    mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", MPI]
    proc = run(mpirun + ["4K,64K"])
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(line)["bytes"] for line in proc.stdout.splitlines()] == [4096, 65536]
    bad = run(mpirun + ["4X"])
    assert bad.returncode != 0 and "'4X' is not a byte count" in bad.stderr


def test_single_copy_allreduce_takes_cadre_units():
    if not os.path.exists(SINGLE_COPY):
        pytest.skip("single_copy_allreduce is not built")
    bad = run([SINGLE_COPY, "--sizes", "64K,4X"])
    assert bad.returncode == 2 and "--sizes: '4X' is not a byte count" in bad.stderr
    proc = run([SINGLE_COPY, "--sizes", "64K,100004", "--rounds", "1", "--iters", "1"])
    if proc.returncode != 0 and "process_vm_readv" in proc.stderr:
        pytest.skip("cross-memory attach refused here: " + proc.stderr.strip()[-200:])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()
            if line.strip()[:1].isdigit() and "ranks," not in line]
    assert [r[0] for r in rows] == ["65536", "100004"], proc.stdout


def test_compare_allreduce_takes_cadre_units():
    script = os.path.join(ROOT, "bench", "compare_allreduce")
    proc = run([sys.executable, script, "-n", "2", "--sizes", "4K,64K", "--no-gloo", "--no-mpi",
                "--json"])
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(line)["bytes"] for line in proc.stdout.splitlines()] == [4096, 65536]
    bad = run([sys.executable, script, "--sizes", "4X", "--no-gloo", "--no-mpi"])
    assert bad.returncode == 2 and "'4X' is not a byte count" in bad.stderr


def test_python_ps_bench_takes_cadre_units():
    bad = run([sys.executable, "-m", "cadre.ps", "bench", "--size", "64X"])
    assert bad.returncode == 2 and "'64X' is not a byte count" in bad.stderr
