# A Horovod training script as users have them, in the shape of Horovod's
# examples/pytorch/pytorch_mnist.py: torchvision's MNIST (downloaded under a file lock unless
# already in --data-dir), DistributedSampler for the training and the test data, the learning
# rate scaled by the number of workers, broadcast_parameters and broadcast_optimizer_state,
# DistributedOptimizer with named_parameters, compression and op, metric_average through
# hvd.allreduce, output on the first rank only, and `horovod.run` when --num-proc is given.
# Nothing in it knows about cadre: test_horovod_examples.py runs it with `cadre run`.
import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data.distributed
from filelock import FileLock
from torchvision import datasets, transforms

import horovod
import horovod.torch as hvd

parser = argparse.ArgumentParser(description="PyTorch MNIST Example")
parser.add_argument("--batch-size", type=int, default=64, metavar="N")
parser.add_argument("--test-batch-size", type=int, default=1000, metavar="N")
parser.add_argument("--epochs", type=int, default=1, metavar="N")
parser.add_argument("--batches-per-epoch", type=int, default=0, metavar="N",
                    help="stop each epoch after N batches (0: the whole epoch)")
parser.add_argument("--lr", type=float, default=0.01, metavar="LR")
parser.add_argument("--momentum", type=float, default=0.5, metavar="M")
parser.add_argument("--no-cuda", action="store_true", default=False)
parser.add_argument("--seed", type=int, default=42, metavar="S")
parser.add_argument("--log-interval", type=int, default=10, metavar="N")
parser.add_argument("--fp16-allreduce", action="store_true", default=False,
                    help="use fp16 compression during allreduce")
parser.add_argument("--use-adasum", action="store_true", default=False)
parser.add_argument("--gradient-predivide-factor", type=float, default=1.0)
parser.add_argument("--data-dir", default=os.environ.get("DATA_DIR", "./data"),
                    help="where MNIST is, or is downloaded to (default: $DATA_DIR, the "
                         "WML/FfDL learner contract's, else ./data)")
parser.add_argument("--num-proc", type=int, help="run through horovod.run, not horovodrun")


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


def train(args):
    def train_epoch(epoch):
        model.train()
        # Horovod: a new shuffle of the partitions every epoch.
        train_sampler.set_epoch(epoch)
        for batch_idx, (data, target) in enumerate(train_loader):
            if args.batches_per_epoch and batch_idx >= args.batches_per_epoch:
                break
            if args.cuda:
                data, target = data.cuda(), target.cuda()
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()
            if batch_idx % args.log_interval == 0:
                # Horovod: the length of this worker's partition.
                print("Train Epoch: {} [{}/{}]\tLoss: {:.6f}".format(
                    epoch, batch_idx * len(data), len(train_sampler), loss.item()), flush=True)

    def metric_average(val, name):
        tensor = torch.tensor(val)
        avg_tensor = hvd.allreduce(tensor, name=name)
        return avg_tensor.item()

    def test():
        model.eval()
        test_loss, test_accuracy = 0.0, 0.0
        with torch.no_grad():
            for data, target in test_loader:
                if args.cuda:
                    data, target = data.cuda(), target.cuda()
                output = model(data)
                test_loss += F.nll_loss(output, target, reduction="sum").item()
                pred = output.max(1, keepdim=True)[1]
                test_accuracy += pred.eq(target.view_as(pred)).float().sum().item()
        # Horovod: this worker's share of the test set.
        test_loss /= len(test_sampler)
        test_accuracy /= len(test_sampler)
        # Horovod: average the metrics over the workers.
        test_loss = metric_average(test_loss, "avg_loss")
        test_accuracy = metric_average(test_accuracy, "avg_accuracy")
        if hvd.rank() == 0:
            print("\nTest set: Average loss: {:.4f}, Accuracy: {:.2f}%\n".format(
                test_loss, 100.0 * test_accuracy), flush=True)

    # Horovod: initialize the library.
    hvd.init()
    torch.manual_seed(args.seed)
    if args.cuda:
        # Horovod: one GPU per process, by local rank.
        torch.cuda.set_device(hvd.local_rank())
        torch.cuda.manual_seed(args.seed)
    # Horovod: limit the CPU threads of each worker.
    torch.set_num_threads(1)

    data_dir = args.data_dir
    normalize = transforms.Compose([transforms.ToTensor(),
                                    transforms.Normalize((0.1307,), (0.3081,))])
    with FileLock(os.path.join(data_dir, ".horovod_lock")):
        train_dataset = datasets.MNIST(data_dir, train=True, download=True, transform=normalize)
    # Horovod: partition the training data with DistributedSampler.
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_dataset, num_replicas=hvd.size(), rank=hvd.rank())
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size,
                                               sampler=train_sampler)
    test_dataset = datasets.MNIST(data_dir, train=False, transform=normalize)
    test_sampler = torch.utils.data.distributed.DistributedSampler(
        test_dataset, num_replicas=hvd.size(), rank=hvd.rank())
    test_loader = torch.utils.data.DataLoader(test_dataset, batch_size=args.test_batch_size,
                                              sampler=test_sampler)

    model = Net()
    # Adasum needs no scaling of the learning rate.
    lr_scaler = hvd.size() if not args.use_adasum else 1
    if args.cuda:
        model.cuda()
        if args.use_adasum and hvd.nccl_built():
            lr_scaler = hvd.local_size()
    optimizer = optim.SGD(model.parameters(), lr=args.lr * lr_scaler, momentum=args.momentum)

    # Horovod: start every worker from rank 0's weights and optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    # Horovod: average the gradients with allreduce.
    optimizer = hvd.DistributedOptimizer(optimizer,
                                         named_parameters=model.named_parameters(),
                                         compression=compression,
                                         op=hvd.Adasum if args.use_adasum else hvd.Average,
                                         gradient_predivide_factor=args.gradient_predivide_factor)

    for epoch in range(1, args.epochs + 1):
        train_epoch(epoch)
        test()

    # The workers must have trained one model: compare a checksum of every worker's weights.
    checksum = float(sum(p.double().sum() for p in model.state_dict().values()))
    checksums = hvd.allgather_object(checksum)
    if hvd.rank() == 0:
        print("Replicas identical: {} ({} workers)".format(len(set(checksums)) == 1,
                                                           len(checksums)), flush=True)


if __name__ == "__main__":
    args = parser.parse_args()
    args.cuda = not args.no_cuda and torch.cuda.is_available()
    if args.num_proc:
        print("Running training through horovod.run", flush=True)
        horovod.run(train, args=(args,), np=args.num_proc)
    else:
        train(args)
