"""The pytest side of the Horovod-mode tests: start a job with the real `cadre run` (the binary
in CADRE_BUILD_DIR), read every rank's output from the job directory, and check the per-check
lines that hvd_suite.py prints, naming the check and the rank in every failure.

Every job runs under a deadline: past it the runner gets SIGTERM (it stops the slots and writes
status.json), then SIGKILL (each slot's keeper takes the slot down); the test then fails with
the last lines of every rank's log.
"""
import json
import os
import re
import signal
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("CADRE_BUILD_DIR", os.path.join(ROOT, "build"))
CADRE = os.path.join(BUILD, "cadre")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

# Names pending on some ranks only (a check that failed half-way on one rank) fail after 40 s
# instead of waiting forever (the engine looks at names older than the check time only, so that
# must be shorter); a dead peer is reported within CADRE_TIMEOUT_SECONDS.
JOB_ENV = {"HOROVOD_STALL_CHECK_TIME_SECONDS": "20", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "40",
           "OMP_NUM_THREADS": "1"}

_LINE = re.compile(r"^CHECK rank=(\d+) (\S+) (ok|FAIL)(?: (.*))?$")


class Job:
    """One finished `cadre run`: exit code, the runner's output, the job directory and every
    rank's log (rank -> text, from status.json's slot table)."""

    def __init__(self, returncode, stdout, stderr, cwd, timed_out):
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.timed_out = timed_out
        runs = os.path.join(cwd, "runs")
        dirs = sorted(os.listdir(runs)) if os.path.isdir(runs) else []
        self.job_dir = os.path.join(runs, dirs[0]) if len(dirs) == 1 else None
        self.status, self.slots, self.logs = {}, {}, {}
        path = os.path.join(self.job_dir or "", "status.json")
        if self.job_dir and os.path.exists(path):
            with open(path) as f:
                self.status = json.load(f)
            for learner in self.status.get("learners", []):
                for slot in learner["slots"]:
                    self.slots[slot["rank"]] = slot
                    log = os.path.join(self.job_dir, slot["log"])
                    if os.path.exists(log):
                        with open(log, errors="replace") as f:
                            self.logs[slot["rank"]] = f.read()

    def describe(self, tail=3000):
        """The runner's stderr and the end of every rank's log, for failure messages."""
        parts = ["cadre run exited %s%s" % (self.returncode,
                                            " after the test's deadline" if self.timed_out else ""),
                 "--- runner stderr:\n" + self.stderr[-tail:]]
        for rank in sorted(self.logs):
            parts.append("--- rank %d (%s):\n%s" % (rank, self.slots[rank].get("log"),
                                                    self.logs[rank][-tail:]))
        if not self.logs:
            parts.append("--- runner stdout:\n" + self.stdout[-tail:])
        return "\n".join(parts)


def cadre_run(cwd, args, env=None, timeout=180):
    """Runs `cadre run ARGS` in cwd (so that runs/ lands there) and returns a Job."""
    if not os.path.exists(CADRE):
        pytest.fail("%s is not built (set CADRE_BUILD_DIR or run `make build`)" % CADRE)
    full_env = dict(os.environ)
    full_env.pop("CADRE_HOSTS_METHOD", None)
    # The runner must make cadre and horovod importable in every slot by itself (`make
    # test-python` sets PYTHONPATH for pytest; the jobs must not inherit it).
    full_env.pop("PYTHONPATH", None)
    full_env.update(JOB_ENV)
    full_env.update(env or {})
    proc = subprocess.Popen([CADRE, "run", *args], cwd=str(cwd), env=full_env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    return Job(proc.returncode, out, err, str(cwd), timed_out)


def run_script(cwd, script, learners, compute, script_args=(), env=None, timeout=180,
               runner_args=()):
    """`cadre run -q -n LEARNERS --compute COMPUTE --framework pytorch-horovod -- python SCRIPT`
    (-q: the ranks' output is read from the job directory)."""
    return cadre_run(cwd, ["-q", "-n", str(learners), "--compute", compute, "--framework",
                           "pytorch-horovod", *runner_args, "--", PYTHON,
                           os.path.join(HERE, script), *script_args],
                     env=env, timeout=timeout)


def check_results(job, size, required=()):
    """Asserts that every one of `size` ranks ran its whole plan with every check ok, and that
    every name in `required` was among the checks. Returns {check name: [ranks]}."""
    problems = []
    by_check = {}
    for rank in range(size):
        log = job.logs.get(rank)
        if log is None:
            problems.append("rank %d: no log in the job directory" % rank)
            continue
        plan = re.search(r"^PLAN rank=%d checks=(\d+)$" % rank, log, re.M)
        seen = {}
        for line in log.splitlines():
            m = _LINE.match(line)
            if m and int(m.group(1)) == rank:
                seen[m.group(2)] = (m.group(3), m.group(4))
                by_check.setdefault(m.group(2), []).append(rank)
        for name, (outcome, detail) in seen.items():
            if outcome != "ok":
                problems.append("rank %d: check %s failed: %s" % (rank, name, detail))
        if not plan:
            problems.append("rank %d: never started its checks" % rank)
        elif len(seen) != int(plan.group(1)):
            problems.append("rank %d: reported %d of %s checks (it stopped after %s)"
                            % (rank, len(seen), plan.group(1),
                               list(seen)[-1] if seen else "none"))
        elif not re.search(r"^DONE rank=%d " % rank, log, re.M):
            problems.append("rank %d: did not finish (no DONE line)" % rank)
    for name in required:
        if name not in by_check:
            problems.append("check %s: not run by any rank" % name)
    if job.timed_out:
        problems.append("the job ran past the test's deadline")
    if job.returncode != 0 and not problems:
        problems.append("cadre run exited %s although every check passed" % job.returncode)
    if len(problems) > 30:
        problems = problems[:30] + ["... and %d more" % (len(problems) - 30)]
    assert not problems, "\n".join(problems) + "\n\n" + job.describe()
    return by_check
