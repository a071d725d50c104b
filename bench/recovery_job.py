# One rank of bench/recovery.py's job: Horovod mode, a small model trained step by step. Every
# line it prints carries time.time(), so the bench can line up the death of a learner with the
# restarted job's first training step.
#   START t=...         the interpreter runs this file (before torch is imported)
#   TRAINING t=... restart=N   rank 0 finished its first step of this start
#   KILL t=...          rank 1 kills itself (first start only, at step --kill-step)
import os
import signal
import sys
import time

print("START t=%.6f restart=%s" % (time.time(), os.environ.get("CADRE_RESTART_COUNT")),
      flush=True)

import torch  # noqa: E402

import horovod.torch as hvd  # noqa: E402

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
kill_step = int(sys.argv[2]) if len(sys.argv) > 2 else 20
hvd.init()
restart = int(os.environ.get("CADRE_RESTART_COUNT") or 0)
model = torch.nn.Linear(256, 256)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                               named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
x = torch.randn(32, 256)
for step in range(steps):
    if restart == 0 and hvd.rank() == 1 and step == kill_step:
        print("KILL t=%.6f" % time.time(), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()
    if step == 0 and hvd.rank() == 0:
        print("TRAINING t=%.6f restart=%d" % (time.time(), restart), flush=True)
