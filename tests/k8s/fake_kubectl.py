"""A kubectl emulator for the tests of `cadre run --backend kubernetes`: no cluster can be reached
from the test machines. It is not Kubernetes. It keeps objects as JSON files under
$FAKE_KUBECTL_STATE and implements only what cadre uses:

  kubectl [-n NS] create|apply -f FILE          store the objects; a StatefulSet gets a controller
  kubectl [-n NS] get pods -l K=V -o json       the pods as a v1 List
  kubectl [-n NS] logs POD [-c C] [-f|--previous] [--since-time=T: ignored, the whole log]
  kubectl [-n NS] delete -f FILE [--ignore-not-found] [--wait=false] [--grace-period=N] [--force]
  kubectl [-n NS] delete pod NAME               one pod; its StatefulSet makes a new one (new uid)

A StatefulSet's controller (this file, run detached) runs each pod's container as local processes:
the container's command with its env (fieldRef metadata.name, HOSTNAME), in its own mount, PID and
UTS namespaces (as root), so that, as in a container, the command is PID 1, the host name is the
pod's name, the pod's hosts file (every pod `<set>-K` of the set at its own loopback address
127.A.B.K) is /etc/hosts, and the whole container dies with PID 1. Volumes (ConfigMap, Secret,
emptyDir) are folders of the pod's; since there is no container file system, arguments of the
command that point into a volume's mountPath are rewritten to its folder. An exited container is
restarted (StatefulSet semantics), its state as the kubelet reports it (terminated, then running
again with lastState and restartCount). Pods that ask for more nvidia.com/gpu than
$FAKE_KUBECTL_GPUS (default 0) stay Pending, Unschedulable. $FAKE_KUBECTL_NO_CLUSTER=1 answers
every call as kubectl does when no API server is reachable; $FAKE_KUBECTL_NO_ORDINALS=1 ignores
ordinals.start as clusters before 1.27 do; $FAKE_KUBECTL_STREAMS_END_AFTER=S ends `logs -f`
streams after S seconds although their containers run. Differences from a cluster that the
tests do not care about: one node (this machine), one network namespace per StatefulSet (its
pods' addresses all on its loopback device; nothing of the machine's network), no scheduling beyond the GPU count, no probes, no events, the
image is this machine (its programs and the working directory of `kubectl create`).
"""
import base64
import json
import os
import signal
import subprocess
import sys
import time
import uuid

import yaml

STATE = os.environ.get("FAKE_KUBECTL_STATE", "/tmp/fake-kubectl")
NO_CLUSTER = ("The connection to the server localhost:8080 was refused - did you specify the right "
              "host or port?")
PLURAL = {"Secret": "secrets", "ConfigMap": "configmaps", "Service": "services",
          "StatefulSet": "statefulsets.apps"}


def now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def fail(message, code=1):
    print(message, file=sys.stderr)
    sys.exit(code)


def write_json(path, value):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(value, f)
    os.replace(tmp, path)


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def object_path(ns, kind, name):
    return os.path.join(STATE, ns, "objects", kind, name + ".json")


def set_dir(ns, name):
    return os.path.join(STATE, ns, "statefulsets", name)


def pod_dir(ns, pod):
    return os.path.join(STATE, ns, "pods", pod)


def load_docs(path):
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    for d in docs:
        if not d.get("kind") or not d.get("metadata", {}).get("name"):
            fail(f'error: error validating "{path}": kind and metadata.name are required')
    return docs


# ---- verbs ----

def create(ns, args, replace_ok):
    path = args[args.index("-f") + 1]
    errors = []
    for doc in load_docs(path):
        kind, name = doc["kind"], doc["metadata"]["name"]
        target = object_path(ns, kind, name)
        if os.path.exists(target) and not replace_ok:
            errors.append(f'Error from server (AlreadyExists): error when creating "{path}": '
                          f'{PLURAL.get(kind, kind.lower())} "{name}" already exists')
            continue
        doc["metadata"].update(namespace=ns, uid=str(uuid.uuid4()), creationTimestamp=now())
        write_json(target, doc)
        print(f"{kind.lower()}/{name} {'configured' if replace_ok else 'created'}")
        if kind == "StatefulSet" and not os.path.exists(os.path.join(set_dir(ns, name), "pid")):
            start_controller(ns, name)
    if errors:
        fail("\n".join(errors))


