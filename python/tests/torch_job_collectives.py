# Every collective of horovod.torch against closed-form results, one check per API x dtype x op,
# run as N ranks by `cadre run` (see test_torch_collectives.py); hvd_suite.py prints the results.
# Every rank holds a tensor built from its rank, so every expected value is a formula in r and n.
import torch

import horovod.torch as hvd
from hvd_suite import Suite

hvd.init()
r, n = hvd.rank(), hvd.size()
suite = Suite(r)

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int32, torch.int64, torch.uint8, torch.int8, torch.int16]
SIGNED = [torch.int32, torch.int64, torch.int8, torch.int16] + FLOATS
OPS = {hvd.Sum: "Sum", hvd.Average: "Average", hvd.Min: "Min", hvd.Max: "Max",
       hvd.Product: "Product"}


def short(dtype):
    return str(dtype).replace("torch.", "")


def same(got, want, dtype=None, what=""):
    """got equals want (exactly for integers, to a tolerance for floats), with dtype kept."""
    dtype = dtype or want.dtype
    assert got.dtype == dtype, "%s: dtype %s, expected %s" % (what, got.dtype, dtype)
    assert tuple(got.shape) == tuple(want.shape), "%s: shape %s, expected %s" % (
        what, tuple(got.shape), tuple(want.shape))
    if dtype.is_floating_point:
        tol = 1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-6
        ok = torch.allclose(got.double(), want.double(), rtol=tol, atol=tol)
    else:
        ok = torch.equal(got.long(), want.long())
    assert ok, "%s: got %s, expected %s" % (what, got.tolist(), want.tolist())


BASE = torch.arange(1, 7, dtype=torch.int64).reshape(2, 3)


def contribution(k, dtype, op):
    """Rank k's input (as int64): small values that every dtype and op represent exactly;
    negative ones for signed types, and 1..3 for Product so that the product fits int8."""
    if op == hvd.Product:
        return (BASE + k) % 3 + 1
    return BASE - 2 * k if dtype in SIGNED else BASE + k


def reduced(dtype, op, parts=None):
    """The closed form of reducing every rank's contribution (int64, or float64 for Average)."""
    parts = torch.stack(parts if parts is not None else
                        [contribution(k, dtype, op) for k in range(n)])
    if op == hvd.Sum:
        return parts.sum(0)
    if op == hvd.Min:
        return parts.min(0).values
    if op == hvd.Max:
        return parts.max(0).values
    if op == hvd.Product:
        return parts.prod(0)
    # Average: floats divide exactly; integers truncate towards zero.
    if dtype.is_floating_point:
        return parts.double().sum(0) / n
    return torch.div(parts.sum(0), n, rounding_mode="trunc")


# ---------------------------------------------------------------- allreduce, every dtype x op

def check_allreduce(dtype, op):
    mine = contribution(r, dtype, op).to(dtype)
    before = mine.clone()
    got = hvd.allreduce(mine, op=op, name="ar.%s.%s" % (short(dtype), OPS[op]))
    same(got, reduced(dtype, op).to(dtype), dtype, "allreduce")
    same(mine, before, dtype, "allreduce left its input alone")


def check_allreduce_inplace(dtype, op):
    t = contribution(r, dtype, op).to(dtype)
    out = hvd.allreduce_(t, op=op, name="ar_.%s.%s" % (short(dtype), OPS[op]))
    assert out is t, "allreduce_ returned a different tensor"
    same(t, reduced(dtype, op).to(dtype), dtype, "allreduce_")


def check_allreduce_async(dtype):
    # Both async forms at once, polled to completion, synchronized in reverse order.
    a = contribution(r, dtype, hvd.Sum).to(dtype)
    b = contribution(r, dtype, hvd.Max).to(dtype)
    h1 = hvd.allreduce_async(a, op=hvd.Sum, name="ara.%s" % short(dtype))
    h2 = hvd.allreduce_async_(b, op=hvd.Max, name="ara_.%s" % short(dtype))
    while not (hvd.poll(h1) and hvd.poll(h2)):
        pass
    out2 = hvd.synchronize(h2)
    out1 = hvd.synchronize(h1)
    assert out2 is b, "allreduce_async_ did not reduce in place"
    same(out1, reduced(dtype, hvd.Sum).to(dtype), dtype, "allreduce_async")
    same(b, reduced(dtype, hvd.Max).to(dtype), dtype, "allreduce_async_")
    same(a, contribution(r, dtype, hvd.Sum).to(dtype), dtype, "allreduce_async input")
    try:
        hvd.synchronize(h1)
        raise AssertionError("a handle synchronized twice was accepted")
    except ValueError:
        pass


