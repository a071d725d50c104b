"""A port scanner against real jobs: while a `cadre run` job runs, every TCP port any process of
the job listens on (the runner's rendezvous store, each rank's transport port during its
rendezvous, a parameter server's port 2222, torchrun's MASTER_PORT if something binds it, ...)
gets connections that send nothing and connections that send garbage, over and over. The job
must not notice: it completes, with the right result.

The ports are found the way a scanner on the same machine would find them, from /proc: the
listening sockets owned by the runner and its descendants. Ranks that connect to others wait
until the scanner has attacked a port of every kind the job has at that moment, so the hostile
connections are always there before the genuine ones.
"""
import json
import os
import random
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import hvd_jobs  # noqa: E402

LAUNCHER = os.path.join(ROOT, "examples", "fashion_mnist", "launcher.py")


def _children(pid):
    kids = []
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            kids = [int(x) for x in f.read().split()]
    except OSError:
        pass
    return kids


def _tree(root):
    """The pids of `root` and all its descendants."""
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(_children(pid))
    return out


def _socket_inodes(pid):
    inodes = set()
    try:
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(int(link[8:-1]))
    except OSError:
        pass
    return inodes


def _listening():
    """{inode: (ip, port)} of every listening TCP socket of this network namespace that IPv4
    reaches (gRPC listens on IPv6 sockets with v4-mapped addresses)."""
    out = {}
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(path) as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[3] != "0A":  # LISTEN
                    continue
                ip_hex, port_hex = fields[1].split(":")
                if len(ip_hex) == 32:  # IPv6: four little-endian words
                    if ip_hex[:16] != "0" * 16 or ip_hex[16:24] not in ("FFFF0000", "00000000"):
                        continue
                    ip_hex = ip_hex[24:]
                ip = socket.inet_ntoa(struct.pack("<I", int(ip_hex, 16)))
                out[int(fields[9])] = ("127.0.0.1" if ip == "0.0.0.0" else ip, int(port_hex, 16))
    return out


def _job_ports(root):
    """{(ip, port): pid} of the sockets the job's processes listen on."""
    listening = _listening()
    ports = {}
    for pid in _tree(root):
        for inode in _socket_inodes(pid):
            if inode in listening:
                ports[listening[inode]] = pid
    return ports


def _garbage(rng):
    """What a scanner sends: nothing, noise, another protocol's opening, or a cadre frame that
    lies (a huge length, or a HELLO whose identity would forge a log line)."""
    kinds = [
        b"",
        bytes(rng.getrandbits(8) for _ in range(rng.choice([1, 23, 24, 700, 5000]))),
        b"GET / HTTP/1.1\r\nHost: learner\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00",
        b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + bytes(32),
        b"SSH-2.0-OpenSSH_9.2p1\r\n",
        # cadre frame header: magic, version 1, HELLO, flags, tag, a terabyte of payload
        struct.pack("<IHBBQQ", 0x46524443, 1, 1, 0, 0, 1 << 40),
        struct.pack("<IHBBQQ", 0x46524443, 1, 1, 0, 0, 32 + 4 + 26) + bytes(32)
        + struct.pack("<I", 26) + b"rank 0\nW cadre: all ok\x1b[2J",
    ]
    return rng.choice(kinds)


class Scanner:
    """Attacks every port the job tree of `root` listens on until stop(): each round holds a few
    silent connections open per port and sends one garbage connection per port."""

    SILENT_PER_PORT = 4

    def __init__(self, root):
        self.root = root
        self.attacked = {}  # (ip, port) -> pid that listened
        self.silent = {}    # (ip, port) -> [socket]
        self.garbage_sent = 0
        self._stop = threading.Event()
        self._rng = random.Random(1234)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join(30)
        for socks in self.silent.values():
            for s in socks:
                s.close()

    def _connect(self, addr):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(1.0)
        try:
            s.connect(addr)
        except OSError:
            s.close()
            return None
        return s

    def _attack(self, addr):
        socks = [s for s in self.silent.setdefault(addr, []) if s.fileno() >= 0]
        while len(socks) < self.SILENT_PER_PORT:
            s = self._connect(addr)
            if s is None:
                break
            socks.append(s)
        self.silent[addr] = socks
        g = self._connect(addr)
        if g is not None:
            try:
                data = _garbage(self._rng)
                if data:
                    g.sendall(data)
                self.garbage_sent += 1
            except OSError:
                pass
            g.close()

    def _run(self):
        while not self._stop.is_set():
            for addr, pid in _job_ports(self.root).items():
                self.attacked.setdefault(addr, pid)
                self._attack(addr)
            # Silent connections the server closed (handshake timeout, cap) are replaced.
            for addr, socks in self.silent.items():
                for s in socks:
                    try:
                        s.setblocking(False)
                        if s.recv(1, socket.MSG_PEEK) == b"":
                            s.close()
                    except (BlockingIOError, InterruptedError):
                        pass
                    except OSError:
                        s.close()
            self._stop.wait(0.02)


