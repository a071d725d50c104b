"""``horovod.keras``: not served by cadre; importing it says so (horovod._unsupported)."""
from horovod import _unsupported

_unsupported(__name__, "only horovod.torch (PyTorch) is served")
