"""`cadre k8s render`: the Kubernetes objects of a job, checked as structure (no cluster can be
reached from the test machines) and, where kubectl can reach a cluster, by its client dry run."""
import json
import os
import shutil
import subprocess

import pytest
import yaml

from runner_helpers import CADRE, ROOT

MANIFEST = os.path.join(ROOT, "examples", "fashion_mnist", "horovod.yaml")


def render(*args, cwd=None):
    return subprocess.run([CADRE, "k8s", "render", *args], cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=60)


def objects(text):
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    return {d["kind"]: d for d in docs}


def test_render_the_horovod_example(tmp_path):
    r = render(MANIFEST, "--image", "registry.example/cadre:1", "--namespace", "ml")
    assert r.returncode == 0, r.stderr
    objs = objects(r.stdout)
    assert sorted(objs) == ["ConfigMap", "Secret", "Service", "StatefulSet"]
    name = "fashion-mnist-horovod"

    svc = objs["Service"]
    assert svc["metadata"]["name"] == name
    assert svc["spec"]["clusterIP"] == "None"
    assert {p["port"] for p in svc["spec"]["ports"]} == {2222, 29400}

    sts = objs["StatefulSet"]["spec"]
    assert sts["serviceName"] == name
    assert sts["replicas"] == 2
    assert sts["ordinals"] == {"start": 1}  # pods fashion-mnist-horovod-1, -2 = LEARNER_ID
    assert sts["selector"]["matchLabels"] == sts["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"] == sts["selector"]["matchLabels"]
    pod = sts["template"]["spec"]
    assert pod["dnsConfig"]["searches"] == [f"{name}.ml.svc.cluster.local"]
    (c,) = pod["containers"]
    assert c["image"] == "registry.example/cadre:1"
    assert c["command"][:4] == ["cadre", "task", "--engine", "kubernetes"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 2  # k80x2
    assert {"name": "learner", "containerPort": 2222} in c["ports"]
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["plan"]["configMap"]["name"] == objs["ConfigMap"]["metadata"]["name"]
    assert volumes["token"]["secret"]["secretName"] == objs["Secret"]["metadata"]["name"]
    assert c["command"][c["command"].index("--plan") + 1].startswith(mounts["plan"])
    assert c["command"][c["command"].index("--token-file") + 1].startswith(mounts["token"])

    plan = json.loads(objs["ConfigMap"]["data"]["task.json"])
    contract = plan["contract"]
    assert contract["name_prefix"] == name
    assert contract["learners"] == 2 and contract["slots_per_learner"] == 2
    assert contract["mode"] == "horovod"
    assert contract["store_address"] == f"{name}-1:29400"
    assert plan["command"] == "python3 train_horovod.py --epochs 2"
    token = objs["Secret"]["stringData"]["token"]
    assert len(token) == 64
    assert token not in objs["ConfigMap"]["data"]["task.json"]


def test_cpu_jobs_ask_for_no_gpus_and_names_are_kubernetes_names(tmp_path):
    r = render(MANIFEST, "--image", "img", "--compute", "cpux2", "--name", "My Job_2!")
    assert r.returncode == 0, r.stderr
    objs = objects(r.stdout)
    assert objs["Service"]["metadata"]["name"] == "my-job-2"
    (c,) = objs["StatefulSet"]["spec"]["template"]["spec"]["containers"]
    assert "resources" not in c


def test_no_image_is_refused_by_name():
    r = render(MANIFEST)
    assert r.returncode == 2
    assert "image" in r.stderr and "--image" in r.stderr


@pytest.mark.parametrize("name_space", ["Bad_NS", "ml\nkind: Pod", "-ml", "x" * 64, ""])
def test_a_namespace_that_is_not_a_dns_label_is_refused_by_name(name_space):
    # It goes into the pods' DNS search domain and a comment line of the YAML; a newline once
    # broke the file, and an upper-case name was refused only by the cluster.
    r = render(MANIFEST, "--image", "img", "--namespace", name_space)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "--namespace: " in r.stderr and "is not a Kubernetes namespace name" in r.stderr, \
        r.stderr
    assert r.stdout == ""


def test_cadre_run_refuses_such_a_namespace_before_laying_the_job_out(tmp_path):
    r = subprocess.run([CADRE, "run", "--backend", "kubernetes", "--image", "img", "--namespace",
                        "Bad_NS", "-n", "2", "--framework", "pytorch-horovod", "--", "true"],
                       cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=60)
    assert r.returncode == 2, r.stderr
    assert "--namespace: 'Bad_NS' is not a Kubernetes namespace name" in r.stderr, r.stderr
    assert "nothing was started" in r.stderr and not (tmp_path / "runs").exists()


def test_output_file_is_the_owners_only(tmp_path):
    out = tmp_path / "job.yaml"
    r = render(MANIFEST, "--image", "img", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert objects(out.read_text())["StatefulSet"]["spec"]["replicas"] == 2
    assert oct(os.stat(out).st_mode & 0o777) == "0o600"  # it holds the job's token


def test_kubectl_client_dry_run(tmp_path):
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl here (CI has none): the structural tests above are the check")
    out = tmp_path / "job.yaml"
    assert render(MANIFEST, "--image", "img", "-o", str(out)).returncode == 0
    k = subprocess.run([kubectl, "apply", "--dry-run=client", "-f", str(out)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    unreachable = ("connection refused", "unable to recognize", "failed to download openapi",
                   "no such host", "i/o timeout")
    if k.returncode != 0 and any(s in k.stdout for s in unreachable):
        pytest.skip("kubectl's client dry run needs a cluster's API for discovery; none is "
                    "reachable here: " + k.stdout.splitlines()[0])
    assert k.returncode == 0, k.stdout