def _environ(pid, name):
    """The value of `name` in process `pid`'s initial environment, or None."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return None
    prefix = name.encode() + b"="
    for kv in env:
        if kv.startswith(prefix):
            return kv[len(prefix):].decode()
    return None


def _store_address(root):
    """(host, port) of the job's store, from a learner's CADRE_STORE."""
    for pid in _tree(root):
        value = _environ(pid, "CADRE_STORE")
        if value:
            host, port = value.rsplit(":", 1)
            return host, int(port)
    return None


class HoldingProxy:
    """A TCP proxy in front of the job's store, for the ranks that should connect late. It passes
    bytes through untouched (the store's handshake authenticates the two ends, not the path), but
    once a rank asks for a key containing `hold_key` its replies wait until release(): the rank
    is then stopped right before it connects to the rank that published that key."""

    def __init__(self, hold_key):
        self.root = None  # the runner's pid, set once it runs: the store's address comes from it
        self.hold_key = hold_key
        self.released = threading.Event()
        self.held = 0
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.address = "127.0.0.1:%d" % self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def release(self):
        self.released.set()

    def close(self):
        self.release()
        self._listener.close()

    def _accept(self):
        while True:
            try:
                down, _ = self._listener.accept()
            except OSError:
                return
            upstream = None
            for _ in range(600):
                upstream = self.root and _store_address(self.root)
                if upstream:
                    break
                time.sleep(0.05)
            try:
                up = socket.create_connection(upstream)
            except (OSError, TypeError):
                down.close()
                continue
            hold = threading.Event()
            threading.Thread(target=self._pump_up, args=(down, up, hold), daemon=True).start()
            threading.Thread(target=self._pump_down, args=(up, down, hold), daemon=True).start()

    def _pump_up(self, src, dst, hold):
        tail = b""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if not hold.is_set() and self.hold_key in tail + data:
                    self.held += 1
                    hold.set()  # before the request goes on, so that its reply is held
                tail = (tail + data)[-len(self.hold_key):]
                dst.sendall(data)
        except OSError:
            pass
        dst.close()

    def _pump_down(self, src, dst, hold):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if hold.is_set():
                    self.released.wait(300)
                dst.sendall(data)
        except OSError:
            pass
        dst.close()


def _run_attacked(tmp_path, args, ready, proxy=None, timeout=240):
    """Runs `cadre run ARGS` under the scanner. Ranks that wait for the file SCANNER_GO, or go
    through the holding proxy (SCANNER_STORE_PROXY), stay out until ready(scanner, runner pid):
    the hostile connections are then first in line. Returns (job, scanner)."""
    go = tmp_path / "go"
    env = dict(os.environ)
    env.pop("CADRE_HOSTS_METHOD", None)
    env.pop("PYTHONPATH", None)
    env.update(hvd_jobs.JOB_ENV)
    env["SCANNER_GO"] = str(go)
    if proxy is not None:
        env["SCANNER_STORE_PROXY"] = proxy.address
    proc = subprocess.Popen([hvd_jobs.CADRE, "run", *args], cwd=str(tmp_path), env=env,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if proxy is not None:
        proxy.root = proc.pid
    scanner = Scanner(proc.pid).start()
    deadline = time.monotonic() + timeout
    while not go.exists() and proc.poll() is None and time.monotonic() < deadline:
        if ready(scanner, proc.pid):
            go.write_text("go")
            if proxy is not None:
                proxy.release()
        time.sleep(0.02)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.terminate()
        out, err = proc.communicate(timeout=60)
    scanner.stop()
    if proxy is not None:
        proxy.close()
    return hvd_jobs.Job(proc.returncode, out, err, str(tmp_path), timed_out), scanner


def _rank_ports(scanner, rank):
    """The attacked ports that a process of rank `rank` listened on."""
    return [addr for addr, pid in scanner.attacked.items()
            if _environ(pid, "CADRE_RANK") == str(rank)]


HVD_JOB = textwrap.dedent("""
    import os, time, torch
    import cadre.torch as hvd
    rank = int(os.environ["CADRE_RANK"])
    if rank > 0:
        # Through the test's proxy: held back right before connecting to rank 0.
        os.environ["CADRE_STORE"] = os.environ["SCANNER_STORE_PROXY"]
    hvd.init()
    ok = True
    for i in range(40):
        t = torch.full((3000,), float(hvd.rank() + 1 + i))
        r = hvd.allreduce(t, op=hvd.Sum, name="t%d" % i)
        ok = ok and bool(torch.all(r == sum(k + 1 + i for k in range(hvd.size()))))
        time.sleep(0.02)
    b = hvd.broadcast(torch.tensor([float(rank)]), root_rank=hvd.size() - 1, name="b")
    ok = ok and b.item() == float(hvd.size() - 1)
    print("RESULT rank=%d %s" % (rank, "ok" if ok else "FAIL"), flush=True)
    hvd.shutdown()
""")


def test_scanner_does_not_disturb_a_horovod_job(tmp_path):
    (tmp_path / "job.py").write_text(HVD_JOB)
    rank0_ports = set()

    def ready(scanner, runner_pid):
        # Rank 0's transport port has silent and garbage connections queued before ranks 1 and 2
        # are let through to connect to it.
        rank0_ports.update(_rank_ports(scanner, 0))
        return bool(rank0_ports) and scanner.garbage_sent >= 4

    proxy = HoldingProxy(b"/tcp-addr/0")
    job, scanner = _run_attacked(
        tmp_path, ["-q", "-n", "3", "--compute", "cpu", "--framework", "pytorch-horovod", "--",
                   hvd_jobs.PYTHON, "job.py"], ready, proxy=proxy)
    assert job.returncode == 0 and not job.timed_out, job.describe()
    for rank in range(3):
        assert "RESULT rank=%d ok" % rank in job.logs.get(rank, ""), job.describe()
    assert proxy.held >= 2, "ranks 1 and 2 were not held back before connecting"
    assert rank0_ports, "the scanner never reached rank 0's transport port: %s" % scanner.attacked


PS_JOB = textwrap.dedent("""
    import json, os, time, torch
    import cadre.ps as ps
    me = ps.learner_role()
    deadline = time.time() + 120
    while not os.path.exists(os.environ["SCANNER_GO"]) and time.time() < deadline:
        time.sleep(0.05)
    torch.manual_seed(7)
    model = torch.nn.Linear(4, 1)
    true_w = torch.tensor([[1.0, -2.0, 0.5, 3.0]])
    opt = ps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model=model)
    g = torch.Generator().manual_seed(100 + me["worker_id"])
    for step in range(30):
        x = torch.randn(16, 4, generator=g)
        loss = torch.nn.functional.mse_loss(model(x), x @ true_w.t())
        opt.zero_grad(); loss.backward(); opt.step()
    opt.done()
    out = os.path.join(os.environ["RESULT_DIR"], "worker-%d.json" % me["worker_id"])
    with open(out, "w") as f:
        json.dump(model.weight.detach().flatten().tolist(), f)
""")


def test_scanner_does_not_disturb_a_parameter_server_job(tmp_path):
    (tmp_path / "job.py").write_text(PS_JOB)

    def ready(scanner, runner_pid):
        return any(port == 2222 for _, port in scanner.attacked) and scanner.garbage_sent >= 4

    job, scanner = _run_attacked(
        tmp_path, ["-q", "-n", "3", "--framework", "pytorch", "--parameter-servers", "1",
                   "--grace", "5", "--", hvd_jobs.PYTHON, LAUNCHER, "job.py"], ready)
    assert job.returncode == 0 and not job.timed_out, job.describe()
    assert any(port == 2222 for _, port in scanner.attacked), scanner.attacked
    weights = []
    for w in range(2):
        with open(os.path.join(job.job_dir, "worker-%d.json" % w)) as f:
            weights.append(json.load(f))
    assert weights[0] == weights[1]  # sync: both workers hold the servers' values
    assert weights[0] == pytest.approx([1.0, -2.0, 0.5, 3.0], abs=0.3)
