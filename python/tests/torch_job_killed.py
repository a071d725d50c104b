# One rank of test_torch_failures.py: trains; rank 1 kills itself (SIGKILL) at step 3. The other
# ranks must fail with HorovodInternalError naming rank 1 — not hang.
import os
import signal
import sys

import torch

import horovod.torch as hvd

hvd.init()
m = torch.nn.Linear(8, 1)
opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.01),
                               named_parameters=m.named_parameters())
x = torch.randn(16, 8)
try:
    for step in range(1000):
        if hvd.rank() == 1 and step == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        opt.zero_grad()
        m(x).pow(2).mean().backward()
        opt.step()
except hvd.HorovodInternalError as e:
    print("FAILED:", e, flush=True)
    sys.exit(3)
print("finished without noticing", flush=True)
