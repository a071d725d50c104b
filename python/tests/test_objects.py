"""broadcast_object and allgather_object in one process (a job of size 1): what cloudpickle
carries that the standard pickle does not (a lambda, a closure, a class defined in a function),
the hint without cloudpickle, and an object that cannot be pickled at all. The same at 4 ranks,
with the failure reported on every rank, is torch_job_api.py's "objects" checks."""
import io
import pickle
import threading

import pytest

torch = pytest.importorskip("torch")

import horovod.torch as hvd  # noqa: E402
from cadre.torch import objects  # noqa: E402


@pytest.fixture
def single(monkeypatch):
    for name in ("CADRE_SIZE", "CADRE_RANK", "HOROVOD_SIZE", "HOROVOD_RANK", "CADRE_STORE"):
        monkeypatch.delenv(name, raising=False)
    hvd.init()
    yield
    hvd.shutdown()


def make_local_class():
    scale = 3

    class Scaler:
        def __init__(self, t):
            self.t = t

        def apply(self):
            return self.t * scale

    return Scaler


def test_lambdas_closures_and_local_classes_travel(single):
    pytest.importorskip("cloudpickle")
    Scaler = make_local_class()
    offset = 5
    [got] = hvd.allgather_object({"fn": lambda x: x + offset, "cls": Scaler,
                                  "obj": Scaler(torch.ones(2))})
    assert got["fn"](1) == 6
    assert torch.equal(got["obj"].apply(), torch.full((2,), 3.0))
    assert got["cls"].__name__ == "Scaler"


def test_without_cloudpickle_the_error_says_what_to_install(single, monkeypatch):
    monkeypatch.setattr(objects, "_pickler", None)
    with pytest.raises(pickle.PicklingError) as info:
        hvd.allgather_object(lambda x: x)
    assert "rank 0 could not pickle its object" in str(info.value)
    assert "install python3-cloudpickle" in str(info.value)
    assert hvd.allgather_object({"plain": 1}) == [{"plain": 1}]  # plain objects still work


def test_an_unpicklable_object_fails_naming_the_rank_and_the_engine_goes_on(single):
    for call in (lambda: hvd.broadcast_object(threading.Lock(), root_rank=0),
                 lambda: hvd.allgather_object(threading.Lock())):
        with pytest.raises(pickle.PicklingError) as info:
            call()
        assert "rank 0 could not pickle its object (TypeError: cannot pickle" in str(info.value)
    assert hvd.broadcast_object([1, 2], root_rank=0) == [1, 2]


@pytest.mark.parametrize("location, cuda, count, current, want", [
    ("cpu", False, 0, 0, "cpu"),
    ("cuda:0", False, 0, 0, "cpu"),        # a rank without CUDA: the CPU
    ("cuda:3", False, 0, 0, "cpu"),
    ("cuda:1", True, 2, 0, "cuda:1"),      # a GPU this rank has: kept
    ("cuda:1", True, 1, 0, "cuda:0"),      # one GPU per slot: this rank's own
    ("cuda:5", True, 4, 2, "cuda:2"),
    ("cuda", True, 2, 1, "cuda"),          # no index: torch's current device
    ("mps", False, 0, 0, "mps"),           # not CUDA: left to torch
])
def test_tensors_go_to_a_device_this_rank_has(location, cuda, count, current, want):
    assert objects._restore_device(location, cuda, count, current) == want


def test_an_object_saved_with_cuda_tensors_loads_without_cuda(monkeypatch):
    # What another rank's GPU tensors look like in the pickle; torch.load alone refuses them
    # here ("Attempting to deserialize object on a CUDA device").
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the CPU fallback is not what happens here")
    monkeypatch.setattr(torch.serialization, "location_tag", lambda storage: "cuda:1")
    status, data = objects._dumps({"w": torch.arange(4.0), "n": 2})
    monkeypatch.undo()
    assert status == objects._OK
    with pytest.raises(RuntimeError, match="CUDA"):
        torch.load(io.BytesIO(data))
    got = objects._loads(data)
    assert got["n"] == 2 and got["w"].device.type == "cpu"
    assert torch.equal(got["w"], torch.arange(4.0))
