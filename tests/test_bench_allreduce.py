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
