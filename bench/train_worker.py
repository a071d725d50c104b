# One rank of bench/train.py. Modes:
#   cadre   - a CNN (--model) trained with cadre.torch.DistributedOptimizer
#   ddp     - the same model, data and steps with torch DistributedDataParallel over gloo
#   local   - the same steps with no communication: one process is perfect scaling's base; n
#             processes at once each train alone (their rates summed)
#   grads   - allreduce a synthetic ResNet-50 gradient set (161 tensors, ~100 MB) per step with
#             cadre (fusion at the configured threshold), reporting ms per step
#   gloo    - the same gradient set with torch.distributed.all_reduce (gloo), every tensor
#             submitted at once (async_op) and then waited for, as cadre's mode does
#   latency - a 4-byte allreduce through cadre.torch, microseconds (cadre bench allreduce's rule)
# Rank 0 prints one line: RESULT <json>.
import argparse
import json
import os
import re
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("mode", choices=["cadre", "ddp", "local", "grads", "gloo", "latency"])
p.add_argument("--steps", type=int, default=40)
p.add_argument("--warmup", type=int, default=5)
p.add_argument("--batch-size", type=int, default=64)
p.add_argument("--model", choices=["mnist", "heavy"], default="mnist")
p.add_argument("--momentum", type=float, default=0.0)
p.add_argument("--fp16", action="store_true", help="fp16 gradient compression (cadre and DDP)")
args = p.parse_args()
torch.set_num_threads(1)
rank = int(os.environ["CADRE_RANK"])
size = int(os.environ["CADRE_SIZE"])


class Net(nn.Module):
    """The CNN of examples/fashion_mnist (Horovod's MNIST example network)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = F.relu(self.fc1(x.view(-1, 320)))
        return F.log_softmax(self.fc2(x), dim=1)


class Heavy(nn.Module):
    """A communication-heavy CNN for 28x28 inputs: about 10.7M parameters, nearly all in the
    first fully connected layer, so a step moves ~43 MB of gradients for little compute."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, kernel_size=3)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=3)
        self.fc1 = nn.Linear(9216, 1024)
        self.fc2 = nn.Linear(1024, 1200)
        self.fc3 = nn.Linear(1200, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return F.log_softmax(self.fc3(F.relu(self.fc2(x))), dim=1)


# ResNet-50's 161 parameter tensors (conv weights, batch-norm scale/shift, fc), ~25.6M floats.
def resnet50_shapes():
    shapes = [(64, 3, 7, 7), (64,), (64,)]
    inplanes = 64
    for planes, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for b in range(blocks):
            shapes += [(planes, inplanes, 1, 1), (planes,), (planes,),
                       (planes, planes, 3, 3), (planes,), (planes,),
                       (planes * 4, planes, 1, 1), (planes * 4,), (planes * 4,)]
            if b == 0:
                shapes += [(planes * 4, inplanes, 1, 1), (planes * 4,), (planes * 4,)]
            inplanes = planes * 4
    return shapes + [(1000, 2048), (1000,)]


def report(result):
    if rank == 0:
        print("RESULT " + json.dumps(result), flush=True)


def thread_stats():
    """Per thread id: its name ('main' for the main thread), CPU seconds used so far, seconds
    spent runnable but waiting for a CPU (the run queue: time other tasks took from it), and
    voluntary and involuntary context switches. Where a rank's CPU goes, which wall-clock figures
    on a busy machine hide. From /proc/self/task/*/schedstat (exact nanoseconds) where the kernel
    has it, else from stat's clock ticks (no run-queue figure)."""
    ticks = os.sysconf("SC_CLK_TCK")
    pid = os.getpid()
    out = {}
    for tid in os.listdir("/proc/self/task"):
        base = "/proc/self/task/%s/" % tid
        try:
            with open(base + "stat") as f:
                stat = f.read()
            with open(base + "status") as f:
                status = f.read()
            try:
                with open(base + "schedstat") as f:
                    run_ns, wait_ns = (int(x) for x in f.read().split()[:2])
                cpu, runq = run_ns / 1e9, wait_ns / 1e9
            except OSError:
                fields = stat[stat.rindex(")") + 2:].split()
                cpu, runq = (int(fields[11]) + int(fields[12])) / ticks, 0.0
        except OSError:
            continue  # the thread ended meanwhile
        name = "main" if int(tid) == pid else stat[stat.index("(") + 1:stat.rindex(")")]
        vol = int(re.search(r"^voluntary_ctxt_switches:\s*(\d+)", status, re.M).group(1))
        invol = int(re.search(r"^nonvoluntary_ctxt_switches:\s*(\d+)", status, re.M).group(1))
        out[tid] = (name, (cpu, runq, vol, invol))
    return out


def per_step(before, after, index, scale):
    """Figure `index` of thread_stats per timed step, summed by thread name over the threads
    that ran meanwhile (a thread that ended meanwhile is not counted)."""
    sums = {}
    for tid, (name, now) in after.items():
        then = before.get(tid, (name, (0.0, 0.0, 0, 0)))[1]
        if now[0] > then[0]:
            sums[name] = sums.get(name, 0) + now[index] - then[index]
    return {k: round(scale * v / args.steps, 2) for k, v in sums.items()}


last_cpu_ms_per_step = {}
last_thread_stats = {}


def timed_steps(step, before_timing=None):
    for _ in range(args.warmup):
        step()
    if before_timing:
        before_timing()
    s0 = thread_stats()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    secs = time.perf_counter() - t0
    s1 = thread_stats()
    last_cpu_ms_per_step.clear()
    last_cpu_ms_per_step.update(per_step(s0, s1, 0, 1000))
    # Per step: ms waiting in the run queue, voluntary and involuntary context switches.
    last_thread_stats.clear()
    last_thread_stats.update({"runq_ms": per_step(s0, s1, 1, 1000),
                              "voluntary": per_step(s0, s1, 2, 1),
                              "involuntary": per_step(s0, s1, 3, 1)})
    return secs


def train_setup():
    torch.manual_seed(0)
    model = Heavy() if args.model == "heavy" else Net()
    data = torch.randn(args.batch_size, 1, 28, 28)
    target = torch.randint(0, 10, (args.batch_size,))
    return model, data, target


def sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=args.momentum)