def check_average_flag(dtype):
    mine = contribution(r, dtype, hvd.Sum).to(dtype)
    same(hvd.allreduce(mine, name="avgT.%s" % short(dtype)),
         reduced(dtype, hvd.Average).to(dtype), dtype, "allreduce default (average)")
    same(hvd.allreduce(mine, average=False, name="avgF.%s" % short(dtype)),
         reduced(dtype, hvd.Sum).to(dtype), dtype, "allreduce average=False")


def check_scale_factors(dtype):
    # Horovod's arithmetic: each rank's input times prescale, the sum times postscale; integers
    # in float64, truncated toward zero each time (so the order shows). The factors' product is
    # not 1 and each alone gives another result, so an ignored factor fails the check.
    mine = contribution(r, dtype, hvd.Sum).to(dtype)
    pre, post = (3.0, 0.25) if dtype.is_floating_point else (0.5, 1.5)
    got = hvd.allreduce(mine, op=hvd.Sum, prescale_factor=pre, postscale_factor=post,
                        name="scale.%s" % short(dtype))
    if dtype.is_floating_point:
        want = reduced(dtype, hvd.Sum).double() * pre * post
    else:
        scaled = [(contribution(k, dtype, hvd.Sum).double() * pre).trunc() for k in range(n)]
        want = (torch.stack(scaled).sum(0) * post).trunc()
        assert not torch.equal(want, reduced(dtype, hvd.Sum).double() * pre * post)
    same(got, want.to(dtype), dtype, "pre/postscale")


for dt in FLOATS + INTS:
    for op in OPS:
        suite.add("allreduce.%s.%s" % (short(dt), OPS[op]), check_allreduce, dt, op)
        suite.add("allreduce_.%s.%s" % (short(dt), OPS[op]), check_allreduce_inplace, dt, op)
    suite.add("allreduce_async.%s" % short(dt), check_allreduce_async, dt)
    suite.add("allreduce.average_flag.%s" % short(dt), check_average_flag, dt)
    suite.add("allreduce.scale_factors.%s" % short(dt), check_scale_factors, dt)


