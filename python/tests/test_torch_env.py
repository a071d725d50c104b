"""The learner's environment as `import horovod.torch` reads it, in one process (a job of size 1):
a value that is not what its variable means is refused at init, naming the variable."""
import pytest

pytest.importorskip("torch")

import horovod.torch as hvd  # noqa: E402


@pytest.mark.parametrize("name", ["CADRE_TIMEOUT_SECONDS", "HOROVOD_GLOO_TIMEOUT_SECONDS"])
@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "1e300", "soon"])
def test_a_timeout_that_is_not_seconds_above_zero_is_refused_by_name(monkeypatch, name, value):
    # "-1" once reached the engine, and every rank failed with "cannot reach the store".
    for other in ("CADRE_SIZE", "CADRE_RANK", "HOROVOD_SIZE", "HOROVOD_RANK", "CADRE_STORE",
                  "CADRE_TIMEOUT_SECONDS", "HOROVOD_GLOO_TIMEOUT_SECONDS"):
        monkeypatch.delenv(other, raising=False)
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match="%s='%s' is not a number of seconds" % (name, value)):
        hvd.init()
    monkeypatch.setenv(name, "2.5")
    hvd.init()
    hvd.shutdown()
