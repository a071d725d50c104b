# One rank of test_torch_failures.py's stall job: rank 0 submits a tensor that no other rank
# submits, while the others wait in a barrier that rank 0 never enters. With
# HOROVOD_STALL_SHUTDOWN_TIME_SECONDS set, every rank must fail with the stall report naming
# the tensors and the ranks missing them (exit 3), not hang. SIGTERM is blocked for the reason
# given in torch_job_killed.py: the runner stops the others when the first rank exits.
import signal
import sys

signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

import torch  # noqa: E402

import horovod.torch as hvd  # noqa: E402

hvd.init()
r = hvd.rank()
hvd.allreduce(torch.ones(1), name="warm_up")  # every rank is up before the stall starts
try:
    if r == 0:
        hvd.allreduce(torch.ones(3), op=hvd.Sum, name="lonely")
    else:
        hvd.barrier()
except hvd.HorovodInternalError as e:
    print("FAILED:", e, flush=True)
    sys.exit(3)
print("finished without noticing", flush=True)
