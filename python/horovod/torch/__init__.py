"""``horovod.torch``: the same module object as cadre.torch (see cadre/torch/__init__.py)."""
import sys

import cadre.torch as _impl

# Make `horovod.torch` *be* cadre.torch, so module attributes and submodules are shared
# (`horovod.torch.mpi_ops`, `horovod.torch.compression`, ...).
sys.modules[__name__] = _impl
for _sub in ("mpi_ops", "compression", "optimizer", "functions", "sync_batch_norm", "basics",
             "elastic", "elastic.sampler", "elastic.state"):
    sys.modules[__name__ + "." + _sub] = sys.modules["cadre.torch." + _sub]
