# One rank of test_torch_training.py: DistributedOptimizer against single-process closed forms,
# backward_passes_per_step, fp16 compression, broadcast of parameters and Adam state, join with
# uneven batches. Prints "OK <rank>".
import sys

import torch

import horovod.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
torch.manual_seed(1234)
X = torch.randn(8 * n, 4)
Y = X @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1


def model():
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))


def reference(steps, lr=0.1):
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(X), Y).backward()
        opt.step()
    return m


def same(a, b, tol):
    for (na, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.allclose(pa, pb, atol=tol, rtol=tol), (na, pa, pb)


mine = slice(8 * r, 8 * r + 8)

# 1. Averaged gradients equal the full-batch gradient: 3 steps match the single-process run.
for compression, tol in ((hvd.Compression.none, 1e-5), (hvd.Compression.fp16, 2e-2)):
    m = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=m.named_parameters(), compression=compression)
    for _ in range(3):
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(X[mine]), Y[mine]).backward()
        opt.step()
    same(m, reference(3), tol)

# 2. backward_passes_per_step=2: two half-batches accumulate locally, one allreduce, one step.
m = model()
opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
                               named_parameters=m.named_parameters(), backward_passes_per_step=2)
for _ in range(2):
    opt.zero_grad()
    for half in (slice(8 * r, 8 * r + 4), slice(8 * r + 4, 8 * r + 8)):
        (torch.nn.functional.mse_loss(m(X[half]), Y[half]) / 2).backward()
    opt.step()
same(m, reference(2), 1e-5)

# gradient_predivide_factor and op=Sum.
m = model()
opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1 / n),
                               named_parameters=m.named_parameters(), op=hvd.Sum)
opt.zero_grad()
torch.nn.functional.mse_loss(m(X[mine]), Y[mine]).backward()
opt.step()
ref = model()
ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
torch.nn.functional.mse_loss(ref(X), Y).backward()
ref_opt.step()
same(m, ref, 1e-5)

# 3. broadcast_parameters and broadcast_optimizer_state (Adam, including its lazy state).
torch.manual_seed(100 + r)
m = torch.nn.Linear(4, 2)
adam = torch.optim.Adam(m.parameters(), lr=0.01 * (r + 1))
if r != 1:  # rank 1 has no Adam state yet: it must receive it
    torch.nn.functional.mse_loss(m(X[mine]), Y[mine].expand(-1, 2)).backward()
    adam.step()
hvd.broadcast_parameters(m.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(adam, root_rank=0)
flat = torch.cat([p.detach().reshape(-1) for p in m.parameters()])
state = adam.state_dict()
moments = torch.cat([torch.cat([s["exp_avg"].reshape(-1), s["exp_avg_sq"].reshape(-1),
                                torch.as_tensor(s["step"], dtype=torch.float32).reshape(1)])
                     for s in state["state"].values()])
everyone = hvd.allgather(torch.cat([flat, moments]).unsqueeze(0), name="check_bcast")
assert torch.equal(everyone, everyone[0].expand_as(everyone)), everyone
assert state["param_groups"][0]["lr"] == 0.01, state["param_groups"][0]["lr"]

# 4. join with uneven batches: rank k has 2 + k batches; joined ranks contribute zeros.
m = model()
opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.05),
                               named_parameters=m.named_parameters())
for b in range(2 + r):
    opt.zero_grad()
    rows = slice(8 * r + b, 8 * r + b + 2)
    torch.nn.functional.mse_loss(m(X[rows]), Y[rows]).backward()
    opt.step()
last = hvd.join()
assert last == n - 1, last
# The rank that ran longest saw, at step b, the sum of the gradients of the ranks still
# training, divided by n (joined ranks add zeros): replay that in one process.
if r == n - 1:
    ref = model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    for b in range(2 + r):
        ref_opt.zero_grad()
        for k in range(n):
            if b < 2 + k:
                rows = slice(8 * k + b, 8 * k + b + 2)
                (torch.nn.functional.mse_loss(ref(X[rows]), Y[rows]) / n).backward()
        ref_opt.step()
    same(m, ref, 1e-5)
# Horovod's pattern after join: adopt the model of the rank that trained last.
hvd.broadcast_parameters(m.state_dict(), root_rank=last)
flat = torch.cat([p.detach().reshape(-1) for p in m.parameters()]).unsqueeze(0)
everyone = hvd.allgather(flat, name="check_join")
assert torch.equal(everyone, everyone[0].expand_as(everyone)), everyone

hvd.shutdown()
print("OK", r)
sys.stdout.flush()
