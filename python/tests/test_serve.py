"""`cadre serve`: a model saved by cadre.save_model, scored over HTTP by the C++ scorer (libtorch,
dynamic batching) through the KServe v2 and WML routes; bad input gets clear errors; and the
Fashion-MNIST example trained by `cadre run` is served with the accuracy it printed."""
import http.client
import json
import os
import signal
import subprocess
import threading

import pytest

torch = pytest.importorskip("torch")
import cadre  # noqa: E402
from serve_helpers import CADRE, CADRE_SERVE, ROOT, Server  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.exists(CADRE_SERVE),
                                reason="cadre-serve is not built (CADRE_WITH_SERVING=OFF)")


class Classifier(torch.nn.Module):
    """3 classes from 4 features; refuses rows holding -999 (a model that throws for an input)."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        if bool((x == -999).any()):
            raise RuntimeError("this model refuses -999")
        return torch.log_softmax(self.fc(x), dim=1)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    torch.manual_seed(7)
    model = Classifier().eval()
    path = str(tmp_path_factory.mktemp("models") / "iris")
    cadre.save_model(model, torch.zeros(1, 4), path=path, labels=["setosa", "versicolor",
                                                                  "virginica"])
    return model, path


@pytest.fixture(scope="module")
def server(classifier):
    s = Server(classifier[1], "--max-batch-delay", "2", env={"CADRE_SERVE_TOKEN": ""})
    yield s
    assert s.stop() == 0, s.output


def eager(model, rows):
    with torch.no_grad():
        return model(torch.tensor(rows, dtype=torch.float32))


def test_scores_through_both_routes(classifier, server):
    model, _ = classifier
    rows = [[0.1, 0.2, 0.3, 0.4], [5.0, -1.0, 2.5, 0.0]]
    expected = eager(model, rows)
    status, doc = server.infer("iris", {"input": ("FP32", [2, 4], sum(rows, []))})
    assert status == 200, doc
    (out,) = doc["outputs"]
    assert out["name"] == "output" and out["datatype"] == "FP32" and out["shape"] == [2, 3]
    assert torch.allclose(torch.tensor(out["data"]).view(2, 3), expected, atol=1e-6)

    status, doc = server.predict("iris", ["input"], [[r] for r in rows])
    assert status == 200, doc
    (pred,) = doc["predictions"]
    assert pred["fields"] == ["prediction", "output"]
    labels = ["setosa", "versicolor", "virginica"]
    assert [v[0] for v in pred["values"]] == [labels[i] for i in expected.argmax(1).tolist()]
    # The same rows as four feature fields each.
    status, doc = server.predict("iris", ["a", "b", "c", "d"], rows)
    assert status == 200 and doc["predictions"][0]["values"] == pred["values"]


def test_health_and_metadata(server):
    assert server.request("GET", "/v2/health/live")[0] == 200
    assert server.request("GET", "/v2/health/ready")[0] == 200
    assert server.request("GET", "/v2/models/iris/ready")[0] == 200
    status, meta = server.request("GET", "/v2/models/iris")
    assert status == 200
    assert meta["name"] == "iris"  # the folder's name by default
    assert meta["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 4]}]
    assert meta["outputs"] == [{"name": "output", "datatype": "FP32", "shape": [-1, 3]}]
    assert meta["parameters"]["device"] == "cpu"


def test_concurrent_clients_get_their_own_rows(classifier, server):
    model, _ = classifier
    wrong = []

    def client(c):
        for i in range(15):
            row = [float(c), float(i), float(-c), float(c * i) / 10]
            status, doc = server.infer("iris", {"input": ("FP32", [1, 4], row)})
            got = torch.tensor(doc["outputs"][0]["data"]) if status == 200 else None
            if got is None or not torch.allclose(got, eager(model, [row])[0], atol=1e-6):
                wrong.append((c, i, status, doc))

    threads = [threading.Thread(target=client, args=(c,)) for c in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert wrong == []
    status, metrics = server.request("GET", "/metrics")
    assert status == 200 and "cadre_serving_batch_rows_bucket" in metrics


@pytest.mark.parametrize("body, status, message", [
    ({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 5], "data": [0] * 5}]},
     400, "inputs[0] ('input').shape [1, 5] differs at dimension 1; the model expects [-1, 4]"),
    ({"inputs": [{"name": "input", "datatype": "INT64", "shape": [1, 4], "data": [0] * 4}]},
     400, "datatype: INT64 given; the model expects FP32"),
    ({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4],
                  "data": [1, "two", 3, 4]}]},
     400, "element 1 is a string (\"two\"); FP32 numbers belong here"),
    ({"inputs": [{"name": "input", "datatype": "FP32", "shape": [0, 4], "data": []}]},
     400, "empty batch"),
    ({"inputs": []}, 400, "input 'input' is missing"),
])
def test_bad_v2_requests_name_the_field(server, body, status, message):
    got, doc = server.request("POST", "/v2/models/iris/infer", body)
    assert got == status and message in doc["error"], doc


@pytest.mark.parametrize("body, message", [
    ({"values": [[1, 2, 3, 4]]}, "input_data: missing"),
    ({"input_data": [{"fields": ["input"], "values": []}]}, "empty batch"),
    ({"input_data": [{"fields": ["input"], "values": [[[1, 2]]]}]},
     "one row of 'input' has shape [4]"),
    ({"input_data": [{"fields": ["a", "b", "c", "d"], "values": [["x", 1, 2, 3]]}]},
     "a string (\"x\")"),
])
def test_bad_wml_payloads_name_the_field(server, body, message):
    got, doc = server.request("POST", "/ml/v4/deployments/iris/predictions", body)
    assert got == 400, doc
    assert doc["status_code"] == 400 and message in doc["errors"][0]["message"], doc


def test_a_body_sent_as_a_form_is_read_as_json(server):
    """`curl -d @payload.json` without a Content-Type sends a form; past 8 KiB cpp-httplib refused
    it as 'larger than this server takes', far below --max-request-bytes. The scoring routes
    read the body as JSON whatever its Content-Type, as the service's do."""
    body = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1000, 4],
                        "data": [0.25] * 4000}]}
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    status, doc = server.request("POST", "/v2/models/iris/infer", body, headers=form)
    assert status == 200, doc
    assert doc["outputs"][0]["shape"][0] == 1000


