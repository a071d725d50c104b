# One rank of test_torch_failures.py's lost-rank jobs: every rank trains; at step 3 one rank
# goes away — `kill`: rank 1 kills itself (SIGKILL); `exit`: rank 0 leaves its loop and exits
# normally (its atexit hvd.shutdown() stops the engine). The others must fail with
# HorovodInternalError naming that rank (exit 3), not hang.
#
# `cadre run` sends SIGTERM to the other slots as soon as it sees a slot fail. The survivors
# block it (before torch or the engine start threads, which inherit the mask), so that the test
# sees the library notice the lost peer by itself and the rank exit with its own code; the
# runner's SIGKILL after --grace still bounds them.
import os
import signal
import sys

signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

import torch  # noqa: E402

import horovod.torch as hvd  # noqa: E402

how = sys.argv[1] if len(sys.argv) > 1 else "kill"
if how not in ("kill", "exit"):
    sys.exit("usage: torch_job_killed.py [kill|exit]")
hvd.init()
leaver = 1 if how == "kill" else 0
m = torch.nn.Linear(8, 1)
opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.01),
                               named_parameters=m.named_parameters())
x = torch.randn(16, 8)
try:
    for step in range(100000):
        if hvd.rank() == leaver and step == 3:
            print("rank %d: leaving at step 3 (%s)" % (leaver, how), flush=True)
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            sys.exit(0)
        opt.zero_grad()
        m(x).pow(2).mean().backward()
        opt.step()
except hvd.HorovodInternalError as e:
    print("FAILED at step %d: %s" % (step, e), flush=True)
    sys.exit(3)
print("finished without noticing", flush=True)
