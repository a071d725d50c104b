"""The Horovod-mode tests' own harness (hvd_suite.py on the job side, hvd_jobs.py on the pytest
side) must fail when a check fails, a rank stops early or a required check is missing — so that
a passing job test means what it says. No job is started here: a real Suite runs in a plain
subprocess, and its output is laid out as a job directory of `cadre run`."""
import json
import os
import subprocess
import textwrap

import pytest

from hvd_jobs import HERE, PYTHON, Job, check_results

SCRIPT = textwrap.dedent("""\
    import os, sys
    sys.path.insert(0, %r)
    from hvd_suite import Suite
    rank = int(os.environ["RANK_UNDER_TEST"])
    suite = Suite(rank)
    suite.check("first")(lambda: None)

    @suite.check("second")
    def _():
        assert rank != int(os.environ.get("FAIL_ON", "-1")), "second went wrong\\non two lines"

    for i in range(3):
        suite.add("gen.%%d" %% i, lambda k: None, i)
    if os.environ.get("DIE_ON") == str(rank):
        suite.check("dies")(lambda: os._exit(7))
    suite.run()
    """) % HERE


def fake_job(tmp_path, size, returncode=0, env=None):
    """Runs SCRIPT once per rank and lays the outputs out as `cadre run` would."""
    job_dir = tmp_path / "runs" / "training-test"
    (job_dir / "learner-1").mkdir(parents=True)
    slots = []
    codes = []
    script = tmp_path / "suite_script.py"
    script.write_text(SCRIPT)
    for rank in range(size):
        e = dict(os.environ, RANK_UNDER_TEST=str(rank), **(env or {}))
        proc = subprocess.run([PYTHON, str(script)], env=e, capture_output=True, text=True,
                              timeout=60)
        codes.append(proc.returncode)
        (job_dir / "learner-1" / ("slot-%d.log" % rank)).write_text(proc.stdout)
        slots.append({"rank": rank, "log": "learner-1/slot-%d.log" % rank,
                      "exit_code": proc.returncode})
    (job_dir / "status.json").write_text(json.dumps({"learners": [{"slots": slots}]}))
    return Job(returncode if all(c == 0 for c in codes) else 1, "", "", str(tmp_path), False), codes


def test_all_ok_passes_and_lists_every_check(tmp_path):
    job, codes = fake_job(tmp_path, 2)
    assert codes == [0, 0]
    seen = check_results(job, 2, ["first", "gen.2"])
    assert sorted(seen) == ["first", "gen.0", "gen.1", "gen.2", "second"]
    assert seen["second"] == [0, 1]


def test_a_failed_check_is_named_with_its_rank(tmp_path):
    job, codes = fake_job(tmp_path, 3, env={"FAIL_ON": "1"})
    assert codes == [0, 1, 0]
    with pytest.raises(AssertionError) as e:
        check_results(job, 3)
    first = str(e.value).splitlines()[0]
    assert first.startswith("rank 1: check second failed: AssertionError: second went wrong"), first
    assert "on two lines" in first  # the message stays on the one line
    assert "rank 0:" not in str(e.value).split("\n\n")[0]


def test_a_rank_that_stops_early_or_a_missing_check_fails(tmp_path):
    job, codes = fake_job(tmp_path, 2, env={"DIE_ON": "0"})
    assert codes == [7, 0]
    with pytest.raises(AssertionError) as e:
        check_results(job, 2)
    assert "rank 0: reported 5 of 6 checks (it stopped after gen.2)" in str(e.value)
    job, _ = fake_job(tmp_path / "again", 2)
    with pytest.raises(AssertionError) as e:
        check_results(job, 3, ["first", "not.there"])
    text = str(e.value)
    assert "rank 2: no log in the job directory" in text
    assert "check not.there: not run by any rank" in text


def test_a_nonzero_runner_exit_fails_even_when_every_check_passed(tmp_path):
    job, _ = fake_job(tmp_path, 1, returncode=1)
    with pytest.raises(AssertionError) as e:
        check_results(job, 1)
    assert "cadre run exited 1 although every check passed" in str(e.value)
