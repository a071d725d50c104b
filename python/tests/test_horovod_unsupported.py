"""The parts of Horovod that cadre does not serve fail at import with a message that says so
and what to use instead, as an ImportError (so `try: import horovod.tensorflow except
ImportError` still works), and horovod.run() says how cadre starts ranks."""
import importlib
import sys

import pytest

import horovod


@pytest.mark.parametrize("module, words", [
    ("horovod.tensorflow", "only horovod.torch"),
    ("horovod.tensorflow.keras", "only horovod.torch"),
    ("horovod.keras", "only horovod.torch"),
    ("horovod.mxnet", "only horovod.torch"),
    ("horovod.spark", "not on Spark"),
    ("horovod.spark.torch", "not on Spark"),
    ("horovod.ray", "not on Ray"),
    ("horovod.runner", "instead of horovodrun"),
])
def test_unsupported_parts_say_so_at_import(module, words):
    with pytest.raises(ImportError) as info:
        importlib.import_module(module)
    assert isinstance(info.value, ModuleNotFoundError)
    top = ".".join(module.split(".")[:2])
    assert str(info.value).startswith("%s is not supported by cadre: " % top), info.value
    assert words in str(info.value) and info.value.name == top
    assert top not in sys.modules  # a failed import leaves nothing half-made behind


def test_horovod_run_says_how_cadre_starts_ranks():
    with pytest.raises(NotImplementedError, match="cadre run -n LEARNERS"):
        horovod.run(lambda: None, np=2)


def test_horovod_torch_is_cadre_torch():
    pytest.importorskip("torch")
    import cadre.torch
    import horovod.torch
    assert horovod.torch is cadre.torch
