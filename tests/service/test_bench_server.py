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


def test_bench_server_training_phase_reports_both_throughputs(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    out = subprocess.run(
        [CADRE, "bench", "server", "--duration", "0.2", "--warmup", "0", "--clients", "1",
         "--repeats", "1", "--grace", "5", "--training", "--rounds", "1", "--steps", "3",
         "--followers", "2", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=900, env=env)
    assert out.returncode == 0, out.stderr
    training = json.loads(out.stdout.strip().splitlines()[-1])["training"]
    assert training["quiet_samples_per_s"]["median"] > 0, training
    assert training["loaded_samples_per_s"]["median"] > 0, training
    assert len(training["server_cpu_cores_loaded"]) == 1, training
    assert os.listdir(tmp_path) == [], os.listdir(tmp_path)
