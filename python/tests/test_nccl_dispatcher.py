"""The NCCL path's dispatcher thread (nccl_path.NcclPath), without a GPU: whatever goes wrong in
it fails the operations waiting for it, with the rank named, instead of leaving their
synchronize waiting forever for a thread that has died."""
import threading

import pytest

pytest.importorskip("torch")
from cadre.torch import nccl_path  # noqa: E402


class Core:
    """An engine handle whose done() raises, as a dead engine's might."""

    def __init__(self, error=None):
        self.error = error

    def done(self):
        if self.error:
            raise self.error
        return False

    def wait(self, timeout_s):
        threading.Event().wait(min(timeout_s, 0.01))
        return False


def test_an_error_in_the_dispatcher_fails_the_waiting_operations():
    path = nccl_path.NcclPath(rank=3, size=4, device=None, store_address=("127.0.0.1", 1),
                              timeout_s=5)
    broken = nccl_path.NcclOp(path, Core(RuntimeError("engine handle is gone")), None, None,
                              None, 0, 1.0, 1.0, None)
    with path._cond:
        path._outstanding.append(broken)
    path._thread = threading.Thread(target=path._loop, daemon=True)
    path._thread.start()
    try:
        assert broken.launched.wait(60), "the operation was never failed"
        with pytest.raises(RuntimeError, match=r"cadre: the NCCL path failed on rank 3: "
                                               r"RuntimeError: engine handle is gone"):
            broken.check()
        # The dispatcher lives on, and later operations fail at once with the same error.
        later = nccl_path.NcclOp(path, type("Done", (), {
            "done": lambda self: True, "wait": lambda self, t: True, "check": lambda self: None,
            "external_sequence": 7})(), None, None, None, 0, 1.0, 1.0, None)
        with path._cond:
            path._outstanding.append(later)
            path._cond.notify()
        assert later.launched.wait(60), "a later operation was never failed"
        with pytest.raises(RuntimeError, match="engine handle is gone"):
            later.check()
    finally:
        path.stop()
