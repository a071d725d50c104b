"""`cadre run --backend mpi` with emulated nodes: Open MPI's remote-launch agent (plm_rsh_agent)
is a script that runs the command on this machine instead of over ssh, each node with an Open MPI
session folder of its own (runner_helpers.MPI_AGENT), and the hostfile's hosts are 127.0.0.2 and
127.0.0.3, which Open MPI takes for two other nodes."""
import os
import shutil
import signal
import subprocess
import time

import pytest

from runner_helpers import CADRE, Job, interrupt_once_up, write_mpi_agent

DUMP = """import os
print("contract", os.environ["LEARNER_ID"], os.environ["CADRE_RANK"], os.environ["CADRE_HOST"],
      os.environ["CADRE_LEARNER_ADDRESS"], flush=True)
if os.environ["CADRE_RANK"] == os.environ.get("FAIL_RANK"):
    raise SystemExit(4)
"""


@pytest.fixture
def mpi(tmp_path):
    if shutil.which("mpirun") is None:
        pytest.skip("Open MPI is not installed here (no mpirun): scripts/install-deps installs it")
    agent = write_mpi_agent(tmp_path)
    (tmp_path / "hosts.txt").write_text("127.0.0.2\n127.0.0.3\n")
    (tmp_path / "dump.py").write_text(DUMP)

    def run(*args, env=None, started=False):
        full_env = dict(os.environ, OMPI_MCA_plm_rsh_agent=agent, **(env or {}))
        argv = [CADRE, "run", "--backend", "mpi", "--hostfile", "hosts.txt", "--store-host",
                "127.0.0.1", "-n", "2", "--compute", "cpux2", "--framework", "pytorch-horovod",
                *args]
        if started:
            return subprocess.Popen(argv, cwd=tmp_path, env=full_env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        proc = subprocess.run(argv, cwd=tmp_path, env=full_env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=120)
        return Job(proc, str(tmp_path))

    return run


def test_open_mpi_ranks_become_the_learner_contract(mpi):
    job = mpi("--", "python3", "dump.py")
    assert job.returncode == 0, job.stdout + job.stderr
    lines = sorted(l.split("] ", 1)[1] for l in job.stdout.splitlines() if "] contract" in l)
    assert lines == ["contract 1 0 learner-1 127.0.0.2", "contract 1 1 learner-1 127.0.0.2",
                     "contract 2 2 learner-2 127.0.0.3", "contract 2 3 learner-2 127.0.0.3"]
    assert job.status()["state"] == "completed"


def test_a_failed_mpi_learner_is_named(mpi):
    job = mpi("--", "sh", "-c", "FAIL_RANK=2 python3 dump.py && sleep 60")
    assert job.returncode == 1, job.stdout + job.stderr
    assert "learner-2 slot 0 exited with code 4" in job.stderr, job.stderr
    assert job.status()["state"] == "failed"


def test_a_slot_whose_task_was_killed_is_named(mpi):
    # The slot's `cadre task` (its keeper's parent) dies by SIGKILL and leaves no exit record.
    job = mpi("--", "sh", "-c", 'echo up; if [ "$CADRE_RANK" = 3 ]; then '
              'kill -9 $(ps -o ppid= -p $PPID); fi; sleep 60')
    assert job.returncode == 1, job.stdout + job.stderr
    assert "learner-2 slot 1 left no exit record" in job.stderr, job.stderr
    assert "last lines of " + os.path.join(job.job_dir, "mpirun.log") in job.stderr
    assert job.status()["state"] == "failed"


def test_ctrl_c_stops_mpirun_and_every_slot(mpi, tmp_path):
    proc = mpi("--", "sh", "-c", "echo up; sleep 120", started=True)
    job = interrupt_once_up(proc, str(tmp_path), slots=4, timeout=60)
    assert job.returncode == 130, job.stdout + job.stderr
    assert "cancelling job" in job.stderr
    assert job.status()["state"] == "stopped"
    # One Ctrl-C ended mpirun, its daemons (their command lines name the agent) and every slot
    # (their `cadre task` names the job directory): nothing is left on the nodes.
    left = subprocess.run(["pgrep", "-af", str(tmp_path)], stdout=subprocess.PIPE,
                          text=True).stdout
    assert left == "", left


def test_no_hostfile_is_refused(tmp_path):
    proc = subprocess.run([CADRE, "run", "--backend", "mpi", "--", "true"], cwd=tmp_path,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "needs --hostfile" in proc.stderr or "needs `mpirun`" in proc.stderr


@pytest.mark.parametrize("hosts,expected", [
    (None, "hosts.txt cannot be read"),
    ("127.0.0.2\n", "lists 1 hosts but the job has 2 learners"),
    ("127.0.0.2 slots=2\n127.0.0.2 slots=2\n",
     "line 2: host 127.0.0.2 is listed again (first on line 1)"),
])
def test_a_hostfile_that_cannot_serve_the_job_is_bad_usage(tmp_path, hosts, expected):
    # Like every other problem found before anything starts: exit code 2, and nothing started.
    if shutil.which("mpirun") is None:
        pytest.skip("Open MPI is not installed here (no mpirun): scripts/install-deps installs it")
    if hosts is not None:
        (tmp_path / "hosts.txt").write_text(hosts)
    proc = subprocess.run([CADRE, "run", "--backend", "mpi", "--hostfile", "hosts.txt", "-n", "2",
                           "--framework", "pytorch-horovod", "--", "true"], cwd=tmp_path,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr and "nothing was started" in proc.stderr, proc.stderr
    assert not (tmp_path / "runs").exists()


def test_arguments_that_are_not_utf8_reach_every_slot_byte_for_byte(mpi):
    # The plan the nodes read is JSON (UTF-8); the words after -- may be any bytes.
    word = b"d\xe9j\xe0-\xff"
    proc_args = ["--", "python3", "-c",
                 "import os, sys; print('arg', os.fsencode(sys.argv[1]).hex(), flush=True)",
                 os.fsdecode(word)]
    job = mpi(*proc_args)
    assert job.returncode == 0, job.stdout + job.stderr
    said = [l.split("] ", 1)[1] for l in job.stdout.splitlines() if "] arg" in l]
    assert said == ["arg " + word.hex()] * 4, job.stdout


def test_a_path_that_is_not_utf8_is_refused_before_anything_starts(mpi, tmp_path):
    job_dir = os.fsdecode(os.fsencode(str(tmp_path)) + b"/job-\xff")
    job = mpi("-o", job_dir, "--", "true")
    assert job.returncode == 2, job.stderr
    assert "--output-dir: '" in job.stderr and "\\xff' is not UTF-8 text" in job.stderr
    assert "nothing was started" in job.stderr
    assert not os.path.exists(job_dir)


def processes_left(tmp_path, timeout=60):
    """The processes naming tmp_path (the job's) still there after at most `timeout` s."""
    deadline = time.monotonic() + timeout
    left = "?"
    while left and time.monotonic() < deadline:
        left = subprocess.run(["pgrep", "-af", str(tmp_path)], stdout=subprocess.PIPE,
                              text=True).stdout
        time.sleep(0.5)
    return left


def test_a_killed_runner_leaves_nothing_running(mpi, tmp_path):
    # cadre run dies by SIGKILL: mpirun's keeper learns it (PR_SET_PDEATHSIG) and kills mpirun,
    # whose daemons end the slots; the slots' heartbeats would stop them too.
    proc = mpi("--heartbeat-timeout", "3", "--", "sh", "-c", "echo up; sleep 300", started=True)
    job = interrupt_once_up(proc, str(tmp_path), slots=4, timeout=60, interrupt=signal.SIGKILL)
    assert job.returncode == -signal.SIGKILL
    assert processes_left(tmp_path) == ""


def node_processes(tmp_path, host):
    """The processes of an emulated host: those whose environment names its session folder."""
    mark = os.fsencode(os.path.join(str(tmp_path), "node-" + host))
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def test_a_host_that_stops_answering_is_named_and_the_job_ends(mpi, tmp_path):
    # Every process of host 127.0.0.3 is stopped (SIGSTOP: a hung or cut-off host) while no
    # learner fails: mpirun would wait for it for ever. The slots' heartbeats name it; cadre run
    # ends the job and, as mpirun still waits for that host, kills mpirun 30 s later.
    proc = mpi("--heartbeat-timeout", "3", "--", "sh", "-c", "echo up; sleep 300", started=True)
    stopped = []

    def hang_host():
        stopped.extend(node_processes(tmp_path, "127.0.0.3"))
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)

    try:
        job = interrupt_once_up(proc, str(tmp_path), slots=4, timeout=120, while_up=hang_host,
                                interrupt=None)
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    assert stopped
    assert job.returncode == 1, job.stdout + job.stderr
    assert "ending the job: learner-2 (node 127.0.0.3) slots 0, 1: not heard from" in job.stderr
    assert job.status()["failure"].startswith("learner-2 (node 127.0.0.3) slots 0, 1")
    # Its slots ran (their heartbeats came): lost with their node, not "not-started".
    slots = {s["rank"]: s for learner in job.status()["learners"] for s in learner["slots"]}
    assert [(r, s["state"], s.get("node")) for r, s in slots.items() if r in (2, 3)] == \
        [(2, "lost", "127.0.0.3"), (3, "lost", "127.0.0.3")], slots
    assert not any(s["state"] == "not-started" for s in slots.values()), slots
    # Continued, the host's slots find cadre run gone and stop: nothing is left.
    assert processes_left(tmp_path) == ""
