"""``horovod.common.elastic``: the state classes hvd.elastic builds on (cadre.torch.elastic)."""
from cadre.torch.basics import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
from cadre.torch.elastic import run as _run
from cadre.torch.elastic.state import ObjectState, State  # noqa: F401


def run_fn(func, reset=None):
    """Horovod's framework-neutral form of hvd.elastic.run (the reset is always the engine's
    shutdown and init under cadre)."""
    return _run(func)
