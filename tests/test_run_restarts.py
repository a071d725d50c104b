"""`cadre run --max-restarts` / `--min-nodes`: a failed learner restarts the job (with
CADRE_RESTART_COUNT), elastic jobs go on with fewer learners, restarts are bounded, a signal to
the runner is never answered with a restart, and no process is left behind."""
import json
import os
import signal
import subprocess
import time
import uuid

from runner_helpers import CADRE

# Learner 2 kills itself in the first start only; every slot prints what it was started as.
KILL_IN_FIRST = ('echo "start=$CADRE_RESTART_COUNT learner=$LEARNER_ID size=$CADRE_SIZE '
                 'nodes=$NUM_LEARNERS max=$CADRE_MAX_RESTARTS"; '
                 'if [ "$CADRE_RESTART_COUNT" = 0 ] && [ "$LEARNER_ID" = {victim} ]; then '
                 'kill -KILL $$; fi; sleep 1')


def processes_with(marker):
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(pid))
            except OSError:
                pass
    return found


def test_a_killed_learner_restarts_the_job(cadre_run):
    job = cadre_run("-n", "2", "--framework", "pytorch-ddl", "--max-restarts", "2", "--", "sh",
                    "-c", KILL_IN_FIRST.format(victim=2))
    assert job.returncode == 0, job.stderr
    assert "cadre: restart 1 of 2 after learner-2 slot 0 was killed by SIGKILL" in job.stderr
    assert "starting all 2 learners again" in job.stderr
    assert "completed" in job.stderr and "after 1 restart" in job.stderr
    status = job.status()
    assert status["state"] == "completed" and status["restarts"] == 1
    assert status["restart_causes"][0].startswith("learner-2 slot 0 was killed by SIGKILL")
    log = open(os.path.join(job.job_dir, "learner-2", "slot-0.log")).read()
    # The log shows both starts and the restart between them, in order.
    assert log.index("start=0 learner=2") < log.index("cadre: restart 1 of 2") < \
        log.index("start=1 learner=2 size=2 nodes=2 max=2"), log


def test_restarts_are_bounded(cadre_run):
    # Learner 2 fails every start, once learner 1 has said which start it is.
    script = ('if [ "$LEARNER_ID" = 1 ]; then echo "start=$CADRE_RESTART_COUNT"; '
              'touch "$RESULT_DIR/said-$CADRE_RESTART_COUNT"; exec sleep 30; fi; '
              'for i in $(seq 600); do [ -e "$RESULT_DIR/said-$CADRE_RESTART_COUNT" ] && exit 4; '
              'sleep 0.1; done; exit 5')
    job = cadre_run("-n", "2", "--framework", "pytorch-ddl", "--max-restarts", "2", "--", "sh",
                    "-c", script)
    assert job.returncode == 1
    assert "restart 2 of 2" in job.stderr and "restart 3" not in job.stderr
    assert "failed after 2 restarts: learner-2 slot 0 exited with code 4" in job.stderr
    status = job.status()
    assert status["state"] == "failed" and status["restarts"] == 2
    log = open(os.path.join(job.job_dir, "learner-1", "slot-0.log")).read()
    assert [l for l in log.splitlines() if l.startswith("start=")] == \
        ["start=0", "start=1", "start=2"]


def test_elastic_job_goes_on_with_fewer_learners(cadre_run):
    job = cadre_run("-n", "3", "--framework", "pytorch-horovod", "--max-restarts", "1",
                    "--min-nodes", "2", "--", "sh", "-c", KILL_IN_FIRST.format(victim=3))
    assert job.returncode == 0, job.stderr
    assert "learner-3 is lost: going on with 2 learners (min_nodes 2)" in job.stderr
    status = job.status()
    assert status["nodes"] == 2 and status["min_nodes"] == 2 and status["restarts"] == 1
    for learner in (1, 2):
        log = open(os.path.join(job.job_dir, f"learner-{learner}", "slot-0.log")).read()
        assert f"start=1 learner={learner} size=2 nodes=2" in log, log
    log3 = open(os.path.join(job.job_dir, "learner-3", "slot-0.log")).read()
    assert "start=1" not in log3 and "cadre: restart 1 of 1" in log3


def test_elastic_below_min_nodes_starts_every_learner_again(cadre_run):
    # Learner 3 is lost in the first start, learner 2 in the second: one would remain, fewer
    # than min_nodes, so the third start has all 3 again.
    script = ('echo "start=$CADRE_RESTART_COUNT size=$CADRE_SIZE"; '
              'case "$CADRE_RESTART_COUNT/$LEARNER_ID" in 0/3|1/2) kill -KILL $$;; esac; sleep 1')
    job = cadre_run("-n", "3", "--framework", "pytorch-horovod", "--max-restarts", "2",
                    "--min-nodes", "2", "--", "sh", "-c", script)
    assert job.returncode == 0, job.stderr
    assert "learner-3 is lost: going on with 2 learners" in job.stderr
    assert "fewer than min_nodes (2) would remain: starting all 3 learners again" in job.stderr
    log = open(os.path.join(job.job_dir, "learner-3", "slot-0.log")).read()
    assert "start=2 size=3" in log, log
    assert job.status()["nodes"] == 3


def test_a_signal_to_the_runner_is_never_answered_with_a_restart(tmp_path):
    marker = "300." + str(uuid.uuid4().int)[:12]
    script = f'sleep {marker} & touch "$RESULT_DIR/started-$CADRE_RESTART_COUNT-$CADRE_RANK"; wait'
    proc = subprocess.Popen([CADRE, "run", "-q", "-n", "2", "--framework", "pytorch-ddl",
                             "--max-restarts", "3", "--grace", "2", "--", "sh", "-c", script],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("runs/*/started-0-*"))) < 2:
            assert time.monotonic() < deadline, "slots did not start"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "restart" not in err
    assert list(tmp_path.glob("runs/*/started-1-*")) == []
    deadline = time.monotonic() + 10
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with(marker) == []
    (job_dir,) = list((tmp_path / "runs").iterdir())
    assert json.loads((job_dir / "status.json").read_text())["restarts"] == 0
