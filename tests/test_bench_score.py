"""bench/score.py as a reader of docs/benchmarks.md runs it: from any directory, without
PYTHONPATH, every server answering (the Python server a user would write included)."""
import os
import subprocess

from runner_helpers import BUILD, ROOT

SCRIPT = os.path.join(ROOT, "bench", "score.py")


def test_a_short_run_measures_every_server(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["CADRE_BUILD_DIR"] = BUILD
    proc = subprocess.run(["/usr/bin/python3", SCRIPT, "--requests", "20"], cwd=tmp_path,
                          env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout
    rows = {}
    for line in proc.stdout.splitlines():
        for server in ("cadre-serve batched", "cadre-serve unbatched",
                       "python http.server + eager torch"):
            if line.startswith(server + " "):
                fields = line[len(server):].split()
                rows[(server, int(fields[0]))] = (float(fields[1]), int(fields[4]))
    assert set(rows) == {("cadre-serve batched", 1), ("cadre-serve batched", 16),
                         ("cadre-serve batched", 32), ("cadre-serve unbatched", 1),
                         ("cadre-serve unbatched", 16), ("cadre-serve unbatched", 32),
                         ("python http.server + eager torch", 1),
                         ("python http.server + eager torch", 16)}, proc.stdout
    for (server, conc), (per_second, errors) in rows.items():
        assert per_second > 0 and errors == 0, (server, conc, proc.stdout)
    assert "targets (issue 15):" in proc.stdout
