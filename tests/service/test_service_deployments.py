"""Models and online deployments in `cadre server`, end to end: tiny trainings that call
cadre.save_model run through the service, their models are stored and deployed, each deployment
is its own cadre-serve process, and predictions go through the service's route. No timed
assertions: every wait is bounded, none is measured."""
import errno
import io
import json
import os
import shutil
import signal
import subprocess
import threading
import urllib.request
import zipfile

import pytest

from deployment_helpers import (CRASHY, MANIFEST, TINY, deploy, infer_v2, ml, model_of, payload,
                                run_cli, score, serve_pids, train, wait_deployment)
from service_helpers import (FINAL, VERSION, make_zip, multipart, pids_of_processes_mentioning,
                             wait_for)



def test_model_stored_deployed_scored_deleted_and_back_after_a_restart(make_server, tmp_path):
    data = tmp_path / "data"
    server = make_server(data_dir=data)
    ada_token = server.add_user("ada")
    ada = server.client(ada_token)
    bob = server.client(server.add_user("bob"))
    tid = train(ada, TINY)
    status = ada.get(tid).json()["entity"]["status"]
    assert "stored" in status["message"]["text"], status

    # The model: registered with its signature, readable and downloadable by its owner only.
    model = model_of(ada, tid)
    mid = model["metadata"]["id"]
    sig = model["entity"]["signature"]
    assert sig["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 4]}]
    assert sig["outputs"][0]["shape"] == [-1, 3] and sig["labels"] == ["a", "b", "c"]
    assert model["entity"]["training"]["id"] == tid
    assert ml(ada, "GET", f"models/{mid}").json() == model
    assert ml(bob, "GET", f"models/{mid}").status == 404
    assert ml(bob, "GET", "models").json()["resources"] == []
    req = urllib.request.Request(f"{server.url}/ml/v4/models/{mid}/download?version={VERSION}",
                                 headers={"Authorization": f"Bearer {ada_token}"})
    with urllib.request.urlopen(req, timeout=60) as download:
        assert download.headers["Content-Type"] == "application/zip"
        names = zipfile.ZipFile(io.BytesIO(download.read())).namelist()
    assert sorted(names) == ["model.json", "model.pt"], names
    assert ml(bob, "GET", f"models/{mid}/download").status == 404
    assert ml(ada, "GET", "models/model-nope").status == 404
    assert ml(server.client(), "GET", "models").status == 401

    # Bad deployment requests name the field; another user's model is not found.
    r = ml(ada, "POST", "deployments", {"online": {}})
    assert r.status == 400 and set(r.error_targets()) == {"name", "asset.id"}, r
    r = ml(ada, "POST", "deployments", {"name": "x", "batch": {}, "asset": {"id": mid}})
    assert r.status == 400 and r.error_targets() == ["batch"], r
    assert ml(ada, "POST", "deployments", "[1, 2").status == 400
    r = ml(bob, "POST", "deployments", {"name": "x", "online": {}, "asset": {"id": mid}})
    assert r.status == 404 and r.error_targets() == ["asset.id"], r

    did = deploy(ada, mid, "tiny-online")
    entity = wait_deployment(ada, did, ("ready", "failed"))
    assert entity["status"]["state"] == "ready", entity
    assert entity["asset"]["id"] == mid and entity["online"] == {}
    assert len(serve_pids(server, did)) == 1

    r = score(ada, did, [[1, 2, 3, 4], [0, 0, 5, 1]])
    assert r.status == 200, r
    assert r.json() == {"predictions": [{"fields": ["prediction", "output"],
                                         "values": [["c", [1.0, 2.0, 3.0]],
                                                    ["c", [0.0, 0.0, 5.0]]]}]}
    # The same through the Open Inference Protocol (KServe v2).
    r = infer_v2(ada, did, [[1, 2, 3, 4]])
    assert r.status == 200, r
    assert r.json()["outputs"][0]["data"] == [1.0, 2.0, 3.0], r
    assert ada.request("GET", f"/v2/models/{did}/ready").status == 200
    assert ada.request("GET", f"/v2/models/{did}").json()["inputs"][0]["shape"] == [-1, 4]
    assert infer_v2(bob, did, [[1, 2, 3, 4]]).status == 404
    r = infer_v2(server.client(), did, [[1, 2, 3, 4]])
    assert r.status == 401 and "Authorization" in r.json()["error"], r  # v2's error shape
    assert server.client("nope").request("GET", f"/v2/models/{did}").json()["error"]
    # The server's health, as KServe clients ask it: no token needed.
    assert server.client().request("GET", "/v2/health/live").json() == {"live": True}
    assert server.client().request("GET", "/v2/health/ready").json() == {"ready": True}
    # The deployment's own checks come back as they are: the field and the expected shape.
    r = score(ada, did, [[1, 2, 3]])
    assert r.status == 400 and "4" in r.body, r
    # ... in the service's one error shape, as every /ml/v4 route answers.
    assert set(r.json()) == {"trace", "errors"} and r.json()["trace"], r
    assert r.error_codes() == ["invalid_input_data"], r
    # The service's own refusals.
    assert score(ada, "deployment-nope", [[1, 2, 3, 4]]).status == 404
    assert score(bob, did, [[1, 2, 3, 4]]).status == 404
    r = score(server.client(), did, [[1, 2, 3, 4]])
    assert r.status == 401, r
    # A multipart form (curl -F) is not the payload: 415 saying so (it was cpp-httplib's 500),
    # and 404 for a deployment that does not exist.
    form, form_type = multipart([("payload", "input.json", "application/json",
                                  payload([[1, 2, 3, 4]]).encode())])
    path = f"/ml/v4/deployments/{did}/predictions?version={VERSION}"
    r = ada.request("POST", path, body=form, content_type=form_type)
    assert r.status == 415 and "Content-Type: application/json" in r.body, r
    r = ada.request("POST", path.replace(did, "deployment-nope"), body=form, content_type=form_type)
    assert r.status == 404, r
    huge = payload([[0.5, 0.5, 0.5, 0.5]] * 1_000_000)
    r = ml(ada, "POST", f"deployments/{did}/predictions", huge)
    assert r.status == 413 and r.error_codes() == ["payload_too_large"], r
    assert score(ada, did, [[1, 2, 3, 4]]).status == 200  # and it still serves
    listed = ml(ada, "GET", "deployments").json()
    assert [d["metadata"]["id"] for d in listed["resources"]] == [did]
    assert ml(bob, "GET", "deployments").json()["resources"] == []
    assert ml(bob, "GET", f"deployments/{did}").status == 404
    assert ml(bob, "DELETE", f"deployments/{did}").status == 404

    # The terminal client: deploy by training id, score a file.
    env = {"CADRE_SERVER": server.url, "CADRE_TOKEN": ada_token}
    out = run_cli("deploy", tid, "--name", "from-cli", env_extra=env)
    assert out.returncode == 0, out.stderr
    second = out.stdout.strip()
    assert ml(ada, "GET", f"deployments/{second}").json()["entity"]["status"]["state"] == "ready"
    request = tmp_path / "input.json"
    request.write_text(payload([[1, 2, 3, 4]]))
    out = run_cli("score", second, str(request), "--server", server.url, "--token", ada_token)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["predictions"][0]["values"] == [["c", [1.0, 2.0, 3.0]]]
    out = run_cli("score", "deployment-nope", str(request), env_extra=env)
    assert out.returncode == 1 and "does not exist" in out.stderr, out.stderr

    # Deleted while clients score it: every request is answered, 200 while it is there, then
    # 503 (on its way out) or 404 (gone); never a broken connection.
    statuses, stop = [], threading.Event()

    def client_loop():
        while not stop.is_set():
            statuses.append(score(ada, second, [[1, 2, 3, 4]]).status)
    threads = [threading.Thread(target=client_loop) for _ in range(4)]
    for t in threads:
        t.start()
    wait_for("requests to be answered", lambda: len(statuses) > 8)
    pids = serve_pids(server, second)
    assert ml(ada, "DELETE", f"deployments/{second}").status == 204
    wait_for("the deleted deployment's 404", lambda: statuses and statuses[-1] == 404)
    stop.set()
    for t in threads:
        t.join(timeout=120)
    assert set(statuses) <= {200, 404, 503}, statuses
    assert statuses.count(200) > 0
    assert ml(ada, "GET", f"deployments/{second}").status == 404
    wait_for("the deleted deployment's process to end",
             lambda: not any(p in pids_of_processes_mentioning(server.data_dir) for p in pids))

    # The server stops: so do its deployments' processes. It starts again: they come back.
    server.kill(signal.SIGTERM)
    assert server.proc.returncode == 0, "".join(server.output)
    wait_for("no process of the stopped server's deployments",
             lambda: not pids_of_processes_mentioning(os.path.join(str(data), "deployments")))
    again = make_server(data_dir=data)
    ada = again.client(ada_token)
    entity = wait_deployment(ada, did, ("ready", "failed"))
    assert entity["status"]["state"] == "ready", entity
    assert score(ada, did, [[1, 2, 3, 4]]).json()["predictions"][0]["values"][0][0] == "c"
    # Killed outright, the server takes its deployments' processes with it.
    again.kill(signal.SIGKILL)
    wait_for("no process of the killed server's deployments",
             lambda: not pids_of_processes_mentioning(os.path.join(str(data), "deployments")))


def test_a_crashing_model_takes_down_only_its_own_deployment(make_server):
    server = make_server(extra=["--deployment-restarts", "1"])
    token = server.add_user("ada")
    ada = server.client(token)
    tiny_training, crashy_training = train(ada, TINY, CRASHY)
    tiny = deploy(ada, model_of(ada, tiny_training)["metadata"]["id"], "tiny")
    crashy = deploy(ada, model_of(ada, crashy_training)["metadata"]["id"], "crashy")
    for did in (tiny, crashy):
        assert wait_deployment(ada, did, ("ready", "failed"))["status"]["state"] == "ready"
    r = score(ada, crashy, [[1, 2, 3, 4]])
    assert r.json()["predictions"][0]["values"] == [[[2.0, 4.0, 6.0, 8.0]]], r

    # The input that kills it: this request fails, the service and the other deployment carry
    # on, and the crashed one is started again.
    r = score(ada, crashy, [[1, 2, 3, 4000]])
    assert r.status == 503 and r.error_codes() == ["deployment_unavailable"], r
    assert score(ada, tiny, [[1, 2, 3, 4]]).status == 200
    entity = wait_deployment(ada, crashy, ("ready", "failed"), restarts=1)
    assert entity["status"]["state"] == "ready" and entity["restarts"] == 1, entity
    assert "SIGFPE" in entity["status"]["message"]["text"], entity
    assert score(ada, crashy, [[1, 1, 1, 1]]).status == 200

    # The server starts again: the count of restarts stays, and the message says no more than
    # the server knows (how the process ended before is not recorded).
    server.kill(signal.SIGTERM)
    server = make_server(data_dir=server.data_dir, extra=["--deployment-restarts", "1"])
    ada = server.client(token)
    assert wait_deployment(ada, tiny, ("ready", "failed"))["status"]["state"] == "ready"
    entity = wait_deployment(ada, crashy, ("ready", "failed"), restarts=1)
    assert entity["status"]["state"] == "ready" and entity["restarts"] == 1, entity
    assert entity["status"]["message"]["text"] == \
        "ready; its process was started again 1 time(s)", entity

    # Once more, past the bound: failed, saying how its process ended.
    assert score(ada, crashy, [[5000, 0, 0, 0]]).status == 503
    entity = wait_deployment(ada, crashy, "failed")
    failure = entity["status"]["failure"]["errors"][0]["message"]
    assert "signal 8" in failure and "1 time(s)" in failure, failure
    r = score(ada, crashy, [[1, 1, 1, 1]])
    assert r.status == 503 and "failed" in r.json()["errors"][0]["message"], r
    assert not serve_pids(server, crashy)
    assert score(ada, tiny, [[1, 2, 3, 4]]).status == 200


def test_a_scoring_process_that_stops_answering_is_killed_and_started_again(server):
    """SIGSTOP stands for a hung model process: it still accepts connections, answers nothing.
    The supervisor's liveness questions go unanswered, so it kills the process; the request
    that was waiting gets 503, and the deployment is started again, saying why."""
    ada = server.client(server.add_user("ada"))
    did = deploy(ada, model_of(ada, train(ada, TINY))["metadata"]["id"])
    assert wait_deployment(ada, did, ("ready", "failed"))["status"]["state"] == "ready"
    (pid,) = serve_pids(server, did)
    os.kill(pid, signal.SIGSTOP)
    try:
        r = score(ada, did, [[1, 2, 3, 4]], timeout=280)
        assert r.status == 503 and r.error_codes() == ["deployment_unavailable"], r
        entity = wait_deployment(ada, did, "ready", restarts=1, timeout=240)
    finally:
        try:
            os.kill(pid, signal.SIGCONT)  # when the test failed before it was killed
        except ProcessLookupError:
            pass
    assert "did not answer /v2/health/live 3 times in a row" in \
        entity["status"]["message"]["text"], entity
    assert pid not in serve_pids(server, did)
    r = score(ada, did, [[1, 2, 3, 4]])
    assert r.status == 200 and r.json()["predictions"][0]["values"][0][1] == [1.0, 2.0, 3.0], r


def test_a_deployment_whose_folder_cannot_be_made_fails_saying_why(server):
    """The deployments' folder replaced by a file (as a full disk, a process's folder cannot be
    made): the deployment fails naming the folder and the error, not an exit code."""
    ada = server.client(server.add_user("ada"))
    model = model_of(ada, train(ada, TINY))["metadata"]["id"]
    folder = os.path.join(server.data_dir, "deployments")
    shutil.rmtree(folder, ignore_errors=True)
    with open(folder, "w") as f:
        f.write("in the way")
    did = deploy(ada, model)
    entity = wait_deployment(ada, did, ("ready", "failed"))
    assert entity["status"]["state"] == "failed", entity
    failure = entity["status"]["failure"]["errors"][0]["message"]
    assert "cannot create its folder" in failure and did in failure and \
        "Not a directory" in failure, failure
    os.remove(folder)
    r = ml(ada, "PATCH", f"deployments/{did}",
           [{"op": "replace", "path": "/asset", "value": {"id": model}}])
    assert r.status == 202, r
    assert wait_deployment(ada, did, ("ready", "failed"))["status"]["state"] == "ready"
    assert score(ada, did, [[1, 2, 3, 4]]).status == 200


def test_a_full_disk_fails_the_deployment_saying_so(server):
    """A real full disk (a small tmpfs over the deployments' folder, filled up): the scoring
    process can write neither its log nor its port file, and the deployment fails with the
    system's reason, heard through the process's error pipe, not only its exit code."""
    ada = server.client(server.add_user("ada"))
    model = model_of(ada, train(ada, TINY))["metadata"]["id"]
    folder = os.path.join(server.data_dir, "deployments")
    os.makedirs(folder, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", folder],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here: " + mounted.stdout.strip())
    try:
        fd = os.open(os.path.join(folder, "filler"), os.O_WRONLY | os.O_CREAT)
        try:
            with pytest.raises(OSError) as full:
                while True:
                    os.write(fd, b"\0" * 4096)
            assert full.value.errno == errno.ENOSPC, full.value
        finally:
            os.close(fd)
        did = deploy(ada, model)
        entity = wait_deployment(ada, did, ("ready", "failed"))
        assert entity["status"]["state"] == "failed", entity
        failure = entity["status"]["failure"]["errors"][0]["message"]
        assert "exited with code 2 before it was ready" in failure, failure
        assert "--port-file: cannot write" in failure and "No space left on device" in failure, \
            failure
    finally:
        subprocess.run(["umount", "-l", folder], check=False)


def test_models_that_cannot_be_stored_or_loaded_fail_with_the_reason(server):
    ada = server.client(server.add_user("ada"))
    # model.json that is no signature: the training fails in `storing`, naming the file.
    bad_signature = ("import os\nd = os.path.join(os.environ['RESULT_DIR'], 'model')\n"
                     "os.makedirs(d)\nopen(os.path.join(d, 'model.pt'), 'w').write('x')\n"
                     "open(os.path.join(d, 'model.json'), 'w').write('{}')\n")
    r = ada.submit_manifest(MANIFEST.format(name="bad"), code=make_zip({"train.py": bad_signature}))
    status = ada.wait_state(r.json()["metadata"]["id"], FINAL)
    assert status["state"] == "failed", status
    failure = status["failure"]["errors"][0]["message"]
    assert "model.json" in failure and "inputs" in failure, failure

    # A signature whose model file is not TorchScript: stored, but its deployment fails with
    # the scorer's reason, and is not started again and again.
    garbage = ("import os, json\nd = os.path.join(os.environ['RESULT_DIR'], 'model')\n"
               "os.makedirs(d)\nopen(os.path.join(d, 'model.pt'), 'w').write('not a model')\n"
               "json.dump({'format': 'cadre-model/1', 'model_file': 'model.pt', "
               "'inputs': [{'name': 'input', 'datatype': 'FP32', 'shape': [-1, 4]}], "
               "'outputs': [{'name': 'output', 'datatype': 'FP32', 'shape': [-1, 3]}]}, "
               "open(os.path.join(d, 'model.json'), 'w'))\n")
    did = deploy(ada, model_of(ada, train(ada, garbage, name="garbage"))["metadata"]["id"])
    entity = wait_deployment(ada, did, ("ready", "failed"))
    assert entity["status"]["state"] == "failed" and entity["restarts"] == 0, entity
    failure = entity["status"]["failure"]["errors"][0]["message"]
    assert "before it was ready" in failure and "cadre-serve:" in failure, failure

    # A training that saved nothing has no model, and `cadre deploy` says why.
    r = ada.submit_manifest(MANIFEST.format(name="none"), code=make_zip({"train.py": "pass\n"}))
    tid = r.json()["metadata"]["id"]
    assert ada.wait_state(tid, FINAL)["state"] == "completed"
    assert ml(ada, "GET", f"models?training_id={tid}").json()["resources"] == []
    out = run_cli("deploy", tid, "--server", server.url, "--token", ada.token)
    assert out.returncode == 1 and "cadre.save_model" in out.stderr, out.stderr


def test_fashion_mnist_trained_through_the_service_scores_as_it_printed(server):
    """The one end-to-end run: the Horovod example trained briefly through the service, its
    stored model deployed, 100 images scored through both routes, the test set through WML's."""
    import gzip

    import numpy as np
    import torch

    ada = server.client(server.add_user("ada"))
    examples = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "fashion_mnist")
    manifest = ("name: fmnist\nframework: {name: pytorch-horovod}\n"
                "execution: {command: python3 train_horovod.py --epochs 1 --max-batches 80, "
                "compute_configuration: {name: cpu, nodes: 2}}\n")
    code = make_zip({"train_horovod.py": open(os.path.join(examples, "train_horovod.py")).read()})
    r = ada.submit_manifest(manifest, code=code)
    assert r.status == 201, r
    tid = r.json()["metadata"]["id"]
    status = ada.wait_state(tid, FINAL, timeout=600)
    assert status["state"] == "completed", status
    job = ada.get(tid).json()["entity"]["results_reference"]["location"]["path"]
    printed = float(open(os.path.join(job, "accuracy.txt")).read())
    assert printed > 0.6, "the example did not learn (%.3f)" % printed

    did = deploy(ada, model_of(ada, tid)["metadata"]["id"], "fmnist")
    assert wait_deployment(ada, did, ("ready", "failed"))["status"]["state"] == "ready"

    data = "/usr/share/datasets/fashion-mnist"
    with gzip.open(os.path.join(data, "t10k-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(), dtype=np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(data, "t10k-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), dtype=np.uint8, offset=8).astype(np.int64)
    x = (torch.from_numpy(images.copy()).float().div_(255) - 0.2860) / 0.3530
    model = torch.jit.load(os.path.join(job, "model", "model.pt"))
    with torch.no_grad():
        eager = model(x[:100]).argmax(1).tolist()
    names = json.load(open(os.path.join(job, "model", "model.json")))["labels"]

    # 100 images: the labels the model gives in PyTorch. The whole test set, 500 a request
    # (under the 16 MiB limit): the accuracy the training printed.
    correct = 0
    for start in range(0, len(x), 500):
        chunk = x[start:start + 500]
        r = score(ada, did, [img.tolist() for img in chunk])
        assert r.status == 200, r
        predicted = [v[0] for v in r.json()["predictions"][0]["values"]]
        if start == 0:
            assert predicted[:100] == [names[i] for i in eager]
            r = ada.request("POST", f"/v2/models/{did}/infer", content_type="application/json",
                            body=json.dumps({"inputs": [{"name": "input", "datatype": "FP32",
                                                         "shape": [100, 1, 28, 28],
                                                         "data": x[:100].flatten().tolist()}]}))
            assert r.status == 200, r
            served = torch.tensor(r.json()["outputs"][0]["data"]).view(100, 10).argmax(1)
            assert served.tolist() == eager
        correct += sum(names[label] == p for label, p in zip(labels[start:start + 500], predicted))
    assert abs(correct / len(x) - printed) <= 0.01, (correct / len(x), printed)
