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


def _clean(monkeypatch):
    for other in ("CADRE_SIZE", "CADRE_RANK", "HOROVOD_SIZE", "HOROVOD_RANK", "CADRE_STORE",
                  "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MV2_COMM_WORLD_SIZE"):
        monkeypatch.delenv(other, raising=False)


@pytest.mark.parametrize("name", ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"])
def test_a_script_started_by_mpirun_is_told_to_use_cadre_run(monkeypatch, name):
    # `mpirun -np 4 python3 train.py`: without this each process trained alone as size 1.
    _clean(monkeypatch)
    monkeypatch.setenv(name, "4")
    with pytest.raises(ValueError, match=r"one of 4 started by an MPI launcher \(%s=4\).*"
                                         r"cadre run -n LEARNERS" % name):
        hvd.init()
    assert not hvd.is_initialized()
    monkeypatch.setenv(name, "1")  # one process: nothing to join
    hvd.init()
    hvd.shutdown()
    # Under `cadre run --backend mpi` the learner contract is there too, and wins.
    monkeypatch.setenv(name, "4")
    monkeypatch.setenv("CADRE_SIZE", "1")
    hvd.init()
    assert hvd.size() == 1
    hvd.shutdown()


def test_horovod_size_without_cadres_store_names_the_variable(monkeypatch):
    # What horovodrun (Gloo) gives a script: HOROVOD_SIZE, no CADRE_STORE.
    _clean(monkeypatch)
    monkeypatch.setenv("HOROVOD_SIZE", "2")
    monkeypatch.setenv("HOROVOD_RANK", "0")
    with pytest.raises(ValueError, match="HOROVOD_SIZE=2 but CADRE_STORE is not set"):
        hvd.init()