def test_nan_and_infinity_are_numbers(server):
    raw = b'{"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4], ' \
          b'"data": [NaN, Infinity, -Infinity, 1]}]}'
    status, doc = server.request("POST", "/v2/models/iris/infer", raw=raw)
    assert status == 200, doc
    status, doc = server.predict("iris", ["a", "b", "c", "d"], [["NaN", "inf", 0, 1]])
    assert status == 200, doc


def test_a_model_that_throws_is_500_and_the_next_request_is_served(server):
    status, doc = server.infer("iris", {"input": ("FP32", [1, 4], [-999, 0, 0, 0])})
    assert status == 500 and "this model refuses -999" in doc["error"], doc
    assert server.infer("iris", {"input": ("FP32", [1, 4], [1, 0, 0, 0])})[0] == 200


def test_unknown_model_and_route_are_404(server):
    status, doc = server.infer("nope", {"input": ("FP32", [1, 4], [0] * 4)})
    assert status == 404 and "'nope' is not served here" in doc["error"]
    status, doc = server.predict("nope", ["input"], [[[0] * 4]])
    assert status == 404 and doc["errors"][0]["code"] == "deployment_not_found"
    assert server.request("GET", "/v3/whatever")[0] == 404


def test_limits_token_and_device(classifier):
    _, path = classifier
    s = Server(path, "--name", "guarded", "--max-request-bytes", "100000",
               "--max-batch-size", "1", env={"CADRE_SERVE_TOKEN": "t0ken"})
    try:
        rows = [[0.0] * 4] * 10000  # about 200 KB: refused by size, before it is parsed
        status, doc = s.predict("guarded", ["input"], [[r] for r in rows],
                                headers={"Authorization": "Bearer t0ken"})
        assert status == 413, doc
        assert s.infer("guarded", {"input": ("FP32", [1, 4], [0] * 4)})[0] == 401
        status, doc = s.infer("guarded", {"input": ("FP32", [1, 4], [0] * 4)},
                              headers={"Authorization": "Bearer wrong"})
        assert status == 401 and "not valid" in doc["error"]
        assert s.infer("guarded", {"input": ("FP32", [1, 4], [0] * 4)},
                       headers={"Authorization": "Bearer t0ken"})[0] == 200
        assert s.request("GET", "/v2/health/ready")[0] == 200  # health needs no token
    finally:
        assert s.stop() == 0
    assert "on device cpu" in s.output, s.output
    assert "batches of up to 1 rows" in s.output


