"""`cadre bench allreduce` end to end: every run starts all its ranks and prints every size.

The command forks its ranks; a rank forked while the store server's thread held a lock (OpenSSL's
random generator, during another rank's handshake) once hung about one run in four, so the runs
are repeated.
"""
import subprocess

import pytest

from runner_helpers import CADRE


def bench_rows(text):
    return [line.split() for line in text.splitlines() if line and not line.startswith("#")
            and not line.lstrip().startswith("bytes")]


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_every_run_starts_all_ranks(transport):
    for attempt in range(6):
        proc = subprocess.run([CADRE, "bench", "allreduce", "-n", "4", "--transport", transport,
                               "--sizes", "4096,65536", "--iters", "20", "--timeout", "20"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=120)
        assert proc.returncode == 0, f"run {attempt}: {proc.stderr}"
        rows = bench_rows(proc.stdout)
        assert [row[0] for row in rows] == ["4096", "65536"], proc.stdout
        assert all(float(row[1]) > 0 for row in rows), proc.stdout


@pytest.mark.parametrize("flag,value,message", [
    ("--iters", "-1", "--iters must be at least 1 (leave it out: chosen by size), got -1"),
    ("--timeout", "-5", "--timeout must be above 0 and at most 86400 seconds"),
    ("--timeout", "0", "--timeout must be above 0"),
    ("--timeout", "nan", "--timeout must be above 0"),
    ("--late-us", "-1", "--late-us must be 0 to 1000000"),
])
def test_a_bad_setting_is_named_before_any_rank_starts(flag, value, message):
    # A negative timeout once exited 1 with no word at all; a negative count ran the default.
    proc = subprocess.run([CADRE, "bench", "allreduce", "-n", "2", "--sizes", "4", flag, value],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode == 2, proc
    assert message in proc.stderr, proc.stderr
    assert "bytes" not in proc.stdout, proc.stdout