def train_throughput(model, opt, data, target, before_timing=None, total_rate=None):
    """Reports samples/s of SGD steps of `model` (plain, DDP-wrapped or with cadre's hooks):
    size x rank 0's rate, or total_rate(this rank's rate) when the ranks run at their own pace."""
    def step():
        opt.zero_grad()
        F.nll_loss(model(data), target).backward()
        opt.step()

    secs = timed_steps(step, before_timing)
    rate = args.steps * args.batch_size / secs
    report({"samples_per_s": total_rate(rate) if total_rate else rate * size,
            "ms_per_step": 1000 * secs / args.steps, "cpu_ms_per_step": last_cpu_ms_per_step,
            "per_step": last_thread_stats})


if args.mode == "cadre":
    import cadre.torch as hvd
    hvd.init()
    model, data, target = train_setup()
    compression = hvd.Compression.fp16 if args.fp16 else hvd.Compression.none
    opt = hvd.DistributedOptimizer(sgd(model), named_parameters=model.named_parameters(),
                                   compression=compression)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    train_throughput(model, opt, data, target)
    hvd.shutdown()
elif args.mode == "local" and size == 1:
    # The same steps with no communication at all: perfect scaling's base.
    model, data, target = train_setup()
    train_throughput(model, sgd(model), data, target)
elif args.mode == "local":
    # n processes each training alone at the same time: what the machine leaves for n ranks
    # before any communication. gloo only lines up the start of the timed steps and sums the
    # ranks' rates at the end; nothing is communicated during the steps.
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%s" % os.environ["BENCH_PORT"],
                            rank=rank, world_size=size)
    model, data, target = train_setup()

    def total_rate(mine):
        rate = torch.tensor([mine], dtype=torch.float64)
        dist.all_reduce(rate)
        return rate.item()

    train_throughput(model, sgd(model), data, target, before_timing=dist.barrier,
                     total_rate=total_rate)
    dist.destroy_process_group()
elif args.mode == "ddp":
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%s" % os.environ["BENCH_PORT"],
                            rank=rank, world_size=size)
    model, data, target = train_setup()
    ddp = nn.parallel.DistributedDataParallel(model)
    if args.fp16:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    train_throughput(ddp, sgd(ddp), data, target)
    dist.destroy_process_group()
elif args.mode in ("grads", "gloo"):
    grads = [torch.randn(s) for s in resnet50_shapes()]
    if args.mode == "grads":
        import cadre.torch as hvd
        hvd.init()

        def step():
            hs = [hvd.allreduce_async_(g, name="g%d" % i, op=hvd.Sum) for i, g in enumerate(grads)]
            for h in hs:
                hvd.synchronize(h)
    else:
        import torch.distributed as dist
        dist.init_process_group("gloo",
                                init_method="tcp://127.0.0.1:%s" % os.environ["BENCH_PORT"],
                                rank=rank, world_size=size)

        def step():
            for w in [dist.all_reduce(g, async_op=True) for g in grads]:
                w.wait()

    secs = timed_steps(step)
    report({"ms_per_step": 1000 * secs / args.steps, "tensors": len(grads),
            "mbytes": sum(g.numel() for g in grads) * 4 / 1e6})
elif args.mode == "latency":
    # The rule of `cadre bench allreduce`: after warm-up and a barrier, the mean of back-to-back
    # calls, and the slowest rank's mean is the result.
    import cadre.torch as hvd
    hvd.init()
    t = torch.ones(1)
    for _ in range(args.warmup):
        hvd.allreduce_(t, name="lat", op=hvd.Sum)
    hvd.barrier()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        hvd.allreduce_(t, name="lat", op=hvd.Sum)
    mean_us = torch.tensor([1e6 * (time.perf_counter() - t0) / args.steps], dtype=torch.float64)
    report({"mean_us": hvd.allreduce(mean_us, name="lat.slowest", op=hvd.Max).item()})
    hvd.shutdown()
