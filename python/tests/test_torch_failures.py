"""Failures as users meet them, through `cadre run`: a rank killed
mid-training, or leaving early, makes every other rank fail with an error naming it (not hang),
and a tensor submitted by some ranks only fails every rank with the stall report. (An unmodified
Horovod MNIST script: test_horovod_examples.py.)"""
import re

import pytest

from hvd_jobs import run_script

pytest.importorskip("torch")


def test_killed_rank_makes_the_others_fail_naming_it(tmp_path):
    # 2 learners x 2 slots: rank 0 reaches rank 1 over shared memory, ranks 2 and 3 over TCP.
    job = run_script(tmp_path, "torch_job_killed.py", 2, "cpux2", script_args=["kill"],
                     timeout=150, runner_args=["--grace", "60"],
                     env={"CADRE_TIMEOUT_SECONDS": "10"})
    assert not job.timed_out, job.describe()
    assert job.returncode == 1, job.describe()
    assert "learner-1 slot 1 was killed by SIGKILL" in job.stderr, job.describe()
    assert job.slots[1].get("signal") == "SIGKILL", job.slots[1]
    survivors_fail_naming(job, [0, 2, 3], 1)


def test_rank_leaving_early_makes_the_others_fail_naming_it(tmp_path):
    """A rank that leaves its training loop and exits normally shuts its engine down (atexit):
    the others fail at once, naming it, instead of waiting for it."""
    job = run_script(tmp_path, "torch_job_killed.py", 2, "cpux2", script_args=["exit"],
                     timeout=150, runner_args=["--grace", "60"])
    assert not job.timed_out and job.returncode == 1, job.describe()
    assert job.slots[0].get("exit_code") == 0, job.slots[0]
    survivors_fail_naming(job, [1, 2, 3], 0)


def survivors_fail_naming(job, survivors, lost):
    for rank in survivors:
        log = job.logs.get(rank, "")
        # Exit code 3 (not the runner's SIGKILL after the 60 s grace): the rank noticed.
        assert job.slots[rank].get("exit_code") == 3, "rank %d: %s\n%s" % (
            rank, job.slots[rank], job.describe())
        failed = [line for line in log.splitlines() if line.startswith("FAILED")]
        assert failed and re.search(r"\brank %d\b" % lost, failed[0]), "rank %d:\n%s" % (
            rank, log)


# Rank 0's 'lonely' against the others' barrier is a deadlock (each waits for a name the other
# side never submits): the deadlock time ends it with the stall shutdown left at its 30-minute
# default, and the stall shutdown ends it when that is the shorter.
@pytest.mark.parametrize("setting,ended_by", [
    ("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "stall shutdown time"),
    ("CADRE_STALL_DEADLOCK_TIME_SECONDS", "deadlock time"),
])
def test_stalled_tensor_fails_every_rank_naming_the_missing_ranks(tmp_path, setting, ended_by):
    # 6 s: well above any skew between the ranks' warm-up submissions on a loaded machine.
    job = run_script(tmp_path, "torch_job_stall.py", 2, "cpux2", timeout=150,
                     runner_args=["--grace", "60"],
                     env={"HOROVOD_STALL_CHECK_TIME_SECONDS": "2", setting: "6"})
    assert not job.timed_out and job.returncode == 1, job.describe()
    for rank in range(4):
        assert job.slots[rank].get("exit_code") == 3, "rank %d: %s\n%s" % (
            rank, job.slots[rank], job.describe())
        failed = [line for line in job.logs[rank].splitlines() if line.startswith("FAILED")]
        assert failed, "rank %d:\n%s" % (rank, job.logs[rank])
        assert "stalled past the " + ended_by in failed[0], failed[0]
        assert "'lonely' (waiting" in failed[0], failed[0]
        assert "missing from rank(s) 1, 2, 3" in failed[0], failed[0]
        assert "'barrier.noname.0' (waiting" in failed[0], failed[0]
        assert "missing from rank(s) 0" in failed[0], failed[0]
