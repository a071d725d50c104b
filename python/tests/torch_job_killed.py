# One rank of test_torch_failures.py's killed-rank job: every rank trains; rank 1 kills itself
# (SIGKILL) at step 3. The others must fail with HorovodInternalError naming rank 1 (exit 3),
# not hang.
#
# `cadre run` sends SIGTERM to the other slots as soon as it sees rank 1 die. The survivors
# block it (before torch or the engine start threads, which inherit the mask), so that the test
# sees the library notice the dead peer by itself and the rank exit with its own code; the
# runner's SIGKILL after --grace still bounds them.
import os
import signal
import sys

signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

import torch  # noqa: E402

import horovod.torch as hvd  # noqa: E402

hvd.init()
m = torch.nn.Linear(8, 1)
opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.01),
                               named_parameters=m.named_parameters())
x = torch.randn(16, 8)
try:
    for step in range(100000):
        if hvd.rank() == 1 and step == 3:
            print("rank 1: killing itself at step 3", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        opt.zero_grad()
        m(x).pow(2).mean().backward()
        opt.step()
except hvd.HorovodInternalError as e:
    print("FAILED at step %d: %s" % (step, e), flush=True)
    sys.exit(3)
print("finished without noticing", flush=True)