def start_controller(ns, name):
    d = set_dir(ns, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "controller.log"), "ab") as log:
        # In a network namespace of its own, which its pods share: as on a cluster, where each
        # pod has its own, learner 1's store port (29400, on every address) is the set's alone;
        # in the machine's namespace two emulated jobs at once (tests run side by side) took it
        # from each other. unshare execs the controller: its pid is the controller's.
        proc = subprocess.Popen(["unshare", "--net", "--", sys.executable,
                                 os.path.abspath(__file__), "__controller", ns, name,
                                 os.getcwd()], stdin=subprocess.DEVNULL, stdout=log,
                                stderr=log, start_new_session=True)
    with open(os.path.join(d, "pid"), "w") as f:
        f.write(str(proc.pid))


def matches(labels, selector):
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


def get_pods(ns, args):
    selector = args[args.index("-l") + 1] if "-l" in args else ""
    if "-o" not in args or args[args.index("-o") + 1] != "json":
        fail("error: the emulator prints -o json only")
    items = []
    pods = os.path.join(STATE, ns, "pods")
    for pod in sorted(os.listdir(pods)) if os.path.isdir(pods) else []:
        obj = read_json(os.path.join(pods, pod, "pod.json"))
        if obj and matches(obj["metadata"].get("labels", {}), selector):
            items.append(obj)
    print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items,
                      "metadata": {"resourceVersion": ""}}, indent=2))


def logs(ns, args):
    words = [a for i, a in enumerate(args) if i > 0 and not a.startswith("-")
             and args[i - 1] != "-c"]
    pod = words[0]
    obj = read_json(os.path.join(pod_dir(ns, pod), "pod.json"))
    if obj is None:
        fail(f'Error from server (NotFound): pods "{pod}" not found')
    status = obj["status"].get("containerStatuses", [{}])[0]
    if "--previous" in args:
        last = status.get("lastState", {}).get("terminated")
        if not last:
            fail(f'Error from server (BadRequest): previous terminated container "learner" in '
                 f'pod "{pod}" not found')
        container = last["containerID"]
    elif "running" in status.get("state", {}) or "terminated" in status.get("state", {}):
        container = status["containerID"]
    else:
        reason = status.get("state", {}).get("waiting", {}).get("reason", "ContainerCreating")
        fail(f'Error from server (BadRequest): container "learner" in pod "{pod}" is waiting '
             f'to start: {reason}')
    path = os.path.join(pod_dir(ns, pod), "logs", container.split("//")[1] + ".log")
    follow = "-f" in args or "--follow" in args
    # A stream that ends while its container runs (an API server restart, log rotation).
    cut = float(os.environ.get("FAKE_KUBECTL_STREAMS_END_AFTER", "inf"))
    started = time.monotonic()
    if not os.path.exists(path):
        fail(f'Error from server (NotFound): pods "{pod}" not found')
    with open(path, "rb") as f:
        while True:
            chunk = f.read()
            if chunk:
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
                continue
            if time.monotonic() - started > cut:
                return
            if not follow or not container_running(ns, pod, container):
                sys.stdout.buffer.write(f.read())
                return
            time.sleep(0.1)


def container_running(ns, pod, container):
    obj = read_json(os.path.join(pod_dir(ns, pod), "pod.json"))
    if obj is None:
        return False
    status = obj["status"].get("containerStatuses", [{}])[0]
    return status.get("containerID") == container and "running" in status.get("state", {})


