"""Helpers for the end-to-end tests of `cadre run` (a module name of its own, so that it does not
clash with python/tests/conftest.py when pytest collects both folders)."""
import json
import os
import select
import signal
import subprocess
import time

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


def wait_until_up(proc, slots, timeout):
    """Reads the running `cadre run`'s output until `slots` lines end in "] up"; fails, naming
    what it waited for, if they have not come within `timeout` s (a runner that hangs without
    printing included) or the runner exits first."""
    deadline = time.monotonic() + timeout
    fd = proc.stdout.fileno()
    seen, line, lines = 0, b"", []
    while seen < slots:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        # A byte at a time: what follows the last line read is left for communicate().
        byte = os.read(fd, 1)
        if not byte:  # it closed its output: it is exiting
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            break
        line += byte
        if byte == b"\n":
            text = line.decode(errors="replace").rstrip()
            lines.append(text)
            seen += text.endswith("] up")
            line = b""
    if line:
        lines.append(line.decode(errors="replace").rstrip())
    state = ("still running" if proc.poll() is None
             else f"exited with status {proc.returncode}")
    assert seen == slots, (
        f"waited {timeout} s for {slots} slots of `cadre run` to print a line ending in \"] up\"; "
        f"{seen} did, and it is {state}; its last lines:\n" + "\n".join(lines[-10:]))


def interrupt_once_up(proc, cwd, slots, timeout, while_up=None, interrupt=signal.SIGINT):
    """Waits (up to `timeout` s) until `slots` lines of the running `cadre run` end in "] up",
    calls `while_up()` if given (checks on the running job, or a fault), then sends `interrupt`
    (Ctrl-C; None: nothing) and returns the finished Job; the process is killed if anything goes
    wrong meanwhile."""
    try:
        wait_until_up(proc, slots, timeout)
        if while_up:
            while_up()
        if interrupt:
            proc.send_signal(interrupt)
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return Job(subprocess.CompletedProcess([], proc.returncode, out, err), cwd)


# Open MPI's remote-launch agent (plm_rsh_agent) for emulated nodes: mpirun calls it as
# `agent.sh HOST COMMAND...` and it runs the command on this machine instead of over ssh. Real
# nodes each have their own /tmp; emulated ones share this machine's, where the Open MPI daemons
# (orted) of two nodes would share one session folder, /tmp/ompi.<host>.<uid>/jf.<job>: each
# daemon, starting, wipes that folder ("stale") and makes its own tree and hwloc.sm in it, so one
# wipes the other's half-made tree ("mkdir ... File exists", mpirun exits 213) or both fill one
# hwloc.sm at once (a daemon segfaults, 139), before any slot starts: about one run in ten on a
# loaded machine. So each node gets a session folder of its own, beside this script:
# orte_tmpdir_base for Open MPI 4 (Debian 12's 4.1), prte_tmpdir_base for Open MPI 5's prted.
MPI_AGENT = """#!/bin/sh
node="$(dirname "$0")/node-$1"
shift
mkdir -p "$node"
export OMPI_MCA_orte_tmpdir_base="$node" PRTE_MCA_prte_tmpdir_base="$node"
exec sh -c "$*"
"""


def write_mpi_agent(folder):
    """Writes MPI_AGENT to `folder`/agent.sh, executable; returns its path (a str)."""
    path = os.path.join(str(folder), "agent.sh")
    with open(path, "w") as f:
        f.write(MPI_AGENT)
    os.chmod(path, 0o755)
    return path
