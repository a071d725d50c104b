"""Horovod's package name, served by cadre: ``import horovod.torch as hvd`` is cadre.torch.

Scripts written for Horovod run unchanged under ``cadre run --framework pytorch-horovod``;
no Horovod build, mpirun or ssh is involved.
"""
__version__ = "0.28.1+cadre"


def _unsupported(module, why):
    """Raises the ImportError (ModuleNotFoundError) a script gets for a part of Horovod cadre
    does not serve, saying why and what to use instead; `except ImportError` still catches it."""
    raise ModuleNotFoundError("%s is not supported by cadre: %s" % (module, why), name=module)


def run(*args, **kwargs):
    """Horovod's programmatic launcher (horovod.runner.run) is not served: cadre starts the
    ranks itself."""
    raise NotImplementedError(
        "horovod.run() starts its own workers, which cadre does not do: put the training "
        "function in a script and start it with `cadre run -n LEARNERS --compute cpux2 "
        "--framework pytorch-horovod -- python3 script.py` (docs/horovod.md)")
