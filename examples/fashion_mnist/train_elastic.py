"""Fashion-MNIST with elastic Horovod (`hvd.elastic`): the training state lives in a TorchState,
the training function is wrapped in @hvd.elastic.run and commits every --commit-every batches.
The same pattern as Horovod's pytorch_mnist_elastic.py, run with
`cadre run examples/fashion_mnist/elastic.yaml` (3 learners, max_restarts 2, min_nodes 2).

Kill a learner while it trains (`kill -9` of a slot's pid from status.json): the runner stops
the job, starts it again on the 2 learners that are left, and training resumes from the last
commit on 2 ranks, the rest of the epoch split between them. See the README."""
import argparse
import os
import time

import torch
import torch.nn.functional as F

import horovod.torch as hvd
from train_horovod import DEBIAN_DATA, Net, load

parser = argparse.ArgumentParser(description="Fashion-MNIST, elastic Horovod")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--momentum", type=float, default=0.9)
parser.add_argument("--commit-every", type=int, default=20, help="batches between commits")
parser.add_argument("--max-batches", type=int, default=os.environ.get("FASHION_MNIST_MAX_BATCHES", "0"),
                    help="stop each epoch early (0: no; default $FASHION_MNIST_MAX_BATCHES, for a quick try)")
parser.add_argument("--data-dir", default=DEBIAN_DATA)
parser.add_argument("--result-dir", default=os.environ.get("RESULT_DIR", "."))


def main():
    args = parser.parse_args()
    hvd.init()
    torch.manual_seed(42)
    torch.set_num_threads(1)
    train_set, test_set = load(args.data_dir, True), load(args.data_dir, False)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(),
                                momentum=args.momentum)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(train_set, shuffle=True, seed=42)
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, sampler=sampler,
                                   epoch=0, batch=0)

    def on_reset():
        # A new number of ranks: the learning rate follows the size, as at the start.
        for group in optimizer.param_groups:
            group["lr"] = args.lr * hvd.size()

    state.register_reset_callbacks([on_reset])
    start = time.time()

    @hvd.elastic.run
    def train(state):
        if hvd.elastic.restart_count() and hvd.rank() == 0:
            print("restart %d: resuming at epoch %d batch %d on %d ranks"
                  % (hvd.elastic.restart_count(), state.epoch + 1, state.batch, hvd.size()),
                  flush=True)
        on_reset()
        for state.epoch in range(state.epoch, args.epochs):
            loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size,
                                                 sampler=state.sampler)
            model.train()
            for i, (x, y) in enumerate(loader):
                if args.max_batches and state.batch >= args.max_batches:
                    break
                optimizer.zero_grad()
                loss = F.nll_loss(model(x), y)
                loss.backward()
                optimizer.step()
                state.sampler.record_batch(i, args.batch_size)
                state.batch += 1
                if state.batch % args.commit_every == 0:
                    state.commit()
                    if hvd.rank() == 0:
                        print("epoch %d batch %d loss %.4f on %d ranks (%.0f s)"
                              % (state.epoch + 1, state.batch, loss.item(), hvd.size(),
                                 time.time() - start), flush=True)
            state.batch = 0
            state.sampler.set_epoch(state.epoch + 1)
            state.commit()

    train(state)

    model.eval()
    with torch.no_grad():
        x, y = test_set.tensors
        mine = slice(hvd.rank(), None, hvd.size())
        correct = (model(x[mine]).argmax(1) == y[mine]).sum()
    correct = int(hvd.allreduce(correct, op=hvd.Sum, name="test_correct").item())
    if hvd.rank() == 0:
        accuracy = correct / len(y)
        print("test accuracy %.4f (%d/%d) after %.0f s on %d ranks"
              % (accuracy, correct, len(y), time.time() - start, hvd.size()), flush=True)
        os.makedirs(args.result_dir, exist_ok=True)
        with open(os.path.join(args.result_dir, "accuracy.txt"), "w") as f:
            f.write("%.4f\n" % accuracy)


if __name__ == "__main__":
    main()