@suite.check("allreduce.fp16_compression")
def _():
    for dtype in (torch.float32, torch.float64):
        x = torch.full((5,), 0.25 * (r + 1), dtype=dtype)
        got = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16,
                            name="fp16.%s" % short(dtype))
        same(got, torch.full((5,), 0.25 * n * (n + 1) / 2, dtype=dtype), dtype, "fp16")
    # Integers pass through the fp16 compressor unchanged.
    i = torch.tensor([r, 1], dtype=torch.int64)
    got = hvd.allreduce(i, op=hvd.Sum, compression=hvd.Compression.fp16, name="fp16.int")
    same(got, torch.tensor([n * (n - 1) // 2, n]), torch.int64, "fp16 on int64")
    c, ctx = hvd.Compression.fp16.compress(torch.ones(3, dtype=torch.float64))
    assert c.dtype == torch.float16 and ctx == torch.float64, (c.dtype, ctx)


@suite.check("allreduce.shapes")
def _():
    # 0-d (metric averaging), empty, non-contiguous, and one large enough for the in-place
    # (unfused, segmented) path.
    same(hvd.allreduce(torch.tensor(float(r)), op=hvd.Sum, name="scalar"),
         torch.tensor(n * (n - 1) / 2.0), torch.float32, "0-d")
    same(hvd.allreduce(torch.zeros(0, 3), op=hvd.Sum, name="empty"), torch.zeros(0, 3),
         torch.float32, "empty")
    nc = torch.arange(12.).reshape(3, 4).t() * (r + 1)
    assert not nc.is_contiguous()
    hvd.allreduce_(nc, op=hvd.Sum, name="noncontig")
    same(nc, torch.arange(12.).reshape(3, 4).t() * (n * (n + 1) // 2), torch.float32,
         "non-contiguous")
    big = torch.full((3 << 20,), float(r + 1))  # 12 MiB
    hvd.allreduce_(big, op=hvd.Sum, name="big")
    assert torch.all(big == n * (n + 1) / 2), big[:4]


@suite.check("allreduce.fusion_many_small")
def _():
    hs = [hvd.allreduce_async_(torch.ones(7) * (i + r), op=hvd.Sum, name="many.%d" % i)
          for i in range(40)]
    while not all(hvd.poll(h) for h in hs):
        pass
    for i, h in enumerate(hs):
        same(hvd.synchronize(h), torch.ones(7) * (n * i + n * (n - 1) / 2), torch.float32,
             "many.%d" % i)


@suite.check("allreduce.fusion_mixed_dtypes_ops_and_scales")
def _():
    # Interleaved dtypes, ops and scale factors in one burst: the engine may fuse only alike
    # neighbours, and each result must still be its own closed form.
    kinds = [(torch.float32, hvd.Sum, 1.0), (torch.float64, hvd.Average, 1.0),
             (torch.int32, hvd.Max, 1.0), (torch.float32, hvd.Sum, 2.0),
             (torch.bfloat16, hvd.Min, 1.0), (torch.int64, hvd.Sum, 1.0)]
    pending = []
    for i in range(36):
        dtype, op, pre = kinds[i % len(kinds)]
        t = (torch.arange(5) + i + r).to(dtype)
        pending.append((i, dtype, op, pre, hvd.allreduce_async_(
            t, op=op, prescale_factor=pre, name="mixed.%d" % i)))
    for i, dtype, op, pre, h in pending:
        parts = torch.stack([torch.arange(5) + i + k for k in range(n)])
        want = {hvd.Sum: parts.sum(0) * pre, hvd.Average: parts.double().mean(0),
                hvd.Max: parts.max(0).values, hvd.Min: parts.min(0).values}[op]
        same(hvd.synchronize(h), want.to(dtype), dtype, "mixed.%d" % i)


# ---------------------------------------------------------------- grouped allreduce

@suite.check("grouped_allreduce")
def _():
    ins = [torch.ones(3) * r, torch.ones(2, 2, dtype=torch.float64),
           torch.tensor([r], dtype=torch.int32)]
    outs = hvd.grouped_allreduce(ins, op=hvd.Sum, name="grp")
    same(outs[0], torch.ones(3) * n * (n - 1) / 2, torch.float32, "grouped[0]")
    same(outs[1], torch.ones(2, 2, dtype=torch.float64) * n, torch.float64, "grouped[1]")
    same(outs[2], torch.tensor([n * (n - 1) // 2]), torch.int32, "grouped[2]")
    same(ins[0], torch.ones(3) * r, torch.float32, "grouped input untouched")
    avg = hvd.grouped_allreduce([torch.ones(4) * r], name="grp_avg")
    same(avg[0], torch.ones(4) * (n - 1) / 2, torch.float32, "grouped average")
    fp16 = hvd.grouped_allreduce([torch.ones(4) * r], op=hvd.Sum, name="grp_fp16",
                                 compression=hvd.Compression.fp16)
    same(fp16[0], torch.ones(4) * n * (n - 1) / 2, torch.float32, "grouped fp16")


@suite.check("grouped_allreduce_.inplace_and_async")
def _():
    ins = [torch.ones(3) * r, torch.ones(5) * (r + 1)]
    outs = hvd.grouped_allreduce_(ins, op=hvd.Max, name="grp_")
    assert outs[0] is ins[0] and outs[1] is ins[1], "grouped_allreduce_ is not in place"
    same(ins[0], torch.ones(3) * (n - 1), torch.float32, "grouped_allreduce_[0]")
    same(ins[1], torch.ones(5) * n, torch.float32, "grouped_allreduce_[1]")
    a = [torch.ones(2) * r, torch.ones(3)]
    h = hvd.grouped_allreduce_async(a, op=hvd.Sum, name="grp_async")
    b = [torch.ones(2) * r]
    h_ = hvd.grouped_allreduce_async_(b, op=hvd.Min, name="grp_async_")
    while not (hvd.poll(h) and hvd.poll(h_)):
        pass
    outs = hvd.synchronize(h)
    same(outs[0], torch.ones(2) * n * (n - 1) / 2, torch.float32, "grouped async[0]")
    same(outs[1], torch.ones(3) * n, torch.float32, "grouped async[1]")
    assert hvd.synchronize(h_)[0] is b[0]
    same(b[0], torch.zeros(2), torch.float32, "grouped async_ min")


# ---------------------------------------------------------------- allgather (ragged)

def check_allgather(dtype):
    # Rank k has k rows (rank 0 none) of value k - 1 (negative on signed types).
    t = torch.full((r, 2), r - (1 if dtype in SIGNED else 0), dtype=dtype)
    want = torch.cat([torch.full((k, 2), k - (1 if dtype in SIGNED else 0), dtype=dtype)
                      for k in range(n)])
    same(hvd.allgather(t, name="ag.%s" % short(dtype)), want, dtype, "ragged allgather")
    h = hvd.allgather_async(t, name="aga.%s" % short(dtype))
    same(hvd.synchronize(h), want, dtype, "allgather_async")


for dt in FLOATS + INTS:
    suite.add("allgather.%s" % short(dt), check_allgather, dt)


@suite.check("allgather.shapes_and_grouped")
def _():
    g = hvd.allgather(torch.full((r + 1, 2, 3), r, dtype=torch.int64), name="ag3d")
    assert g.shape == (n * (n + 1) // 2, 2, 3), g.shape
    assert g[:, 0, 0].tolist() == [k for k in range(n) for _ in range(k + 1)], g[:, 0, 0]
    g1, g2 = hvd.grouped_allgather([torch.tensor([r]), torch.tensor([[r, r]] * (r + 1))],
                                   name="gag")
    assert g1.tolist() == list(range(n)), g1
    assert g2.tolist() == [[k, k] for k in range(n) for _ in range(k + 1)], g2
    h = hvd.grouped_allgather_async([torch.tensor([r * 1.5])], name="gag_async")
    assert hvd.synchronize(h)[0].tolist() == [k * 1.5 for k in range(n)]


# ---------------------------------------------------------------- broadcast

def check_broadcast(dtype):
    for root in sorted({0, n - 1}):
        value = lambda k: torch.tensor([[k, -k if dtype in SIGNED else k, 7]])  # noqa: E731
        mine = value(r).to(dtype)
        got = hvd.broadcast(mine, root, name="bc.%s.%d" % (short(dtype), root))
        same(got, value(root).to(dtype), dtype, "broadcast from %d" % root)
        same(mine, value(r).to(dtype), dtype, "broadcast left its input alone")
        out = hvd.broadcast_(mine, root, name="bc_.%s.%d" % (short(dtype), root))
        assert out is mine, "broadcast_ is not in place"
        same(mine, value(root).to(dtype), dtype, "broadcast_ from %d" % root)


for dt in FLOATS + INTS:
    suite.add("broadcast.%s" % short(dt), check_broadcast, dt)


@suite.check("broadcast.async_forms")
def _():
    a = torch.tensor([float(r)] * 3)
    b = torch.arange(6.).reshape(2, 3).t() * r  # non-contiguous, in place
    h1 = hvd.broadcast_async(a, n - 1, name="bca")
    h2 = hvd.broadcast_async_(b, n - 1, name="bca_")
    assert hvd.synchronize(h1).tolist() == [n - 1.0] * 3 and a[0] == r
    assert hvd.synchronize(h2) is b
    same(b, torch.arange(6.).reshape(2, 3).t() * (n - 1), torch.float32, "broadcast_async_")
    s = hvd.broadcast(torch.tensor(r, dtype=torch.int64), 0, name="bc_scalar")
    assert s.dim() == 0 and s.item() == 0, s


# ---------------------------------------------------------------- alltoall

def check_alltoall(dtype):
    # Rank r sends (r + j) % 3 rows (zero rows for some pairs) of value 10 r + j to rank j.
    count = lambda src, dst: (src + dst) % 3  # noqa: E731
    splits = [count(r, j) for j in range(n)]
    send = torch.cat([torch.full((count(r, j), 2), 10 * r + j) for j in range(n)]).to(dtype)
    out, received = hvd.alltoall(send, splits=splits, name="a2a.%s" % short(dtype))
    assert received.tolist() == [count(k, r) for k in range(n)], received
    want = torch.cat([torch.full((count(k, r), 2), 10 * k + r) for k in range(n)]).to(dtype)
    same(out, want, dtype, "alltoall with splits")
    even = hvd.alltoall((torch.arange(2 * n) + 10 * r).to(dtype), name="a2a_even.%s" % short(dtype))
    same(even, torch.tensor([10 * k + 2 * r + i for k in range(n) for i in range(2)]).to(dtype),
         dtype, "alltoall without splits")


for dt in FLOATS + INTS:
    suite.add("alltoall.%s" % short(dt), check_alltoall, dt)


@suite.check("alltoall.async_and_tensor_splits")
def _():
    send = torch.arange(n, dtype=torch.float32).repeat_interleave(2) + 100 * r  # 2 rows each
    h = hvd.alltoall_async(send, splits=torch.tensor([2] * n), name="a2a_async")
    out, received = hvd.synchronize(h)
    assert received.tolist() == [2] * n, received
    assert out.tolist() == [100.0 * k + r for k in range(n) for _ in range(2)], out


# ---------------------------------------------------------------- reducescatter

def blocks(rows):
    """(first row, row count) of every rank: the first rows % n ranks get one more row."""
    counts = [rows // n + (1 if k < rows % n else 0) for k in range(n)]
    return [(sum(counts[:k]), counts[k]) for k in range(n)]


def check_reducescatter(dtype, op):
    rows = n + 1
    parts = [torch.cat([contribution(k, dtype, op).reshape(-1)] * rows)[:rows * 2]
             .reshape(rows, 2) for k in range(n)]
    whole = reduced(dtype, op, parts)
    first, count = blocks(rows)[r]
    got = hvd.reducescatter(parts[r].to(dtype), op=op, name="rs.%s.%s" % (short(dtype), OPS[op]))
    same(got, whole[first:first + count].to(dtype), dtype, "reducescatter")


for dt in FLOATS + INTS:
    for op in OPS:
        suite.add("reducescatter.%s.%s" % (short(dt), OPS[op]), check_reducescatter, dt, op)


@suite.check("reducescatter.async_grouped_scaled")
def _():
    rows = torch.arange((2 * n + 1) * 2, dtype=torch.float32).reshape(2 * n + 1, 2)
    first, count = blocks(2 * n + 1)[r]
    mine = rows[first:first + count]
    same(hvd.reducescatter(rows, name="rs_avg"), mine, torch.float32, "reducescatter average")
    h = hvd.reducescatter_async(rows, op=hvd.Sum, name="rs_async", prescale_factor=2.0,
                                postscale_factor=0.25)
    same(hvd.synchronize(h), mine * n * 0.5, torch.float32, "reducescatter_async scaled")
    g = hvd.grouped_reducescatter([rows, rows * 2], op=hvd.Sum, name="grs")
    same(g[0], mine * n, torch.float32, "grouped_reducescatter[0]")
    same(g[1], mine * 2 * n, torch.float32, "grouped_reducescatter[1]")
    h = hvd.grouped_reducescatter_async([rows.double()], op=hvd.Max, name="grs_async")
    same(hvd.synchronize(h)[0], mine.double(), torch.float64, "grouped_reducescatter_async")


@suite.check("poll_is_false_until_every_rank_submitted")
def _():
    # The other ranks submit only after a barrier that rank 0 enters after polling, so rank 0's
    # operation cannot be complete when it polls.
    if r == 0:
        h = hvd.allreduce_async(torch.ones(2), op=hvd.Sum, name="late")
        assert not hvd.poll(h) or n == 1, "poll() was True before the other ranks submitted"
        hvd.barrier()
    else:
        hvd.barrier()
        h = hvd.allreduce_async(torch.ones(2), op=hvd.Sum, name="late")
    same(hvd.synchronize(h), torch.full((2,), float(n)), torch.float32, "late")
    try:
        hvd.poll(h)
        raise AssertionError("poll() accepted a synchronized handle")
    except ValueError:
        pass


@suite.check("barrier")
def _():
    for _ in range(3):
        hvd.barrier()


suite.run(finish=hvd.shutdown)
