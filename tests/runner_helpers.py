"""Helpers for the end-to-end tests of `cadre run` (a module name of its own, so that it does not
clash with python/tests/conftest.py when pytest collects both folders)."""
import json
import os

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

