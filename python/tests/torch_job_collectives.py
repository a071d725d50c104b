# One rank of test_torch_collectives.py: every collective against closed-form results.
# Run as N ranks; prints "OK <rank>" when every check passed.
import os
import sys

import torch

import horovod.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int32, torch.int64, torch.uint8, torch.int8]


def close(a, b, dtype):
    tol = 1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-6
    assert torch.allclose(a.double(), b.double(), rtol=tol, atol=tol), (a, b, dtype)


# allreduce: every dtype x op, sync / in-place / async forms.
for dtype in FLOATS + INTS:
    base = torch.arange(1, 7, dtype=torch.int64).reshape(2, 3)
    mine = (base + r).to(dtype)
    ranks = [(base + k) for k in range(n)]
    want = {
        hvd.Sum: sum(ranks),
        hvd.Min: base,
        hvd.Max: base + n - 1,
        hvd.Product: torch.prod(torch.stack(ranks), 0),
    }
    if dtype == torch.uint8 or dtype == torch.int8:
        want[hvd.Product] = None  # overflows the type; checked for wider types
    for op, expect in want.items():
        if expect is None:
            continue
        got = hvd.allreduce(mine, op=op, name="ar.%s.%s" % (dtype, op))
        assert got.dtype == dtype and got.shape == mine.shape
        close(got, expect, dtype)
    if dtype in FLOATS:
        close(hvd.allreduce(mine, name="avg.%s" % dtype), sum(ranks).double() / n, dtype)
        close(hvd.allreduce(mine, average=False, name="avgF.%s" % dtype), sum(ranks), dtype)
        t = mine.clone()
        hvd.allreduce_(t, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5,
                       name="inplace.%s" % dtype)
        close(t, sum(ranks), dtype)
        h = hvd.allreduce_async(mine, op=hvd.Average, name="async.%s" % dtype)
        close(hvd.synchronize(h), sum(ranks).double() / n, dtype)
        close(mine, base + r, dtype)  # the out-of-place async form left its input alone

# fp16 compression keeps the dtype of the caller's tensor.
x = torch.full((5,), 0.25 * (r + 1))
got = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16, name="fp16")
assert got.dtype == torch.float32
close(got, torch.full((5,), 0.25 * n * (n + 1) / 2), torch.float16)

# Non-contiguous input.
nc = torch.arange(12.).reshape(3, 4).t()
hvd.allreduce_(nc, op=hvd.Sum, name="noncontig")
close(nc, torch.arange(12.).reshape(3, 4).t() * n, torch.float32)

# grouped allreduce.
outs = hvd.grouped_allreduce([torch.ones(3) * r, torch.ones(2, 2)], op=hvd.Sum, name="grp")
close(outs[0], torch.ones(3) * n * (n - 1) / 2, torch.float32)
close(outs[1], torch.ones(2, 2) * n, torch.float32)

# Many small tensors submitted at once, polled, then synchronized (fusion path).
hs = [hvd.allreduce_async_(torch.ones(7) * i, op=hvd.Sum, name="many.%d" % i) for i in range(40)]
while not all(hvd.poll(h) for h in hs):
    pass
for i, h in enumerate(hs):
    close(hvd.synchronize(h), torch.ones(7) * i * n, torch.float32)

# Ragged allgather on every dtype; grouped allgather.
for dtype in FLOATS + INTS:
    t = torch.full((r + 1, 2), r, dtype=dtype)
    g = hvd.allgather(t, name="ag.%s" % dtype)
    expect = torch.cat([torch.full((k + 1, 2), k, dtype=dtype) for k in range(n)])
    assert g.dtype == dtype and torch.equal(g, expect), (g, expect)
g1, g2 = hvd.grouped_allgather([torch.tensor([r]), torch.tensor([[r, r]])], name="gag")
assert g1.tolist() == list(range(n)) and g2.shape == (n, 2)

# broadcast and broadcast_ from the last rank.
b = torch.full((3,), float(r))
assert hvd.broadcast(b, n - 1, name="bc").tolist() == [n - 1.0] * 3 and b[0] == r
hvd.broadcast_(b, n - 1, name="bc_")
assert b.tolist() == [n - 1.0] * 3

# alltoall with and without splits.
splits = [k + 1 for k in range(n)]
send = torch.cat([torch.full((k + 1, 2), 100 * r + k) for k in range(n)])
out, received = hvd.alltoall(send, splits=splits, name="a2a")
assert received.tolist() == [r + 1] * n, received
assert torch.equal(out, torch.cat([torch.full((r + 1, 2), 100 * k + r) for k in range(n)]))
even = hvd.alltoall(torch.arange(n) + 10 * r, name="a2a_even")
assert even.tolist() == [10 * k + r for k in range(n)], even

