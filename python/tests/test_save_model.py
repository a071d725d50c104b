"""cadre.save_model: the model folder (TorchScript + model.json) the scorer loads, and the
Fashion-MNIST examples in every mode leaving one in their job's results."""
import json
import os
import subprocess

import pytest

torch = pytest.importorskip("torch")
import cadre  # noqa: E402
from cadre import serving  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("CADRE_BUILD_DIR", os.path.join(ROOT, "build"))
EXAMPLES = os.path.join(ROOT, "examples", "fashion_mnist")


class Branchy(torch.nn.Module):  # control flow: scripting keeps both branches
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        y = self.drop(self.fc(x))
        if bool(y.sum() > 0):
            return y
        return -y


class Untypable(torch.nn.Module):  # **kwargs defeats torch.jit.script; tracing serves
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(2, 2)

    def forward(self, x, **options):
        return self.fc(x)


class TwoInTwoOut(torch.nn.Module):
    def forward(self, a, b):
        return a + b.float(), (a * 2).to(torch.int64)


def signature(path):
    with open(os.path.join(path, "model.json")) as f:
        return json.load(f)


def test_saves_torchscript_and_signature(tmp_path):
    torch.manual_seed(0)
    model = Branchy()
    model.train()
    x = torch.randn(5, 4)
    path = cadre.save_model(model, x, path=str(tmp_path / "m"), labels=["a", "b", "c"])
    assert path == str(tmp_path / "m")
    assert model.training, "the caller's model keeps its mode"
    sig = signature(path)
    assert sig["format"] == "cadre-model/1" and sig["model_file"] == "model.pt"
    assert sig["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 4]}]
    assert sig["outputs"] == [{"name": "output", "datatype": "FP32", "shape": [-1, 3]}]
    assert sig["labels"] == ["a", "b", "c"]
    loaded = torch.jit.load(os.path.join(path, "model.pt"))
    model.eval()
    with torch.no_grad():  # saved in eval mode: dropout off, same answers as the model
        assert torch.equal(loaded(x), model(x))
        assert torch.equal(loaded(-x), model(-x))
    assert sorted(os.listdir(path)) == ["model.json", "model.pt"]  # no temporary files left


def test_default_path_is_the_jobs_results(tmp_path, monkeypatch):
    monkeypatch.setenv("RESULT_DIR", str(tmp_path))
    path = cadre.save_model(torch.nn.Linear(3, 1), torch.zeros(1, 3))
    assert path == os.path.join(str(tmp_path), "model")
    assert signature(path)["outputs"][0]["shape"] == [-1, 1]


def test_falls_back_to_tracing(tmp_path):
    with pytest.warns(UserWarning, match="tracing"):
        path = cadre.save_model(Untypable(), torch.ones(2, 2), path=str(tmp_path))
    assert signature(path)["inputs"][0]["shape"] == [-1, 2]
    with pytest.raises(Exception):
        cadre.save_model(Untypable(), torch.ones(2, 2), path=str(tmp_path / "x"), method="script")


def test_several_inputs_and_outputs_with_names(tmp_path):
    path = cadre.save_model(TwoInTwoOut(), (torch.ones(1, 3), torch.ones(1, 3, dtype=torch.int32)),
                            path=str(tmp_path), input_names=["a", "b"],
                            output_names=["sum", "twice"])
    sig = signature(path)
    assert [(i["name"], i["datatype"]) for i in sig["inputs"]] == [("a", "FP32"), ("b", "INT32")]
    assert [(o["name"], o["datatype"], o["shape"]) for o in sig["outputs"]] == [
        ("sum", "FP32", [-1, 3]), ("twice", "INT64", [-1, 3])]
    assert "labels" not in sig


@pytest.mark.parametrize("kwargs, message", [
    ({"labels": ["only", "two"]}, "2 labels given"),
    ({"input_names": ["a", "a"]}, "distinct"),
    ({"method": "compile"}, "method must be"),
])
def test_bad_arguments_are_named(tmp_path, kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        cadre.save_model(Branchy(), torch.ones(1, 4), path=str(tmp_path / "m"), **kwargs)
    assert not os.path.exists(tmp_path / "m" / "model.json")


def test_a_scalar_example_has_no_batch_dimension(tmp_path):
    with pytest.raises(ValueError, match="batch dimension"):
        cadre.save_model(torch.nn.Identity(), torch.tensor(1.0), path=str(tmp_path))


class BatchMean(torch.nn.Module):  # answers one row for the whole batch
    def forward(self, x):
        return x.mean(dim=0, keepdim=True)


class FixedBatch(torch.nn.Module):  # traced, x.view(1, -1) fixes the batch at 1
    def forward(self, x, **options):
        return x.view(1, -1)


@pytest.mark.parametrize("model, example, message", [
    (BatchMean(), torch.zeros(3, 4), r"output 'output' has shape \[1, 4\] for an example of 3"),
    (torch.nn.Linear(3, 2), torch.zeros(3), r"shape \[2\] for an example of 3 row"),
    (FixedBatch(), torch.zeros(1, 4), r"example twice \(2 rows\) output 'output' has shape "
                                      r"\[1, 8\], not \[2, 4\].*torch.flatten"),
])
@pytest.mark.filterwarnings("ignore:cadre.save_model")  # FixedBatch is traced
def test_a_model_that_does_not_keep_the_batch_is_refused(tmp_path, model, example, message):
    # The scorer runs requests together along dimension 0: such a model would be served, then
    # fail (or answer wrongly) for requests of several rows.
    with pytest.raises(ValueError, match=message):
        cadre.save_model(model, example, path=str(tmp_path / "m"))
    assert not os.path.exists(tmp_path / "m" / "model.json")


def run_example(tmp_path, framework, nodes, compute, *command, parameter_servers=None):
    cadre_bin = os.path.join(BUILD, "cadre")
    if not os.path.exists(cadre_bin):
        pytest.fail("%s is not built" % cadre_bin)
    args = [cadre_bin, "run", "-n", str(nodes), "--compute", compute, "--framework", framework,
            "--grace", "5", "--data-dir", "/usr/share/datasets/fashion-mnist"]
    if parameter_servers:
        args += ["--parameter-servers", str(parameter_servers)]
    env = dict(os.environ)
    env.pop("CADRE_HOSTS_METHOD", None)
    proc = subprocess.run(args + ["--", "python3", *command], cwd=examples_copy(tmp_path),
                          env=env, timeout=300, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (job_dir,) = list((tmp_path / "ex" / "runs").iterdir())
    return job_dir, proc.stdout


def examples_copy(tmp_path):
    """A copy of the examples folder, so that the job's runs/ lands in tmp_path."""
    dest = tmp_path / "ex"
    if not dest.exists():
        dest.mkdir()
        for name in os.listdir(EXAMPLES):
            if name.endswith(".py"):
                (dest / name).write_text(open(os.path.join(EXAMPLES, name)).read())
    return str(dest)


def check_saved_model(job_dir):
    path = job_dir / "model"
    sig = signature(str(path))
    assert sig["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 1, 28, 28]}]
    assert sig["outputs"] == [{"name": "output", "datatype": "FP32", "shape": [-1, 10]}]
    assert sig["labels"][0] == "T-shirt/top" and len(sig["labels"]) == 10
    model = torch.jit.load(str(path / "model.pt"))
    with torch.no_grad():
        out = model(torch.zeros(3, 1, 28, 28))
    assert out.shape == (3, 10)
    assert torch.allclose(out.exp().sum(1), torch.ones(3), atol=1e-4)  # log-probabilities


EXAMPLE_ARGS = ["--epochs", "1", "--max-batches", "20"]


def test_horovod_example_saves_the_model(tmp_path):
    job_dir, out = run_example(tmp_path, "pytorch-horovod", 2, "cpu", "train_horovod.py",
                               *EXAMPLE_ARGS)
    assert out.count("model saved to") == 1, out  # rank 0 only
    check_saved_model(job_dir)


def test_ddl_example_saves_the_model(tmp_path):
    job_dir, out = run_example(tmp_path, "pytorch-ddl", 2, "cpu", "train_ddl.py", *EXAMPLE_ARGS)
    assert out.count("model saved to") == 1, out
    check_saved_model(job_dir)


def test_ps_example_saves_the_model(tmp_path):
    job_dir, out = run_example(tmp_path, "pytorch", 3, "cpu", "launcher.py", "ps_train.py",
                               *EXAMPLE_ARGS, parameter_servers=1)
    assert out.count("model saved to") == 1, out  # the first worker only
    check_saved_model(job_dir)


def test_datatypes_cover_the_scorers_names():
    assert set(serving.DATATYPES.values()) == {
        "FP32", "FP64", "FP16", "BF16", "INT64", "INT32", "INT16", "INT8", "UINT8", "BOOL"}
