"""The kubectl emulator (k8s/fake_kubectl.py) set up for one test: a `kubectl` on PATH that runs
it, its state in a temporary folder, and at the end any controller still running stopped by pid.
It is not a cluster; see the emulator's docstring and docs/backends.md for how it differs."""
import json
import os
import signal
import time

from runner_helpers import BUILD, ROOT

EMULATOR = os.path.join(ROOT, "tests", "k8s", "fake_kubectl.py")


class KubectlEmulator:
    def __init__(self, root):
        self.state = os.path.join(root, "k8s-state")
        self.bin = os.path.join(root, "k8s-bin")
        os.makedirs(self.bin)
        kubectl = os.path.join(self.bin, "kubectl")
        with open(kubectl, "w") as f:
            f.write(f'#!/bin/sh\nexec /usr/bin/python3 {EMULATOR} "$@"\n')
        os.chmod(kubectl, 0o755)
        # The "image": cadre from the build, Debian's python3 (with torch), cadre's package.
        self.env = dict(os.environ, FAKE_KUBECTL_STATE=self.state,
                        PATH=f"{self.bin}:{BUILD}:/usr/bin:/bin:/usr/sbin:/sbin",
                        PYTHONPATH=f"{BUILD}/python:{ROOT}/python")
        self.env.pop("CADRE_HOSTS_METHOD", None)

    def objects(self, ns="default"):
        """(kind, name) of the objects stored in `ns`."""
        root = os.path.join(self.state, ns, "objects")
        return sorted((kind, name[:-5]) for kind in os.listdir(root) if os.path.isdir(root)
                      for name in os.listdir(os.path.join(root, kind))) \
            if os.path.isdir(root) else []

    def pods(self, ns="default"):
        root = os.path.join(self.state, ns, "pods")
        return sorted(os.listdir(root)) if os.path.isdir(root) else []

    def controllers(self):
        """Pids of the StatefulSet controllers still running."""
        pids = []
        for ns in os.listdir(self.state) if os.path.isdir(self.state) else []:
            root = os.path.join(self.state, ns, "statefulsets")
            for name in os.listdir(root) if os.path.isdir(root) else []:
                try:
                    with open(os.path.join(root, name, "pid")) as f:
                        pids.append(int(f.read()))
                except (OSError, ValueError):
                    pass
        return pids

    def wait_gone(self, timeout=60):
        """Waits until no controller runs (every set's pods are gone); returns whether it did."""
        deadline = time.monotonic() + timeout
        while self.controllers() and time.monotonic() < deadline:
            time.sleep(0.1)
        return not self.controllers()

    def stop(self):
        # SIGTERM: a controller kills its pods' containers and exits; SIGKILL what remains.
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in self.controllers():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            if self.wait_gone(timeout=15):
                return


def read_objects_file(job_dir):
    import yaml
    with open(os.path.join(job_dir, "kubernetes", "objects.yaml")) as f:
        return {d["kind"]: d for d in yaml.safe_load_all(f) if d}


def learner_lines(stdout, marker):
    """The JSON after `marker` on each "[learner-K] marker {...}" line, with K."""
    out = []
    for line in stdout.splitlines():
        if line.startswith("[learner-") and f"] {marker} " in line:
            label, rest = line.split("] ", 1)
            out.append((int(label[len("[learner-"):]), json.loads(rest[len(marker) + 1:])))
    return out