def delete(ns, args):
    if args[1:2] == ["pods"]:
        return delete_pods(ns, args)
    if args[1:2] == ["pod"]:
        return delete_pod(ns, args[2])
    path = args[args.index("-f") + 1]
    grace = None
    for a in args:
        if a.startswith("--grace-period="):
            grace = int(a.split("=", 1)[1])
    if "--force" in args:
        grace = 0
    errors, waits = [], []
    for doc in load_docs(path):
        kind, name = doc["kind"], doc["metadata"]["name"]
        target = object_path(ns, kind, name)
        if not os.path.exists(target):
            if "--ignore-not-found" not in args:
                errors.append(f'Error from server (NotFound): error when deleting "{path}": '
                              f'{PLURAL.get(kind, kind.lower())} "{name}" not found')
            continue
        if kind == "StatefulSet":
            write_json(os.path.join(set_dir(ns, name), "delete.json"), {"grace": grace})
            waits.append(os.path.join(set_dir(ns, name), "pid"))
        os.remove(target)
        print(f'{kind.lower()} "{name}" deleted')
    while "--wait=false" not in args and any(os.path.exists(w) for w in waits):
        time.sleep(0.1)
    if errors:
        fail("\n".join(errors))


def delete_pods(ns, args):
    """Only the form cadre uses: a second stop, pods of deleted sets killed without grace."""
    if "--force" not in args or "-l" not in args:
        fail("error: the emulator deletes pods with -l SELECTOR --force only")
    selector = args[args.index("-l") + 1]
    pods = os.path.join(STATE, ns, "pods")
    for pod in sorted(os.listdir(pods)) if os.path.isdir(pods) else []:
        obj = read_json(os.path.join(pods, pod, "pod.json"))
        if obj and matches(obj["metadata"].get("labels", {}), selector):
            owner = obj["metadata"]["ownerReferences"][0]["name"]
            with open(os.path.join(set_dir(ns, owner), "force"), "w"):
                pass
            print(f'pod "{pod}" force deleted')


def delete_pod(ns, pod):
    """A user's `kubectl delete pod`: the pod's controller stops it and makes it anew."""
    obj = read_json(os.path.join(STATE, ns, "pods", pod, "pod.json"))
    if obj is None:
        fail(f'Error from server (NotFound): pods "{pod}" not found')
    owner = obj["metadata"]["ownerReferences"][0]["name"]
    with open(os.path.join(set_dir(ns, owner), "replace-" + pod), "w"):
        pass
    print(f'pod "{pod}" deleted')


# ---- the StatefulSet controller ----

