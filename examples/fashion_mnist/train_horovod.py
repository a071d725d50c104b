"""Fashion-MNIST with PyTorch in Horovod mode (`pytorch-horovod`): a single-process training
script plus the lines marked "# Horovod" — exactly what a Horovod user writes, and
`import horovod.torch as hvd` works the same. Run it with
`cadre run examples/fashion_mnist/horovod.yaml`; started by hand it is a job of size 1.

It checkpoints after every epoch (rank 0, to CHECKPOINT_DIR) and resumes from the checkpoint
when one is there, so under `cadre run --max-restarts 1` a learner killed mid-epoch costs only
that epoch: the job restarts and carries on from the last one finished. Each epoch seeds its own
random numbers, so a resumed epoch is the epoch an undisturbed run would have trained."""
import argparse
import gzip
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import cadre
import cadre.torch as hvd  # Horovod

parser = argparse.ArgumentParser(description="Fashion-MNIST, PyTorch, Horovod mode")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--momentum", type=float, default=0.9)
parser.add_argument("--seed", type=int, default=42)
parser.add_argument("--max-batches", type=int, default=os.environ.get("FASHION_MNIST_MAX_BATCHES", "0"),
                    help="stop each epoch early (0: no; default $FASHION_MNIST_MAX_BATCHES, for a quick try)")
parser.add_argument("--fp16-allreduce", action="store_true")
parser.add_argument("--no-cuda", action="store_true", help="train on the CPU even with a GPU")
DEBIAN_DATA = "/usr/share/datasets/fashion-mnist"
# The job's DATA_DIR when it holds the data (a manifest's training_data_reference), else Debian's.
DEFAULT_DATA = os.environ.get("DATA_DIR", DEBIAN_DATA)
if not os.path.exists(os.path.join(DEFAULT_DATA, "train-images-idx3-ubyte.gz")):
    DEFAULT_DATA = DEBIAN_DATA
parser.add_argument("--data-dir", default=DEFAULT_DATA)
parser.add_argument("--result-dir", default=os.environ.get("RESULT_DIR", "."))
parser.add_argument("--checkpoint-dir", default=os.environ.get("CHECKPOINT_DIR", ""),
                    help="where the per-epoch checkpoint goes (empty: none)")
parser.add_argument("--log-interval", type=int, default=100, help="batches between loss lines")
# The classes of Fashion-MNIST, in label order: the saved model answers with these names.
LABELS = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
          "Bag", "Ankle boot"]


def save_checkpoint(path, epoch, model, optimizer):
    """Rank 0 only: written to a temporary file and renamed, so a kill mid-write leaves the
    previous checkpoint whole."""
    tmp = path + ".tmp"
    torch.save({"epoch": epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict()},
               tmp)
    os.replace(tmp, path)


def resume(path, model, optimizer):
    """The first epoch to train: 1, or the one after the checkpoint's. Rank 0 reads the
    checkpoint; every rank gets its weights and optimizer state by broadcast."""
    epoch = 0
    if hvd.rank() == 0 and path and os.path.exists(path):
        saved = torch.load(path, map_location="cpu")
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        epoch = saved["epoch"]
    epoch = hvd.broadcast_object(epoch, root_rank=0, name="resume_epoch")  # Horovod
    if epoch and hvd.rank() == 0:
        print("resuming after epoch %d from %s (restart %s)"
              % (epoch, path, os.environ.get("CADRE_RESTART_COUNT", "0")), flush=True)
    return epoch + 1


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data_dir, train):
    prefix = "train" if train else "t10k"
    images = read_idx(os.path.join(data_dir, prefix + "-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, prefix + "-labels-idx1-ubyte.gz"))
    x = (torch.from_numpy(images.copy()).float().div_(255) - 0.2860) / 0.3530
    return torch.utils.data.TensorDataset(x.unsqueeze(1), torch.from_numpy(labels.astype(np.int64)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=3, padding=1)
        self.drop = nn.Dropout(0.25)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = self.drop(F.relu(self.fc1(x.flatten(1))))
        return F.log_softmax(self.fc2(x), dim=1)


def main():
    args = parser.parse_args()
    hvd.init()  # Horovod
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    device = torch.device("cpu")
    if torch.cuda.is_available() and not args.no_cuda:
        # Horovod: pin the slot's GPU. Under `cadre run` local rank k's own GPU is device k; the
        # modulo lets slots started by hand share the GPUs there are.
        torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
    train_set, test_set = load(args.data_dir, True), load(args.data_dir, False)
    sampler = torch.utils.data.distributed.DistributedSampler(  # Horovod: this rank's share
        train_set, num_replicas=hvd.size(), rank=hvd.rank(), seed=args.seed)  # Horovod
    loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(),  # Horovod: lr x size
                                momentum=args.momentum)
    checkpoint = args.checkpoint_dir and os.path.join(args.checkpoint_dir,
                                                      "fashion_mnist_horovod.pt")
    first_epoch = resume(checkpoint, model, optimizer)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)  # Horovod
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)  # Horovod
    optimizer = hvd.DistributedOptimizer(  # Horovod
        optimizer, named_parameters=model.named_parameters(),  # Horovod
        compression=hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none)

    start = time.time()
    step = (first_epoch - 1) * len(loader)  # batches trained, over the epochs
    for epoch in range(first_epoch, args.epochs + 1):
        model.train()
        sampler.set_epoch(epoch)
        torch.manual_seed(args.seed + 1000 * epoch + hvd.rank())  # this epoch's dropout
        for i, (x, y) in enumerate(loader):
            if args.max_batches and i >= args.max_batches:
                break
            step = (epoch - 1) * len(loader) + i
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            optimizer.zero_grad()
            loss = F.nll_loss(model(x), y)
            loss.backward()
            optimizer.step()
            if i % args.log_interval == 0:
                avg = hvd.allreduce(loss.detach(), name="train_loss").item()  # Horovod
                if hvd.rank() == 0:
                    print("epoch %d batch %d/%d loss %.4f (%.0f s)"
                          % (epoch, i, len(loader), avg, time.time() - start), flush=True)
                    # The job service's curves (cadre server); outside a cadre job, nothing.
                    cadre.log_metrics(step, loss=avg)
        if checkpoint and hvd.rank() == 0:
            save_checkpoint(checkpoint, epoch, model, optimizer)

    # Each rank scores its share of the test set; the counts are summed across ranks.
    model.eval()
    with torch.no_grad():
        x, y = test_set.tensors
        mine = slice(hvd.rank(), None, hvd.size())
        correct = (model(x[mine].to(device)).argmax(1) == y[mine].to(device)).sum()
    correct = int(hvd.allreduce(correct, op=hvd.Sum, name="test_correct").item())  # Horovod
    accuracy = correct / len(y)
    if hvd.rank() == 0:
        print("test accuracy %.4f (%d/%d) after %.0f s on %d ranks (%s)"
              % (accuracy, correct, len(y), time.time() - start, hvd.size(), device), flush=True)
        cadre.log_metrics(step, accuracy=accuracy)
        os.makedirs(args.result_dir, exist_ok=True)
        with open(os.path.join(args.result_dir, "accuracy.txt"), "w") as f:
            f.write("%.4f\n" % accuracy)
        # Serving: the trained model, for `cadre serve` and deployments (rank 0 only).
        saved = cadre.save_model(model, x[:1], path=os.path.join(args.result_dir, "model"),
                                 labels=LABELS)
        print("model saved to %s" % saved, flush=True)


if __name__ == "__main__":
    main()
