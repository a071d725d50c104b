"""Fixtures for the end-to-end tests of `cadre run`: they start real jobs with the built binary."""
import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("CADRE_BUILD_DIR", os.path.join(ROOT, "build"))
CADRE = os.path.join(BUILD, "cadre")


class Job:
    """One finished `cadre run`: exit code, output, and the job directory it made."""

    def __init__(self, proc, cwd):
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.cwd = cwd

    @property
    def job_dir(self):
        runs = os.path.join(self.cwd, "runs")
        dirs = sorted(os.listdir(runs)) if os.path.isdir(runs) else []
        assert len(dirs) == 1, f"expected one job directory in {runs}, found {dirs}"
        return os.path.join(runs, dirs[0])

    def status(self):
        with open(os.path.join(self.job_dir, "status.json")) as f:
            return json.load(f)


@pytest.fixture
def cadre_run(tmp_path):
    """Runs `cadre run ARGS` in tmp_path (so runs/ lands there); returns a Job."""
    if not os.path.exists(CADRE):
        pytest.fail(f"{CADRE} is not built (set CADRE_BUILD_DIR or run `make build`)")

    def run(*args, env=None, timeout=60, cwd=None):
        full_env = dict(os.environ)
        full_env.pop("CADRE_HOSTS_METHOD", None)
        full_env.update(env or {})
        where = str(cwd or tmp_path)
        proc = subprocess.run([CADRE, "run", *args], cwd=where, env=full_env, timeout=timeout,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return Job(proc, where)

    return run