class Pod:
    def __init__(self, ns, sts, ordinal, address, hosts, workdir):
        self.ns, self.ordinal, self.workdir = ns, ordinal, workdir
        self.name = f"{sts['metadata']['name']}-{ordinal}"
        self.dir = pod_dir(ns, self.name)
        self.template = sts["spec"]["template"]
        self.container = self.template["spec"]["containers"][0]
        self.proc = None
        self.restart_at = 0
        self.status = {"phase": "Pending", "podIP": address, "hostIP": "127.0.0.1"}
        self.meta = {"name": self.name, "namespace": ns, "uid": str(uuid.uuid4()),
                     "labels": dict(self.template["metadata"].get("labels", {}),
                                    **{"apps.kubernetes.io/pod-index": str(ordinal),
                                       "statefulset.kubernetes.io/pod-name": self.name}),
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                                          "name": sts["metadata"]["name"]}],
                     "creationTimestamp": now()}
        os.makedirs(os.path.join(self.dir, "logs"), exist_ok=True)
        self.hosts = hosts
        gpus = int(self.container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
        if gpus > int(os.environ.get("FAKE_KUBECTL_GPUS", "0")):
            self.status["conditions"] = [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."}]
        self.save()

    def save(self):
        write_json(os.path.join(self.dir, "pod.json"),
                   {"apiVersion": "v1", "kind": "Pod", "metadata": self.meta,
                    "spec": self.template["spec"], "status": self.status})

    def volumes(self):
        """The pod's volumes as folders; None while an object they need is missing."""
        folders = {}
        for v in self.template["spec"].get("volumes", []):
            path = os.path.join(self.dir, "volumes", v["name"])
            os.makedirs(path, exist_ok=True)
            source = v.get("configMap") or v.get("secret")
            if source is not None:
                kind = "ConfigMap" if "configMap" in v else "Secret"
                obj = read_json(object_path(self.ns, kind, source.get("name")
                                            or source.get("secretName")))
                if obj is None:
                    return None
                files = dict(obj.get("data", {}))
                if kind == "Secret":
                    files = {k: base64.b64decode(x).decode() for k, x in files.items()}
                    files.update(obj.get("stringData", {}))
                for key, text in files.items():
                    with open(os.path.join(path, key), "w") as f:
                        f.write(text)
                    os.chmod(os.path.join(path, key), source.get("defaultMode", 0o644))
            folders[v["name"]] = path
        return folders

    def start(self):
        if "conditions" in self.status:  # unschedulable
            return
        folders = self.volumes()
        if folders is None:
            self.status["containerStatuses"] = [{"name": "learner", "ready": False,
                                                 "restartCount": 0, "state": {"waiting": {
                                                     "reason": "ContainerCreating"}}}]
            return self.save()
        mounts = [(m["mountPath"], folders[m["name"]])
                  for m in self.container.get("volumeMounts", [])]

        def local(arg):
            for path, folder in mounts:
                if arg == path or arg.startswith(path + "/"):
                    return folder + arg[len(path):]
            return arg

        env = dict(os.environ, HOSTNAME=self.name)
        for e in self.container.get("env", []):
            if "value" in e:
                env[e["name"]] = e["value"]
            else:
                field = e["valueFrom"]["fieldRef"]["fieldPath"]
                env[e["name"]] = {"metadata.name": self.name, "metadata.namespace": self.ns,
                                  "status.podIP": self.status["podIP"]}[field]
        command = [local(a) for a in self.container["command"] + self.container.get("args", [])]
        cid = uuid.uuid4().hex
        log = open(os.path.join(self.dir, "logs", cid + ".log"), "ab")
        # The container: PID 1 of its own PID namespace (all of it dies with it), its own host
        # name, the pod's hosts file as /etc/hosts.
        self.proc = subprocess.Popen(
            ["unshare", "--mount", "--uts", "--pid", "--kill-child", "--", "/bin/sh", "-c",
             'mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@"', self.hosts,
             self.name, *command],
            env=env, cwd=local(self.container.get("workingDir", self.workdir)),
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
        log.close()
        before = (self.status.get("containerStatuses") or [{}])[0]
        ended = "containerID" in before  # a restart: the ended container is the last state
        self.status["phase"] = "Running"
        self.status["containerStatuses"] = [{
            "name": "learner", "image": self.container["image"], "ready": True,
            "containerID": "fake://" + cid, "started": True,
            "restartCount": before["restartCount"] + 1 if ended else 0,
            "state": {"running": {"startedAt": now()}},
            "lastState": {"terminated": before["state"]["terminated"]} if ended else {}}]
        self.save()

    def poll(self):
        if self.proc is None:
            if time.monotonic() >= self.restart_at:
                self.start()
            return
        code = self.proc.poll()
        if code is None:
            return
        self.proc = None
        c = self.status["containerStatuses"][0]
        code = code if code >= 0 else 128 - code
        c.update(ready=False, started=False, state={"terminated": {
            "exitCode": code, "reason": "Completed" if code == 0 else "Error",
            "startedAt": c["state"]["running"]["startedAt"], "finishedAt": now(),
            "containerID": c["containerID"]}})
        self.save()
        # The StatefulSet restarts it, after a back-off that grows with the restarts.
        self.restart_at = time.monotonic() + min(10, 1 + c["restartCount"])

    def container_init(self):
        """The container's PID 1, the child of unshare."""
        try:
            with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
                return int(f.read().split()[0])
        except (OSError, IndexError, ValueError):
            return None

    def stop(self):
        """SIGTERM to the container's PID 1, as the kubelet does."""
        self.meta["deletionTimestamp"] = now()
        self.save()
        init = self.container_init() if self.proc is not None else None
        if init is not None:
            os.kill(init, signal.SIGTERM)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        if self.running():
            self.proc.kill()  # --kill-child: the container's PID 1, then all of it
        if self.proc is not None:
            self.proc.wait()
        subprocess.run(["rm", "-rf", self.dir])


def controller(ns, name, workdir):
    # The set's network namespace (start_controller): its loopback device starts down.
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    d = set_dir(ns, name)
    sts = read_json(object_path(ns, "StatefulSet", name))
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(0))
    # A cluster before Kubernetes 1.27 drops ordinals.start: pods <set>-0..N-1.
    start = 0 if os.environ.get("FAKE_KUBECTL_NO_ORDINALS") else \
        sts["spec"].get("ordinals", {}).get("start", 0)
    replicas = sts["spec"]["replicas"]
    block = f"127.{100 + os.getpid() % 100}.{1 + (os.getpid() // 100) % 250}"
    service = sts["spec"]["serviceName"]
    hosts = os.path.join(d, "hosts")
    with open("/etc/hosts") as f:
        text = f.read()
    for k in range(start, start + replicas):
        text += (f"\n{block}.{k} {name}-{k} {name}-{k}.{service}.{ns}.svc.cluster.local")
    with open(hosts, "w") as f:
        f.write(text + "\n")
    pods = [Pod(ns, sts, k, f"{block}.{k}", hosts, workdir)
            for k in range(start, start + replicas)]
    grace = sts["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
    while not stop and os.path.exists(object_path(ns, "StatefulSet", name)):
        for i, pod in enumerate(pods):
            replace = os.path.join(d, "replace-" + pod.name)
            if os.path.exists(replace):  # deleted by a user: killed (no grace), made anew
                pod.stop()
                pod.kill()
                pods[i] = Pod(ns, sts, pod.ordinal, pod.status["podIP"], hosts, workdir)
                os.remove(replace)
                continue
            pod.poll()
        time.sleep(0.1)
    deleted = read_json(os.path.join(d, "delete.json")) or {}
    if deleted.get("grace") is not None:
        grace = deleted["grace"]
    # Every pod at once, as the garbage collector does: SIGTERM, then SIGKILL after the grace
    # period (or at once for `delete pods --force`).
    for pod in pods:
        pod.stop()
    deadline = time.monotonic() + (0 if stop else grace)
    while (any(p.running() for p in pods) and time.monotonic() < deadline
           and not os.path.exists(os.path.join(d, "force"))):
        time.sleep(0.1)
    for pod in pods:
        pod.kill()
    os.remove(os.path.join(d, "pid"))


def main(argv):
    if argv[:1] == ["__controller"]:
        return controller(*argv[1:4])
    ns, args = "default", []
    it = iter(argv)
    for a in it:
        if a in ("-n", "--namespace"):
            ns = next(it)
        elif a.startswith("--namespace="):
            ns = a.split("=", 1)[1]
        else:
            args.append(a)
    if os.environ.get("FAKE_KUBECTL_NO_CLUSTER"):
        fail(NO_CLUSTER)
    verb = args[0] if args else ""
    if verb in ("create", "apply"):
        create(ns, args, replace_ok=verb == "apply")
    elif verb == "get" and args[1:2] == ["pods"]:
        get_pods(ns, args)
    elif verb == "logs":
        logs(ns, args)
    elif verb == "delete":
        delete(ns, args)
    else:
        fail(f"error: the kubectl emulator does not know `{' '.join(args)}`")


if __name__ == "__main__":
    main(sys.argv[1:])
