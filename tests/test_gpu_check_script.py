"""scripts/gpu-check.sh where it cannot run: it says so in one line, exit code 2, before building
anything (no traceback, no minutes of compiling first)."""
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "gpu-check.sh")
FILES = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
         "t10k-labels-idx1-ubyte"]


def run(tmp_path, python, device=None):
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    for name in FILES:
        (data / (name + ".gz")).write_bytes(b"")
    env = dict(os.environ, PYTHON=python, BUILD=str(tmp_path / "build-gpu"))
    env.pop("GPU_CHECK_DEVICE", None)
    if device is not None:
        env["GPU_CHECK_DEVICE"] = device
    return subprocess.run([SCRIPT, str(data)], env=env, cwd=str(tmp_path), capture_output=True,
                          text=True, timeout=120)


def test_an_interpreter_without_torch_is_named(tmp_path):
    no_torch = tmp_path / "python-without-torch"
    no_torch.write_text("#!/bin/sh\nexec /usr/bin/python3 -S \"$@\"\n")  # no site-packages
    no_torch.chmod(0o755)
    for device in (None, "sim"):
        proc = run(tmp_path, str(no_torch), device)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "has no PyTorch (No module named 'torch'); set PYTHON to the interpreter with a " \
            "CUDA PyTorch" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
        assert not (tmp_path / "build-gpu" / "build.ninja").exists()


def test_a_pytorch_without_a_gpu_stops_before_the_build(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: scripts/gpu-check.sh runs for real here")
    proc = run(tmp_path, "/usr/bin/python3")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "sees no GPU, so nothing can be checked on one; GPU_CHECK_DEVICE=sim runs the same " \
        "script on CPUs" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "build-gpu" / "build.ninja").exists()
    proc = run(tmp_path, "/usr/bin/python3", device="gpu")
    assert proc.returncode == 2
    assert "GPU_CHECK_DEVICE=gpu: use cuda (the default) or sim" in proc.stderr
