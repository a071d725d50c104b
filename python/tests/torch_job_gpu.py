# GPU tensors in Horovod mode, as N ranks: models and tensors on the rank's device, trained and
# reduced against single-process closed forms. CADRE_TEST_DEVICE says which device:
#   cuda  cuda:(local rank % GPUs), the NCCL path wherever nccl_path chose it (run by
#         scripts/gpu-check.sh on a GPU machine)
#   sim   the simulated device of sim_device.py (CI); with CADRE_TEST_NCCL_STAND_IN=gloo the
#         NCCL path runs with a Gloo group in NCCL's place, so its ordering is checked on CPUs
# hvd_suite.py prints one line per check.
import datetime
import os

import torch

import cadre.ddl
import horovod.torch as hvd
from cadre.torch import cuda_staging, devices, nccl_path
from hvd_suite import Suite

KIND = os.environ.get("CADRE_TEST_DEVICE", "sim")
STAND_IN = os.environ.get("CADRE_TEST_NCCL_STAND_IN", "")
RANK = int(os.environ.get("CADRE_RANK", "0"))

if KIND == "sim":
    import sim_device
    SIM = sim_device.SimDevice(host_is_compute=True, seed=RANK)
    sim_device.install(SIM)


class GlooStandIn(nccl_path._StandIn):
    """NCCL's part played by Gloo (which reduces CPU tensors, and CUDA ones through the host),
    so that the NCCL path's ordering and streams are checked where NCCL cannot run: on CPUs, and
    with several ranks on one GPU, which NCCL refuses. Each rank claims a GPU of its own."""

    def available(self):
        return True

    def local_device(self, local_rank):
        if KIND == "sim":
            return SIM, "sim-gpu-of-rank-%d" % RANK
        index = local_rank % torch.cuda.device_count()
        return devices.device_of(torch.empty(0, device=torch.device("cuda", index))), \
            "gpu-of-rank-%d" % RANK

    def make_group(self, store, rank, size, timeout_s):
        from torch.distributed import ProcessGroupGloo
        return ProcessGroupGloo(store, rank, size, datetime.timedelta(seconds=timeout_s))


if STAND_IN == "gloo":
    nccl_path.use_stand_in(GlooStandIn())

hvd.init()
r, n = hvd.rank(), hvd.size()
if KIND == "cuda":
    # The seed's tip, as Horovod's examples pin the device; under `cadre run` local_rank is
    # the slot's own GPU, and slots sharing one GPU (gpu-check.sh) take it modulo the count.
    torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
    DEVICE = torch.device("cuda", torch.cuda.current_device())
else:
    DEVICE = torch.device("cpu")
suite = Suite(r)
PATH = nccl_path.path_for(hvd.global_process_set._engine)
print("rank %d: device %s, NCCL path %s" % (r, DEVICE, "on" if PATH else "off"), flush=True)


def on_device(t):
    assert t.device == DEVICE, "result on %s, not %s" % (t.device, DEVICE)
    return t.cpu()


@suite.check("capabilities_answer_for_this_pytorch")
def _():
    cuda = torch.version.cuda is not None
    assert hvd.cuda_built() == cuda, (hvd.cuda_built(), torch.version.cuda)
    assert cadre.ddl.cuda_built() == cuda
    nccl = hvd.nccl_built()
    assert isinstance(nccl, int) and nccl >= 0, nccl
    if not cuda:
        assert nccl == 0, nccl
    assert cadre.ddl.nccl_built() == nccl


@suite.check("nccl_path_chosen_as_expected")
def _():
    if STAND_IN and n > 1:
        assert PATH is not None, "the stand-in did not make a path"
    elif KIND == "sim" or hvd.nccl_built() == 0 or n == 1:
        assert PATH is None
    # On GPUs the choice depends on how the slots share them; the line above says which.


@suite.check("many_allreduces_submitted_in_different_orders")
def _():
    # Every rank submits in its own order: the engine negotiates, and the NCCL path (or Gloo in
    # its place) must still see the operations in one order everywhere.
    names = list(range(24))
    order = names[r:] + names[:r] if r % 2 == 0 else list(reversed(names))
    handles = {}
    for k in order:
        dtype = [torch.float32, torch.float16, torch.float64, torch.int64][k % 4]
        t = torch.full((k * 37 + 1,), float(r + k), dtype=dtype, device=DEVICE)
        handles[k] = (hvd.allreduce_async_(t, name="order.%d" % k, op=hvd.Sum), t, dtype)
    for k in names:
        h, t, dtype = handles[k]
        out = hvd.synchronize(h)
        assert out is t
        want = torch.full((k * 37 + 1,), float(sum(q + k for q in range(n))), dtype=dtype)
        assert torch.equal(on_device(out), want), (k, out[:4])


