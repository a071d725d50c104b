"""A real Slurm cluster on this machine, for the tests of `cadre run --backend slurm`.

Debian's slurm-wlm (22.05) and munge, run as root: its own munged (own key, socket, pid and log
files), one slurmctld on 127.0.0.1 and one slurmd per node (`slurmd -N nodeK`, NodeAddr
127.0.0.K+1, a port each), no accounting, everything under one temporary folder. Daemons run in
the foreground as children of the test process and are stopped by pid at the end.
"""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "scontrol", "scancel", "sinfo")


def missing_programs():
    """The Slurm/munge programs this machine lacks (daemons are often in /usr/sbin)."""
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return [p for p in DAEMONS + CLIENTS if shutil.which(p, path=path) is None]


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class SlurmCluster:
    """start() brings the cluster up (bounded waits); stop() stops every daemon by pid."""

    def __init__(self, nodes=2, cpus=4):
        self.nodes = [f"node{k}" for k in range(1, nodes + 1)]
        self.cpus = cpus
        self.dir = tempfile.mkdtemp(prefix="cadre-slurm-")
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.procs = []
        path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
        self.env = dict(os.environ, SLURM_CONF=self.conf, PATH=path)

    def _path(self, *parts):
        return os.path.join(self.dir, *parts)

    def _daemon(self, name, argv):
        log = open(self._path("log", name + ".out"), "w")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                start_new_session=True)
        log.close()
        self.procs.append((name, proc))
        return proc

    def _write_conf(self):
        ctld_port, *node_ports = free_ports(1 + len(self.nodes))
        host = socket.gethostname().split(".")[0]
        lines = [
            "ClusterName=cadretest",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self._path('munge.sock')}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={self._path('state')}",
            f"SlurmdSpoolDir={self._path('spool', '%n')}",
            f"SlurmctldPidFile={self._path('slurmctld.pid')}",
            f"SlurmdPidFile={self._path('slurmd-%n.pid')}",
            f"SlurmctldLogFile={self._path('log', 'slurmctld.log')}",
            f"SlurmdLogFile={self._path('log', 'slurmd-%n.log')}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SwitchType=switch/none",
            "MpiDefault=none",
            "ReturnToService=2",
            # The nodes share this machine's cores: take the configured CPUs at their word.
            "SlurmdParameters=config_overrides",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "MinJobAge=600",
            "KillWait=5",
            "GresTypes=gpu",
        ]
        for k, (node, port) in enumerate(zip(self.nodes, node_ports), start=1):
            lines.append(f"NodeName={node} NodeAddr=127.0.0.{k + 1} Port={port} "
                         f"CPUs={self.cpus} State=UNKNOWN")
        lines.append(f"PartitionName=debug Nodes={','.join(self.nodes)} Default=YES "
                     "MaxTime=INFINITE State=UP")
        # Jobs queue in a partition that is down and never start (--queue-timeout tests).
        lines.append(f"PartitionName=closed Nodes={','.join(self.nodes)} State=DOWN")
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")

    def start(self, timeout=60):
        for sub in ["state", "log"] + [os.path.join("spool", n) for n in self.nodes]:
            os.makedirs(self._path(sub), exist_ok=True)
        with open(self._path("munge.key"), "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(self._path("munge.key"), 0o400)
        self._write_conf()
        self._daemon("munged", ["munged", "-F", "--force",
                                f"--key-file={self._path('munge.key')}",
                                f"--socket={self._path('munge.sock')}",
                                f"--pid-file={self._path('munged.pid')}",
                                f"--log-file={self._path('log', 'munged.log')}",
                                f"--seed-file={self._path('munged.seed')}"])
        self._wait(lambda: os.path.exists(self._path("munge.sock")), timeout, "munged's socket")
        self._daemon("slurmctld", ["slurmctld", "-D", "-i", "-f", self.conf])
        for node in self.nodes:
            self._daemon("slurmd-" + node, ["slurmd", "-D", "-N", node, "-f", self.conf])
        self._wait(self._all_idle, timeout, "every node idle in sinfo")
        return self

    def _all_idle(self):
        r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], env=self.env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=30)
        states = dict(line.split() for line in r.stdout.splitlines() if len(line.split()) == 2)
        return all(states.get(n) == "idle" for n in self.nodes)

    def _wait(self, ready, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode} while waiting for "
                                       f"{what}:\n{self.logs()}")
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"no {what} after {timeout} s:\n{self.logs()}")

    def logs(self):
        out = []
        for name in sorted(os.listdir(self._path("log"))):
            with open(self._path("log", name), errors="replace") as f:
                out.append(f"--- {name}\n" + "".join(f.readlines()[-20:]))
        return "\n".join(out)

    def job_state(self, job_id):
        r = subprocess.run(["scontrol", "show", "job", "-o", str(job_id)], env=self.env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=30)
        for word in r.stdout.split():
            if word.startswith("JobState="):
                return word.split("=", 1)[1]
        return None

    def _pids(self, holds):
        """Processes for which holds(pid) is true (those that vanish meanwhile are skipped)."""
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if holds(pid):
                    found.append(int(pid))
            except OSError:
                pass
        return found

    def _logs_open(self, pid, log="log"):
        """Whether the process has a file of this cluster's `log` folder (a name in it) open:
        slurmd and the slurmstepd it starts write their node's log."""
        folder = self._path(log)
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(folder):
                    return True
            except OSError:
                pass
        return False

    def _kill(self, pids):
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def kill_node(self, node):
        """A node lost at once, as in a power cut: SIGKILL to its slurmd, its job steps'
        slurmstepd and the tasks under them (which name the node in SLURMD_NODENAME)."""
        def on_node(pid):
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
            # Other clusters on this machine have a node of that name too.
            if f"SLURMD_NODENAME={node}".encode() in env and \
                    f"SLURM_CONF={self.conf}".encode() in env:
                return True
            return self._logs_open(pid, os.path.join("log", f"slurmd-{node}.log"))
        self._kill(self._pids(on_node))
        for name, proc in self.procs:
            if name == "slurmd-" + node:
                proc.wait(timeout=15)

    def restart_node(self, node, timeout=120):
        """Starts a killed node's slurmd again and waits until Slurm has every node idle."""
        self.procs = [(n, p) for n, p in self.procs if n != "slurmd-" + node]
        self._daemon("slurmd-" + node, ["slurmd", "-D", "-N", node, "-f", self.conf])
        self._wait(self._all_idle, timeout, "every node idle in sinfo")

    def kill_controller(self):
        """slurmctld lost at once (SIGKILL); the nodes and their jobs' steps run on."""
        for name, proc in self.procs:
            if name == "slurmctld":
                proc.kill()
                proc.wait(timeout=15)
        self.procs = [(n, p) for n, p in self.procs if n != "slurmctld"]

    def resume(self, node, timeout=60):
        """Brings a node that a test set down back into service (it may be back already)."""
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], env=self.env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
        self._wait(self._all_idle, timeout, "every node idle in sinfo")

    def stop(self):
        # slurmds first (they end their jobs' steps), then the controller, then munge.
        for name, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name, proc in reversed(self.procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)
        self.procs = []
        # A step whose node was set down or lost can leave its slurmstepd behind, holding its
        # node's log: no process of this cluster outlives it.
        self._kill(self._pids(self._logs_open))
        shutil.rmtree(self.dir, ignore_errors=True)
