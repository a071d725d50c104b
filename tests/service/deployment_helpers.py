"""The tiny models, manifests and calls the deployment tests share."""
import json
import os
import subprocess

from service_helpers import CADRE, FINAL, VERSION, make_zip, pids_of_processes_mentioning, wait_for

# A linear model whose scores are its first three inputs: [1, 2, 3, 4] scores [1, 2, 3], "c".
TINY = """
import torch, cadre
model = torch.nn.Linear(4, 3)
with torch.no_grad():
    model.weight.copy_(torch.eye(3, 4))
    model.bias.zero_()
cadre.save_model(model, torch.zeros(1, 4), labels=["a", "b", "c"])
print("saved", flush=True)
"""

# Doubles its input, and kills its own process for any value over 1000: INT64_MIN % -1 traps
# in the CPU (SIGFPE), as a model with a native bug would.
CRASHY = """
import torch, cadre

class Crashy(torch.nn.Module):
    def forward(self, x):
        if bool((x > 1000.0).any()):
            # From the input, so that the JIT cannot fold it into a constant ahead of time.
            zero = (x[:1, 0] * 0.0).long()
            low = zero + (-9223372036854775807 - 1)
            x = x + torch.remainder(low, zero - 1).float()
        return x * 2.0

cadre.save_model(Crashy(), torch.zeros(1, 4))
"""

# TINY's scores doubled: [1, 2, 3, 4] scores [2, 4, 6].
DOUBLE = TINY.replace("torch.eye(3, 4)", "2 * torch.eye(3, 4)")

# A signature whose model file is not TorchScript: stored, but no scorer loads it.
GARBAGE = ("import os, json\nd = os.path.join(os.environ['RESULT_DIR'], 'model')\n"
           "os.makedirs(d)\nopen(os.path.join(d, 'model.pt'), 'w').write('not a model')\n"
           "json.dump({'format': 'cadre-model/1', 'model_file': 'model.pt', "
           "'inputs': [{'name': 'input', 'datatype': 'FP32', 'shape': [-1, 4]}], "
           "'outputs': [{'name': 'output', 'datatype': 'FP32', 'shape': [-1, 3]}]}, "
           "open(os.path.join(d, 'model.json'), 'w'))\n")

MANIFEST = ("name: {name}\nframework: {{name: pytorch}}\n"
            "execution: {{command: python3 train.py, "
            "compute_configuration: {{name: cpu, nodes: 1}}}}\n")


def payload(rows):
    """WML's payload for the one input `input`: one value per field, each row a tensor row."""
    return json.dumps({"input_data": [{"fields": ["input"], "values": [[r] for r in rows]}]})


def train(client, *scripts, name="tiny"):
    """Submits a training per script (at once); returns their ids once they have completed."""
    ids = []
    for i, script in enumerate(scripts):
        r = client.submit_manifest(MANIFEST.format(name=f"{name}-{i}"),
                                   code=make_zip({"train.py": script}))
        assert r.status == 201, r
        ids.append(r.json()["metadata"]["id"])
    for tid in ids:
        status = client.wait_state(tid, FINAL, timeout=300)
        assert status["state"] == "completed", status
    return ids if len(ids) > 1 else ids[0]


def ml(client, method, path, body=None, **kw):
    sep = "&" if "?" in path else "?"
    if body is not None and not isinstance(body, (str, bytes)):
        body = json.dumps(body)
    return client.request(method, f"/ml/v4/{path}{sep}version={VERSION}", body=body,
                          content_type="application/json" if body is not None else None, **kw)


def model_of(client, training_id):
    r = ml(client, "GET", f"models?training_id={training_id}")
    assert r.status == 200, r
    (model,) = r.json()["resources"]
    return model


def deploy(client, model_id, name="d"):
    r = ml(client, "POST", "deployments",
           {"name": name, "online": {}, "asset": {"id": model_id}})
    assert r.status == 201, r
    assert r.json()["entity"]["status"]["state"] == "initializing"
    assert r.headers["Location"] == "/ml/v4/deployments/" + r.json()["metadata"]["id"]
    return r.json()["metadata"]["id"]


def wait_deployment(client, did, states, timeout=120, restarts=0):
    """The deployment's entity once it is in one of `states` with at least `restarts`."""
    states = (states,) if isinstance(states, str) else tuple(states)

    def check():
        r = ml(client, "GET", f"deployments/{did}")
        assert r.status == 200, r
        entity = r.json()["entity"]
        done = entity["status"]["state"] in states and entity["restarts"] >= restarts
        return entity if done else None
    return wait_for(f"deployment {did} to be {'/'.join(states)}", check, timeout)


def score(client, did, rows, **kw):
    return ml(client, "POST", f"deployments/{did}/predictions", payload(rows), **kw)


def infer_v2(client, did, rows):
    """KServe v2 inference through the service: the model's name is the deployment's id."""
    flat = [v for row in rows for v in row]
    body = {"inputs": [{"name": "input", "datatype": "FP32",
                        "shape": [len(rows), len(rows[0])], "data": flat}]}
    return client.request("POST", f"/v2/models/{did}/infer", body=json.dumps(body),
                          content_type="application/json")


def serve_pids(server, did):
    return pids_of_processes_mentioning(os.path.join(server.data_dir, "deployments", did))


def run_cli(*args, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([CADRE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=300, env=env)
