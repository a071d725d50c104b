"""Fashion-MNIST with PyTorch in DDL mode (`pytorch-ddl`): a single-process training script plus
the lines marked "# DDL". Run it with `cadre run examples/fashion_mnist/ddl.yaml`; started by hand
it is one process of a job of size 1 and trains exactly as the single-process script does."""
import argparse
import gzip
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import cadre
import cadre.ddl as ddl  # DDL

parser = argparse.ArgumentParser(description="Fashion-MNIST, PyTorch, DDL mode")
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--momentum", type=float, default=0.9)
parser.add_argument("--seed", type=int, default=42)
parser.add_argument("--max-batches", type=int, default=os.environ.get("FASHION_MNIST_MAX_BATCHES", "0"),
                    help="stop each epoch early (0: no; default $FASHION_MNIST_MAX_BATCHES, for a quick try)")
parser.add_argument("--data-dir", default=os.environ.get("DATA_DIR",
                                                         "/usr/share/datasets/fashion-mnist"))
parser.add_argument("--result-dir", default=os.environ.get("RESULT_DIR", "."))
# The classes of Fashion-MNIST, in label order: the saved model answers with these names.
LABELS = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
          "Bag", "Ankle boot"]


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


class Net(nn.Module):  # the same network as train_horovod.py, so the accuracies compare
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
    ddl.init()  # DDL
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    train_set, test_set = load(args.data_dir, True), load(args.data_dir, False)
    train_set = torch.utils.data.Subset(  # DDL: this rank's share of the data
        train_set, range(ddl.rank(), len(train_set), ddl.size()))  # DDL
    loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * ddl.size(),  # DDL: lr x size
                                momentum=args.momentum)
    model, optimizer = ddl.wrap(model, optimizer)  # DDL

    for epoch in range(1, args.epochs + 1):
        model.train()
        for i, (x, y) in enumerate(loader):
            if args.max_batches and i >= args.max_batches:
                break
            optimizer.zero_grad()
            loss = F.nll_loss(model(x), y)
            loss.backward()
            optimizer.step()
            if i % 100 == 0 and ddl.rank() == 0:
                print("epoch %d batch %d loss %.4f" % (epoch, i, loss.item()), flush=True)

    model.eval()
    with torch.no_grad():
        x, y = test_set.tensors
        correct = (model(x).argmax(1) == y).sum().item()
    accuracy = correct / len(y)
    if ddl.rank() == 0:
        print("test accuracy %.4f (%d/%d)" % (accuracy, correct, len(y)), flush=True)
        os.makedirs(args.result_dir, exist_ok=True)
        with open(os.path.join(args.result_dir, "accuracy.txt"), "w") as f:
            f.write("%.4f\n" % accuracy)
        # Serving: the trained model, for `cadre serve` and deployments (rank 0 only).
        saved = cadre.save_model(model, x[:1], path=os.path.join(args.result_dir, "model"),
                                 labels=LABELS)
        print("model saved to %s" % saved, flush=True)


if __name__ == "__main__":
    main()