def test_cuda_without_a_gpu_is_a_clear_error(classifier):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    proc = subprocess.run([CADRE, "serve", classifier[1], "--device", "cuda"], timeout=120,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.returncode == 2
    assert "--device cuda: no CUDA device" in proc.stdout, proc.stdout


class Slow(torch.nn.Module):
    """Runs tanh as many times as its first input says: a model still busy when the stop comes."""

    def forward(self, x):
        y = x
        for _ in range(int(x[0, 0])):
            y = torch.tanh(y)
        return y


@pytest.fixture(scope="module")
def slow(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("models") / "slow")
    cadre.save_model(Slow(), torch.zeros(1, 4), path=path, method="script")
    return path


def send_infer(port, first):
    """A keep-alive connection that has sent one v2 request (the answer is left to read)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4],
                                   "data": [first, 0.5, 0.5, 0.5]}]})
    conn.request("POST", "/v2/models/slow/infer", body, {"Content-Type": "application/json"})
    return conn


def read_stdout_until(server, text):
    lines = []
    for line in server.proc.stdout:
        lines.append(line)
        if text in line:
            return "".join(lines)
    raise AssertionError("cadre serve ended without printing %r:\n%s" % (text, "".join(lines)))


def test_sigterm_answers_every_prediction_already_sent(slow):
    """One HTTP thread: one request in the model, two on connections waiting for the thread when
    SIGTERM comes. cpp-httplib's stop closed the waiting ones unread: two lost predictions."""
    s = Server(slow, "--http-threads", "1")
    conns = [send_infer(s.port, 300000)] + [send_infer(s.port, 2) for _ in range(2)]
    s.proc.send_signal(signal.SIGTERM)
    read_stdout_until(s, "stopping (signal")
    for conn in conns:
        resp = conn.getresponse()
        doc = json.loads(resp.read())
        assert resp.status == 200, doc
        assert resp.getheader("Connection") == "close"
        assert doc["outputs"][0]["shape"] == [1, 4]
        conn.close()
    s.proc.wait(timeout=120)  # it ends by itself once they are answered
    assert s.stop() == 0, s.output
    with pytest.raises(OSError):  # the listener is closed
        send_infer(s.port, 1).getresponse()


def test_a_second_signal_stops_at_once(slow):
    s = Server(slow)
    conn = send_infer(s.port, 10 ** 12)  # would run for days
    status, _ = s.request("GET", "/v2/health/ready")
    assert status == 200
    s.proc.send_signal(signal.SIGINT)
    read_stdout_until(s, "again to stop at once")
    s.proc.send_signal(signal.SIGINT)
    assert s.stop() == 130  # as cadre server's second Ctrl-C
    assert "stopping at once" in s.output, s.output
    with pytest.raises((http.client.HTTPException, OSError)):
        conn.getresponse()  # its request is dropped, as asked


@pytest.mark.parametrize("args, message", [
    (["--port", "99999"], "--port"),  # was taken modulo 65536, and printed as 99999
    (["--port", "-5"], "--port"),
    (["--max-request-bytes", "-1"], "--max-request-bytes"),  # was taken as 2^64 - 1
    (["--port", "0", "--port-file", "/nonexistent-folder/port"], "--port-file"),  # was a crash
    (["--port", "0", "--name", "a/b"], "--name: 'a/b'"),  # was served, and no route reached it
    # Misspelt devices are named as such, with or without a GPU (they read "no CUDA device").
    (["--port", "0", "--device", "cuda:x"], "--device: expected auto, cpu, cuda or cuda:N, not "
                                            "'cuda:x'"),
    (["--port", "0", "--device", "cudafoo"], "not 'cudafoo'"),
    (["--port", "0", "--device", "gpu"], "not 'gpu'"),
])
def test_bad_options_are_refused_naming_the_option(classifier, args, message):
    proc = subprocess.run([CADRE, "serve", classifier[1], *args], timeout=120,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.returncode == 2 and message in proc.stdout, proc.stdout
    assert "listening on" not in proc.stdout and "terminate" not in proc.stdout, proc.stdout


def test_serve_without_a_model_folder_is_a_usage_error():
    """`cadre serve` alone printed its help and exited 0, as if it had done something."""
    proc = subprocess.run([CADRE, "serve"], timeout=60, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == [
        "cadre serve: the argument model_dir is required (the model folder saved by "
        "cadre.save_model)"], proc.stderr
    assert subprocess.run([CADRE, "serve", "--help"], timeout=60,
                          stdout=subprocess.DEVNULL).returncode == 0


def signature_file(shape):
    return lambda d: open(os.path.join(d, "model.json"), "w").write(json.dumps({
        "inputs": [{"name": "x", "datatype": "FP32", "shape": shape}],
        "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 2]}]}))


@pytest.mark.parametrize("setup, message", [
    (lambda d: None, "model.json does not exist"),
    # Dimensions whose product overflows, or past int64: refused before any allocation.
    (signature_file([-1, 2 ** 30, 2 ** 30, 2 ** 30]), "one row is over 1024 MiB of FP32"),
    (signature_file([-1, 2 ** 64 - 1]), "inputs[0].shape[1]: 18446744073709551615"),
    (signature_file([-1, -3]), "inputs[0].shape[1]: -3"),
    (lambda d: open(os.path.join(d, "model.json"), "w").write('{"inputs": 3}'), "inputs:"),
    (lambda d: (open(os.path.join(d, "model.json"), "w").write(json.dumps({
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 2]}],
        "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 2]}]})),
        open(os.path.join(d, "model.pt"), "w").write("not a model")),
     "is not a TorchScript model"),
])
def test_a_bad_model_folder_is_refused_with_the_reason(tmp_path, setup, message):
    setup(str(tmp_path))
    proc = subprocess.run([CADRE, "serve", str(tmp_path)], timeout=120,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.returncode == 2 and message in proc.stdout, proc.stdout


def test_fashion_mnist_trained_by_cadre_run_scores_as_it_printed(tmp_path):
    """Train the Horovod example briefly, serve its model, and score the test set."""
    examples = os.path.join(ROOT, "examples", "fashion_mnist")
    env = dict(os.environ)
    env.pop("CADRE_HOSTS_METHOD", None)
    proc = subprocess.run(
        [CADRE, "run", "-n", "2", "--compute", "cpu", "--framework", "pytorch-horovod",
         "--grace", "5", "--results-dir", str(tmp_path / "runs"), "--",
         "python3", os.path.join(examples, "train_horovod.py"), "--epochs", "1",
         "--max-batches", "150"],
        cwd=tmp_path, env=env, timeout=600, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (job_dir,) = list((tmp_path / "runs").iterdir())
    printed = float((job_dir / "accuracy.txt").read_text())
    assert printed > 0.6, "the example did not learn (%.3f)" % printed

    import gzip
    import numpy as np
    data = "/usr/share/datasets/fashion-mnist"
    with gzip.open(os.path.join(data, "t10k-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(), dtype=np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(data, "t10k-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), dtype=np.uint8, offset=8).astype(np.int64)
    x = (torch.from_numpy(images.copy()).float().div_(255) - 0.2860) / 0.3530

    model = torch.jit.load(str(job_dir / "model" / "model.pt"))
    with torch.no_grad():
        eager_pred = model(x[:100]).argmax(1)
    with open(job_dir / "model" / "model.json") as f:
        names = json.load(f)["labels"]

    s = Server(str(job_dir / "model"), "--name", "fmnist")
    try:
        # 100 images through each route: the same predictions as the model in PyTorch.
        status, doc = s.predict("fmnist", ["input"], [[img.tolist()] for img in x[:100]])
        assert status == 200, doc
        assert [v[0] for v in doc["predictions"][0]["values"]] == [names[i] for i in eager_pred]
        status, doc = s.infer("fmnist", {"input": ("FP32", [100, 1, 28, 28],
                                                   x[:100].flatten().tolist())})
        assert status == 200, doc
        served = torch.tensor(doc["outputs"][0]["data"]).view(100, 10).argmax(1)
        assert torch.equal(served, eager_pred)
        # The whole test set, 1000 images a request: the accuracy the training printed.
        correct = 0
        for start in range(0, len(x), 1000):
            chunk = x[start:start + 1000]
            status, doc = s.infer("fmnist", {"input": ("FP32", list(chunk.shape),
                                                       chunk.flatten().tolist())})
            assert status == 200, doc
            pred = torch.tensor(doc["outputs"][0]["data"]).view(-1, 10).argmax(1)
            correct += int((pred == torch.from_numpy(labels[start:start + 1000])).sum())
        assert abs(correct / len(x) - printed) <= 0.01, (correct / len(x), printed)
    finally:
        assert s.stop() == 0, s.output