# reducescatter: n+1 rows, rank 0 gets two.
rows = torch.arange((n + 1) * 2, dtype=torch.float32).reshape(n + 1, 2)
mine = hvd.reducescatter(rows, op=hvd.Sum, name="rs")
first, count = (0, 2) if r == 0 else (r + 1, 1)
close(mine, rows[first:first + count] * n, torch.float32)
avg = hvd.reducescatter(rows, name="rs_avg")
close(avg, rows[first:first + count], torch.float32)
gr = hvd.grouped_reducescatter([rows, rows * 2], op=hvd.Sum, name="grs")
close(gr[1], rows[first:first + count] * 2 * n, torch.float32)

hvd.barrier()

# Objects.
assert hvd.broadcast_object({"from": r, "x": [1, 2]}, root_rank=n - 1) == {"from": n - 1,
                                                                          "x": [1, 2]}
assert hvd.allgather_object(("rank", r)) == [("rank", k) for k in range(n)]

# Adasum: orthogonal contributions add (closed form for one-hot vectors).
v = torch.zeros(n, dtype=torch.float64)
v[r] = 1.0
close(hvd.allreduce(v, op=hvd.Adasum, name="adasum"), torch.ones(n, dtype=torch.float64),
      torch.float64)

# sparse allreduce.
sp = torch.sparse_coo_tensor([[r]], [1.0], (n,))
dense = hvd.synchronize(hvd.sparse_allreduce_async(sp, "sparse", op=hvd.Sum)).to_dense()
close(dense, torch.ones(n), torch.float32)

# A duplicate pending name is a ValueError at submission. The other ranks submit "dup" only
# after the barrier, so it is surely still pending on rank 0 when rank 0 submits it again.
if n > 1:
    if r == 0:
        h = hvd.allreduce_async(torch.ones(1), name="dup")
        try:
            hvd.allreduce_async(torch.ones(1), name="dup")
            raise AssertionError("duplicate name accepted")
        except ValueError as e:
            assert "dup" in str(e)
        hvd.barrier()
    else:
        hvd.barrier()
        h = hvd.allreduce_async(torch.ones(1), name="dup")
    hvd.synchronize(h)

# A mismatched shape fails on every rank, naming each rank's shape; then the engine works on.
if n > 1:
    try:
        hvd.allreduce(torch.ones(3 + (r == 1)), name="mismatch")
        raise AssertionError("mismatch not detected")
    except hvd.HorovodInternalError as e:
        assert "rank 1: allreduce float32[4]" in str(e), e
        assert "rank 0: allreduce float32[3]" in str(e), e
close(hvd.allreduce(torch.ones(2), op=hvd.Sum, name="after_mismatch"), torch.ones(2) * n,
      torch.float32)

# Process sets: the even ranks.
evens = hvd.add_process_set([k for k in range(n) if k % 2 == 0])
if evens.included():
    s = hvd.allreduce(torch.ones(1), op=hvd.Sum, name="ps", process_set=evens)
    assert s.item() == evens.size() == len(range(0, n, 2))
    assert evens.rank() == r // 2
else:
    assert evens.rank() == -1
hvd.remove_process_set(evens)

# SyncBatchNorm matches BatchNorm over the concatenated batch (forward and input gradient).
torch.manual_seed(0)
full = torch.randn(2 * n, 3, 4)
full.requires_grad_(True)
ref = torch.nn.BatchNorm1d(3)
ref(full).pow(2).sum().backward()
part = full.detach()[2 * r:2 * r + 2].clone().requires_grad_(True)
sbn = hvd.SyncBatchNorm(3)
out = sbn(part)
close(out, torch.nn.functional.batch_norm(full.detach(), None, None, training=True)[2 * r:2 * r + 2],
      torch.float32)
out.pow(2).sum().backward()
close(part.grad, full.grad[2 * r:2 * r + 2], torch.float32)
close(sbn.running_mean, ref.running_mean, torch.float32)

# Timeline.
if r == 0:
    path = os.path.join(os.environ["TEST_TMP"], "timeline.json")
    hvd.start_timeline(path)
hvd.allreduce(torch.ones(1), name="traced")
if r == 0:
    hvd.stop_timeline()
    import json
    events = json.load(open(path))
    assert any(e.get("name") == "allreduce" for e in events), events

hvd.shutdown()
print("OK", r)
sys.stdout.flush()
