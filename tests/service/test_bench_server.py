"""`cadre bench server` runs end to end (a tiny duration: a smoke test, not a measurement) and
leaves nothing behind: its server, its jobs' processes and its temporary data directory."""
import json
import os
import subprocess

from service_helpers import CADRE, pids_of_processes_mentioning


def test_bench_server_reports_every_figure_and_cleans_up(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    out = subprocess.run(
        [CADRE, "bench", "server", "--duration", "0.3", "--warmup", "0", "--clients", "2",
         "--repeats", "1", "--grace", "5", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    get = report["get_training"]
    assert get["requests"] > 0 and get["errors"] == 0, get
    assert 0 < get["p50_ms"] <= get["p99_ms"] <= get["max_ms"], get
    assert get["server_cpu_cores"] is not None
    for key in ("submit_to_running_ms", "submit_to_completed_ms", "cancel_to_gone_ms",
                "cancel_to_canceled_ms"):
        assert len(report[key]["all"]) == 1 and report[key]["median"] > 0, (key, report)
    assert report["submit_to_running_ms"]["median"] <= report["submit_to_completed_ms"]["median"]
    assert os.listdir(tmp_path) == [], os.listdir(tmp_path)
    assert not pids_of_processes_mentioning(str(tmp_path))
