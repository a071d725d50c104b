"""Running a Python script as N ranks on this machine without a launcher — for tests and quick
experiments. It does what `cadre run` does for one learner: starts a TcpStoreServer, gives every
rank the learner contract (CADRE_RANK/SIZE/LOCAL_*/CROSS_*, CADRE_STORE, CADRE_JOB_TOKEN, the
HOROVOD_* aliases, PYTHONPATH), binds the ranks to CPUs as `cadre run` binds slots, and waits
for all of them, killing the rest when the deadline passes so that a hung collective cannot hang
the caller.
"""
import os
import secrets
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from cadre import _core


@dataclass
class RankResult:
    rank: int
    returncode: int
    stdout: str
    stderr: str


def _python_path():
    here = os.path.dirname(os.path.abspath(__file__))
    source_python = os.path.dirname(os.path.dirname(here))
    core_dir = os.path.dirname(os.path.dirname(os.path.abspath(_core.__file__)))
    parts = [core_dir, source_python, os.environ.get("PYTHONPATH", "")]
    return os.pathsep.join(p for p in parts if p)


def cpu_plan(slots, usable=None, bind=None):
    """The CPUs of each of `slots` ranks on this machine, as `cadre run` binds slots
    (src/cadre/launch/cpu_binding.h): equal contiguous shares of the usable CPUs when there are
    at least as many, else None (no binding). CADRE_CPU_BIND=none turns it off."""
    bind = os.environ.get("CADRE_CPU_BIND", "") if bind is None else bind
    if bind not in ("", "auto", "none"):
        raise ValueError('CADRE_CPU_BIND="%s": use auto or none' % bind)
    cpus = sorted(os.sched_getaffinity(0)) if usable is None else list(usable)
    if bind == "none" or slots < 1 or slots > len(cpus):
        return None
    return [cpus[i * len(cpus) // slots:(i + 1) * len(cpus) // slots] for i in range(slots)]


def run_ranks(args, size, env=None, timeout=120, python=None, hosts=1):
    """Runs `python args...` as `size` ranks spread over `hosts` pretend hosts (rank-major).
    Returns one RankResult per rank. Ranks still running at `timeout` are killed (returncode
    -9) and reported."""
    token = secrets.token_hex(16)
    server = _core.TcpStoreServer("127.0.0.1", 0, token)
    per_host = (size + hosts - 1) // hosts
    cpus = cpu_plan(size, bind=(env or {}).get("CADRE_CPU_BIND"))
    procs = []
    for rank in range(size):
        host, local = divmod(rank, per_host)
        local_size = min(per_host, size - host * per_host)
        e = dict(os.environ)
        e.update({
            "CADRE_RANK": str(rank), "CADRE_SIZE": str(size),
            "CADRE_LOCAL_RANK": str(local), "CADRE_LOCAL_SIZE": str(local_size),
            "CADRE_CROSS_RANK": str(host), "CADRE_CROSS_SIZE": str(hosts),
            "CADRE_STORE": server.address, "CADRE_JOB_TOKEN": token,
            "CADRE_HOST": "localhost-%d" % host,
            "HOROVOD_RANK": str(rank), "HOROVOD_SIZE": str(size),
            "HOROVOD_LOCAL_RANK": str(local), "HOROVOD_LOCAL_SIZE": str(local_size),
            "HOROVOD_CROSS_RANK": str(host), "HOROVOD_CROSS_SIZE": str(hosts),
            "PYTHONPATH": _python_path(),
            "OMP_NUM_THREADS": "1",
        })
        if hosts > 1:
            # The pretend host names do not resolve: every rank listens on loopback.
            e["CADRE_BIND_ADDRESS"] = "127.0.0.1"
        e.update(env or {})
        # Output goes to files, not pipes: a rank blocked on a full pipe that nobody reads yet
        # (we wait for the ranks in order) could hold up the collective the others wait in.
        out_file = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
        err_file = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
        bind = (lambda c=cpus[rank]: os.sched_setaffinity(0, c)) if cpus else None
        procs.append((subprocess.Popen([python or sys.executable] + list(args), env=e,
                                       stdout=out_file, stderr=err_file, preexec_fn=bind),
                      out_file, err_file))
    deadline = time.monotonic() + timeout
    results = []
    killed = set()
    for rank, (p, out_file, err_file) in enumerate(procs):
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for k, (q, _, _) in enumerate(procs):
                if q.poll() is None:
                    q.kill()
                    killed.add(k)
            p.wait()
        note = ("\n[cadre.torch.testing: rank %d killed after %ss]" % (rank, timeout)
                if rank in killed else "")
        out_file.seek(0)
        err_file.seek(0)
        results.append(RankResult(rank, p.returncode, out_file.read(), err_file.read() + note))
        out_file.close()
        err_file.close()
    del server
    return results
