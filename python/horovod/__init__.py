"""Horovod's package name, served by cadre: ``import horovod.torch as hvd`` is cadre.torch.

Scripts written for Horovod run unchanged under ``cadre run --framework pytorch-horovod``;
no Horovod build, mpirun or ssh is involved.
"""
__version__ = "0.28.1+cadre"
