"""``horovod.common.exceptions``: Horovod's exception types, cadre's own classes."""
from cadre.torch.basics import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
