"""hvd.elastic through `cadre run`: Horovod's elastic pattern survives SIGKILL of a learner.

With --max-restarts the runner restarts the job and the training function resumes from the
last commit: the final model equals an undisturbed run's (no step lost or repeated). With
--min-nodes the job goes on with fewer learners from the last commit. No process is left."""
import os
import re

import pytest

from hvd_jobs import run_script

torch = pytest.importorskip("torch")


def processes_with(marker):
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(pid))
            except OSError:
                pass
    return found


def steps(job):
    """(restart, size, step) of every STEP line of rank 0's log, in order."""
    return [tuple(int(v) for v in m.groups()) for m in re.finditer(
        r"^STEP restart=(\d+) size=(\d+) step=(\d+) ", job.logs.get(0, ""), re.M)]


def train(tmp_path, name, learners, runner_args=(), kill=None, script_args=()):
    out = tmp_path / (name + ".pt")
    script_args = ["--out", str(out), *script_args]
    if kill:
        script_args += ["--kill-rank", str(kill[0]), "--kill-step", str(kill[1])]
    cwd = tmp_path / name
    cwd.mkdir()
    job = run_script(cwd, "torch_job_elastic.py", learners, "cpu", script_args=script_args,
                     runner_args=["--grace", "30", *runner_args], timeout=300,
                     env={"CADRE_TIMEOUT_SECONDS": "20"})
    assert not job.timed_out and job.returncode == 0, job.describe()
    assert processes_with(str(tmp_path)) == [], "processes left behind"
    return job, torch.load(out)


def test_restart_resumes_from_the_last_commit_with_nothing_lost(tmp_path):
    _, undisturbed = train(tmp_path, "undisturbed", 2)
    job, resumed = train(tmp_path, "killed", 2, ["--max-restarts", "1"], kill=(1, 9))
    # The cause is the killed learner, unless a survivor's own failure was seen first.
    assert re.search(r"restart 1 of 1 after learner-\d slot 0 (was killed by SIGKILL|exited)",
                     job.stderr), job.describe()
    assert "completed" in job.stderr and "after 1 restart" in job.stderr, job.describe()
    assert job.status["restarts"] == 1 and job.status["nodes"] == 2
    seen = steps(job)
    first = [s for r, _, s in seen if r == 0]
    again = [s for r, _, s in seen if r == 1]
    # Rank 0 finished step 8 and committed step 9 unless the runner stopped it first; the
    # restart begins at whichever commit is on disk and runs every later step once.
    assert first and max(first) == 8 and again and again[0] in (8, 9), seen
    assert again == list(range(again[0], 18)), seen
    for name in undisturbed:
        assert torch.allclose(undisturbed[name], resumed[name], atol=1e-6), name


def test_elastic_job_goes_on_with_fewer_learners(tmp_path):
    job, model = train(tmp_path, "elastic", 3, ["--max-restarts", "1", "--min-nodes", "2"],
                       kill=(2, 5))
    assert re.search(r"learner-\d is lost: going on with 2 learners \(min_nodes 2\)",
                     job.stderr), job.describe()
    assert job.status["nodes"] == 2 and job.status["restarts"] == 1
    seen = steps(job)
    again = [(size, s) for r, size, s in seen if r == 1]
    # Resumed from the last commit (step 5, or 4 when the runner stopped rank 0 before it was
    # written) on 2 ranks; what is left of the epoch is split anew.
    assert again and again[0] in ((2, 4), (2, 5)), seen
    assert all(size == 2 for size, _ in again)
    assert model["weight"].shape == (1, 4)


def test_a_lost_learner_is_taken_back_at_a_commit(tmp_path):
    job, model = train(tmp_path, "rejoin", 3,
                       ["--max-restarts", "1", "--min-nodes", "2", "--rejoin-after", "1"],
                       kill=(2, 3), script_args=["--step-sleep", "0.3"])
    assert re.search(r"learner-3 is lost: going on with 2 learners", job.stderr), job.describe()
    assert "the lost learners may return" in job.stderr, job.describe()
    assert re.search(r"1 learner is back: starting the job again on all 3 learners from their "
                     r"last commit \(CADRE_RESTART_COUNT=2\)", job.stderr), job.describe()
    # Taking a learner back is not a restart: the one restart allowed was the loss.
    assert job.status["nodes"] == 3 and job.status["restarts"] == 1, job.status
    assert job.status["rejoins"] == 1, job.status
    seen = steps(job)
    by_start = {}
    for r, size, s in seen:
        by_start.setdefault(r, []).append((size, s))
    assert sorted(by_start) == [0, 1, 2], seen
    assert {size for size, _ in by_start[1]} == {2} and {size for size, _ in by_start[2]} == {3}
    # The survivors left at a commit and the rejoined start resumed from it: every step once.
    last_on_two = by_start[1][-1][1]
    assert by_start[2][0][1] == last_on_two + 1, seen
    assert model["weight"].shape == (1, 4)


def test_without_restarts_a_lost_learner_fails_the_job(tmp_path):
    cwd = tmp_path / "plain"
    cwd.mkdir()
    job = run_script(cwd, "torch_job_elastic.py", 2, "cpu",
                     script_args=["--out", str(tmp_path / "x.pt"), "--kill-rank", "1",
                                  "--kill-step", "3"],
                     runner_args=["--grace", "30"], timeout=300,
                     env={"CADRE_TIMEOUT_SECONDS": "20"})
    assert job.returncode == 1 and "was killed by SIGKILL" in job.stderr, job.describe()
    assert job.status["restarts"] == 0
    assert processes_with(str(tmp_path)) == []