@suite.check("every_operation_on_the_device")
def _():
    t = torch.arange(6, dtype=torch.float32, device=DEVICE).reshape(3, 2) + r
    total = sum(torch.arange(6.0).reshape(3, 2) + q for q in range(n))
    assert torch.allclose(on_device(hvd.allreduce(t, op=hvd.Average)), total / n)
    assert torch.allclose(on_device(hvd.allreduce(t, op=hvd.Max)),
                          torch.arange(6.0).reshape(3, 2) + n - 1)
    gathered = on_device(hvd.allgather(t))
    assert gathered.shape == (3 * n, 2) and torch.equal(gathered[3 * r:3 * r + 3], t.cpu())
    b = t.clone()
    hvd.broadcast_(b, root_rank=n - 1)
    assert torch.equal(on_device(b), torch.arange(6.0).reshape(3, 2) + n - 1)
    rows = torch.arange(2 * n, dtype=torch.float32, device=DEVICE).unsqueeze(1) * (r + 1)
    out = on_device(hvd.alltoall(rows))
    assert torch.equal(out.squeeze(1), torch.tensor([float((2 * r + i % 2) * (i // 2 + 1))
                                                     for i in range(2 * n)])), out
    scattered = on_device(hvd.reducescatter(torch.ones(n, 3, device=DEVICE), op=hvd.Sum))
    assert torch.equal(scattered, torch.full((1, 3), float(n)))
    ints = torch.full((5,), r + 1, dtype=torch.int32, device=DEVICE)
    assert torch.equal(on_device(hvd.allreduce(ints, op=hvd.Sum)),
                       torch.full((5,), n * (n + 1) // 2, dtype=torch.int32))


@suite.check("producer_on_another_stream")
def _():
    # A tensor produced on a stream other than the default one: the copy-in (or NCCL) must wait
    # for that stream, not the default one.
    if KIND != "cuda":
        return
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        big = torch.ones(1 << 22, device=DEVICE)
        for _ in range(20):
            big = big * 1.0 + 0.0  # queue work, so that a missing wait would read early
        big.add_(r)
        out = hvd.allreduce(big, op=hvd.Sum, name="other.stream")
        value = out[-1].item()
    assert value == float(sum(q + 1 for q in range(n))), value


def data(step, rank):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(16, 8, generator=g), torch.randn(16, 4, generator=g)


def make_model():
    torch.manual_seed(42)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


@suite.check("distributed_optimizer_trains_a_model_on_the_device")
def _():
    steps = 4
    model = make_model().to(DEVICE)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    for step in range(steps):
        x, y = (v.to(DEVICE) for v in data(step, r))
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    # One process training on every rank's batch at once (the mean of the ranks' mean losses).
    ref = make_model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for step in range(steps):
        ref_opt.zero_grad()
        loss = sum(torch.nn.functional.mse_loss(ref(x), y)
                   for x, y in (data(step, q) for q in range(n))) / n
        loss.backward()
        ref_opt.step()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert p.device == DEVICE, name
        assert torch.allclose(p.detach().cpu(), q.detach(), atol=1e-4, rtol=1e-4), name


@suite.check("optimizer_groups_and_fp16_compression_on_the_device")
def _():
    model = make_model().to(DEVICE)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                   named_parameters=model.named_parameters(), groups=2,
                                   compression=hvd.Compression.fp16)
    for step in range(3):
        x, y = (v.to(DEVICE) for v in data(step, r))
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).unsqueeze(0)
    everyone = on_device(hvd.allgather(flat, name="groups.compare"))
    assert torch.equal(everyone, everyone[0].expand_as(everyone)), "replicas differ"


@suite.check("broadcast_parameters_from_a_device")
def _():
    torch.manual_seed(100 + r)
    model = torch.nn.Linear(5, 3).to(DEVICE)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    hvd.broadcast_parameters(model.state_dict(), root_rank=n - 1)
    hvd.broadcast_optimizer_state(opt, root_rank=n - 1)
    torch.manual_seed(100 + n - 1)
    root = torch.nn.Linear(5, 3)
    for p, q in zip(model.parameters(), root.parameters()):
        assert torch.equal(p.detach().cpu(), q.detach())


@suite.check("host_buffers_are_reused_across_steps")
def _():
    device = devices.device_of(torch.empty(0, device=DEVICE))
    pool = cuda_staging.stager().pool(device)
    t = torch.ones(1000, dtype=torch.int64, device=DEVICE)  # integers never take NCCL's path
    for step in range(6):
        hvd.allreduce_(t, op=hvd.Max, name="reuse.%d" % step)
    assert pool.reuses >= 5, (pool.allocations, pool.reuses)


suite.run(finish=hvd.shutdown)
