# One rank of test_torch_elastic.py's jobs: Horovod's elastic pattern (a TorchState with the
# model, optimizer, ElasticSampler and counters; an @hvd.elastic.run training function that
# commits after every step), unchanged from how Horovod users write it, plus a fault: in the
# job's first start, rank KILL_RANK kills itself with SIGKILL before step KILL_STEP. With
# --step-sleep S every step also takes S seconds more (time for the runner to act mid-training).
#
# Prints "STEP restart=<n> size=<size> step=<global step> epoch=<e> loss=<loss>" per step on
# rank 0 and writes the final model to OUT (rank 0).
import argparse
import os
import signal
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

import horovod.torch as hvd

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--kill-rank", type=int, default=-1)
parser.add_argument("--kill-step", type=int, default=-1)
parser.add_argument("--step-sleep", type=float, default=0.0)
parser.add_argument("--out", required=True)
args = parser.parse_args()

hvd.init()
restart = hvd.elastic.restart_count()
torch.manual_seed(0)
X = torch.randn(96, 4)
y = X @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.25
dataset = TensorDataset(X, y)
torch.manual_seed(1)
model = torch.nn.Linear(4, 1)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.5),
                                     named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=7)
state = hvd.elastic.TorchState(model=model, optimizer=optimizer, sampler=sampler, epoch=0,
                               step=0)


@hvd.elastic.run
def train(state):
    for state.epoch in range(state.epoch, args.epochs):
        loader = DataLoader(dataset, batch_size=8, sampler=state.sampler)
        for i, (xb, yb) in enumerate(loader):
            if restart == 0 and hvd.rank() == args.kill_rank and state.step == args.kill_step:
                print("rank %d: SIGKILL before step %d" % (hvd.rank(), state.step), flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            optimizer.step()
            state.sampler.record_batch(i, 8)
            time.sleep(args.step_sleep)
            if hvd.rank() == 0:
                print("STEP restart=%d size=%d step=%d epoch=%d loss=%.6f"
                      % (restart, hvd.size(), state.step, state.epoch, loss.item()), flush=True)
            state.step += 1
            state.commit()
        state.sampler.set_epoch(state.epoch + 1)
        state.commit()


train(state)
if hvd.rank() == 0:
    torch.save(model.state_dict(), args.out)
    print("DONE restart=%d commits=%d" % (restart, state.commits), flush=True)
