"""``horovod.spark``: not served by cadre; importing it says so (horovod._unsupported)."""
from horovod import _unsupported

_unsupported(__name__, "cadre runs jobs itself (`cadre run`, `cadre submit`), not on Spark")
