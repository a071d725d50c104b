# Runs a Horovod-mode job script (argv[1], e.g. torch_job_collectives.py) with its tensors on a
# device, as `CADRE_TEST_DEVICE` says:
#   sim         every tensor the collectives see is on the simulated device of sim_device.py
#               (CPU tensors standing for GPU ones; the host is the compute stream, a thread
#               plays the GPU)
#   sim+copies  the same, and each collective's tensors are copies made for it, as with cuda
#   cuda        every dense tensor a collective is given moves to cuda:(local rank % GPUs)
#               first, and results come back to the CPU for the script's checks, which must
#               find them on the GPU (the in-place forms write back into the script's tensors;
#               hvd_on_device.py)
# so the script's closed-form checks run unchanged against cadre.torch's GPU paths.
import os
import runpy
import sys

import torch

import horovod.torch as hvd

HERE = os.path.dirname(os.path.abspath(__file__))
KIND = os.environ.get("CADRE_TEST_DEVICE", "sim")

if KIND in ("sim", "sim+copies"):
    import sim_device
    sim_device.install(sim_device.SimDevice(host_is_compute=True,
                                            seed=int(os.environ.get("CADRE_RANK", "0"))))
if KIND in ("sim+copies", "cuda"):
    import hvd_on_device
    hvd_on_device.install(hvd, "copies" if KIND == "sim+copies" else "cuda")
elif KIND != "sim":
    sys.exit("CADRE_TEST_DEVICE=%r: use sim, sim+copies or cuda" % KIND)

torch.manual_seed(0)
sys.argv = sys.argv[1:]
runpy.run_path(os.path.join(HERE, sys.argv[0]), run_name="__main__")
