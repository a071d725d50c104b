"""``horovod.runner``: not served by cadre; importing it says so (horovod._unsupported)."""
from horovod import _unsupported

_unsupported(__name__, "start scripts with `cadre run --framework pytorch-horovod` instead of horovodrun")
