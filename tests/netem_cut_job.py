# One rank of test_run_netem_restart.py's job, on emulated nodes: Horovod-mode training; in the
# job's first start rank 1 takes its own link down after step 5 (its interface in its network
# namespace) and goes silent, as a learner whose cable was pulled. The others must fail within
# CADRE_TIMEOUT_SECONDS naming it; the restarted job (links back up) trains to the end.
import os
import subprocess
import sys
import time

import torch

import horovod.torch as hvd

hvd.init()
restart = int(os.environ.get("CADRE_RESTART_COUNT") or 0)
model = torch.nn.Linear(16, 1)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                               named_parameters=model.named_parameters())
x = torch.randn(8, 16)
try:
    for step in range(20):
        if restart == 0 and hvd.rank() == 1 and step == 5:
            print("cutting my link", flush=True)
            subprocess.run(["ip", "link", "set", "eth0", "down"], check=True)
            # Unreachable from now on; only the others' timeout may end this start (the runner
            # then stops this rank), so the test sees who noticed.
            time.sleep(3600)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        print("step %d done (restart %d)" % (step, restart), flush=True)
except hvd.HorovodInternalError as e:
    print("FAILED at step %d: %s" % (step, e), flush=True)
    sys.exit(3)
print("DONE restart=%d" % restart, flush=True)
