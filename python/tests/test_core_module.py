import pytest


def test_core_module_loads_and_translates_errors():
    from cadre import _core

    assert issubclass(_core.CadreTimeoutError, _core.CadreError)
    assert issubclass(_core.CadreError, RuntimeError)
