"""The helpers the runner tests share: they fail with a message, never hang."""
import subprocess

import pytest

from runner_helpers import wait_until_up


def start(script):
    return subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_a_runner_that_hangs_silently_fails_the_wait_with_what_it_waited_for():
    proc = start("echo '[learner-1 slot 0] up'; exec sleep 300")
    try:
        with pytest.raises(AssertionError) as failure:
            wait_until_up(proc, slots=2, timeout=1)
        message = str(failure.value)
        assert '2 slots of `cadre run` to print a line ending in "] up"' in message, message
        assert "1 did, and it is still running" in message, message
        assert "[learner-1 slot 0] up" in message, message
    finally:
        proc.kill()
        proc.wait()


def test_a_runner_that_exits_first_is_named_so():
    proc = start("echo starting; exit 3")
    with pytest.raises(AssertionError, match="exited with status 3"):
        wait_until_up(proc, slots=1, timeout=60)
    proc.communicate()


def test_what_follows_the_up_lines_is_left_for_communicate():
    proc = start("echo '[learner-1 slot 0] up'; echo after")
    wait_until_up(proc, slots=1, timeout=60)
    out, _ = proc.communicate(timeout=60)
    assert out == "after\n"
