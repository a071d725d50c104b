"""Fixtures for the end-to-end tests of `cadre run`: they start real jobs with the built binary."""
import os
import subprocess

import pytest

from runner_helpers import CADRE, Job
from slurm_cluster import SlurmCluster, missing_programs


@pytest.fixture
def cadre_run(tmp_path):
    """Runs `cadre run ARGS` in tmp_path (so runs/ lands there); returns a Job."""
    if not os.path.exists(CADRE):
        pytest.fail(f"{CADRE} is not built (set CADRE_BUILD_DIR or run `make build`)")

    def run(*args, env=None, timeout=60, cwd=None):
        full_env = dict(os.environ)
        full_env.pop("CADRE_HOSTS_METHOD", None)
        for key, value in (env or {}).items():  # None: the variable is unset
            if value is None:
                full_env.pop(key, None)
            else:
                full_env[key] = value
        where = str(cwd or tmp_path)
        proc = subprocess.run([CADRE, "run", *args], cwd=where, env=full_env, timeout=timeout,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return Job(proc, where)

    return run


@pytest.fixture(scope="module")
def slurm():
    """A real two-node Slurm cluster on this machine (slurm_cluster.py), for one test module."""
    missing = missing_programs()
    if missing:
        pytest.skip("Slurm is not installed here (no %s): scripts/install-deps installs "
                    "slurm-wlm and munge" % ", ".join(missing))
    if os.geteuid() != 0:
        pytest.skip("the test Slurm cluster runs its slurmd daemons as root")
    cluster = SlurmCluster(nodes=2).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def kubectl_emulator(tmp_path):
    """The kubectl emulator (kubectl_emulator.py), its pods as local processes; needs root for
    the pods' namespaces (their hosts files, PID 1)."""
    from kubectl_emulator import KubectlEmulator
    if os.geteuid() != 0:
        pytest.skip("the kubectl emulator runs pods in mount/PID namespaces, as root")
    emulator = KubectlEmulator(str(tmp_path))
    try:
        yield emulator
    finally:
        emulator.stop()
