"""Fixtures for the end-to-end tests of `cadre run`: they start real jobs with the built binary."""
import os
import subprocess

import pytest

from runner_helpers import CADRE, Job


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
