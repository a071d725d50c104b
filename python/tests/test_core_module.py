import pytest


def test_core_module_loads_and_translates_errors():
    from cadre import _core

    assert issubclass(_core.CadreTimeoutError, _core.CadreError)
    assert issubclass(_core.CadreError, RuntimeError)


def test_parse_byte_size_is_the_cores_parser():
    from cadre import _core

    assert _core.parse_byte_size("4096") == 4096
    assert _core.parse_byte_size("64K") == _core.parse_byte_size("64KiB") == 64 << 10
    assert _core.parse_byte_size("16M") == 16 << 20
    assert _core.parse_byte_size("1G") == 1 << 30
    for bad in ("4X", "", "-1", "1.5", "4KB"):
        with pytest.raises(_core.CadreInvalidArgument, match="is not a byte count"):
            _core.parse_byte_size(bad)
