"""Fashion-MNIST with PyTorch in parameter-server mode (`pytorch`): the worker side. Every
learner runs `python3 launcher.py ps_train.py ...`; the launcher turns learners
1..PS_HOSTS_COUNT into parameter servers and runs this script on the others (workers). The lines
marked "# PS" are what a single-process script needs for parameter-server training.

Run it with `cadre run examples/fashion_mnist/ps_sync.yaml` (sync) or `ps_async.yaml`."""
import argparse
import os
import time

import torch
import torch.nn.functional as F

import cadre
import cadre.ps as ps  # PS
from train_horovod import LABELS, Net, load  # the Horovod example's model and data loading

parser = argparse.ArgumentParser(description="Fashion-MNIST, PyTorch, parameter-server mode")
parser.add_argument("--mode", choices=["sync", "async"], default="sync")
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--lr", type=float, default=0.02)
parser.add_argument("--momentum", type=float, default=0.9)
parser.add_argument("--seed", type=int, default=42)
parser.add_argument("--max-batches", type=int, default=os.environ.get("FASHION_MNIST_MAX_BATCHES", "0"),
                    help="stop each epoch early (0: no; default $FASHION_MNIST_MAX_BATCHES, for a quick try)")
parser.add_argument("--data-dir", default=os.environ.get("DATA_DIR",
                                                         "/usr/share/datasets/fashion-mnist"))
parser.add_argument("--result-dir", default=os.environ.get("RESULT_DIR", "."))


def main():
    args = parser.parse_args()
    me = ps.learner_role()  # PS
    worker, workers = me["worker_id"], me["num_workers"]  # PS
    torch.manual_seed(args.seed + worker)
    torch.set_num_threads(1)
    train_set, test_set = load(args.data_dir, True), load(args.data_dir, False)
    sampler = torch.utils.data.distributed.DistributedSampler(  # PS: this worker's share
        train_set, num_replicas=workers, rank=worker, seed=args.seed)
    loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    # PS: the variables live on the servers, which apply SGD with momentum; every worker starts
    # from the first worker's initial values.
    optimizer = ps.DistributedOptimizer(optimizer, model=model, mode=args.mode)  # PS

    start = time.time()
    for epoch in range(1, args.epochs + 1):
        model.train()
        sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(loader):
            if args.max_batches and i >= args.max_batches:
                break
            optimizer.zero_grad()
            loss = F.nll_loss(model(x), y)
            loss.backward()
            optimizer.step()  # PS: push gradients, pull the updated parameters
            if i % 100 == 0 and worker == 0:
                print("epoch %d batch %d/%d loss %.4f (%.0f s)"
                      % (epoch, i, len(loader), loss.item(), time.time() - start), flush=True)
    optimizer.pull_parameters()  # PS: the latest values (async: other workers' last pushes too)
    optimizer.done()  # PS: the servers stop once every worker is done

    if worker == 0:
        model.eval()
        with torch.no_grad():
            x, y = test_set.tensors
            correct = int((model(x).argmax(1) == y).sum())
        accuracy = correct / len(y)
        print("test accuracy %.4f (%d/%d) after %.0f s, %s mode, %d workers"
              % (accuracy, correct, len(y), time.time() - start, args.mode, workers), flush=True)
        os.makedirs(args.result_dir, exist_ok=True)
        with open(os.path.join(args.result_dir, "accuracy.txt"), "w") as f:
            f.write("%.4f\n" % accuracy)
        # Serving: the trained model, for `cadre serve` and deployments (the first worker only).
        saved = cadre.save_model(model, x[:1], path=os.path.join(args.result_dir, "model"),
                                 labels=LABELS)
        print("model saved to %s" % saved, flush=True)


if __name__ == "__main__":
    main()
