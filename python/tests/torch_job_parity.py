# Horovod 0.28 parity (issue 17), run as N ranks by `cadre run` (see test_torch_parity.py):
# every element type in every collective, Horovod's arithmetic for scale factors, global roots
# with process sets, reducescatter's gradient, sparse reductions, optimizer-state broadcasts,
# Horovod's error types, Adasum, grouping, and the names scripts import. Expected values are
# Horovod's documented arithmetic, computed here independently; where a feature could be
# ignored without changing a result, the check first shows that its inputs tell them apart.
import os
import warnings

import torch

import horovod.torch as hvd
from hvd_suite import Suite

# Static process sets, given to init() as Horovod scripts do (the size is known from the
# launcher's environment before init).
N = int(os.environ["HOROVOD_SIZE"])
EVENS = hvd.ProcessSet(range(0, N, 2))
ODDS = hvd.ProcessSet(range(1, N, 2))
EVERYONE = hvd.ProcessSet(range(N))
hvd.init(process_sets=[EVENS, ODDS, EVERYONE])
r, n = hvd.rank(), hvd.size()
MINE = EVENS if r % 2 == 0 else ODDS
OTHER = ODDS if r % 2 == 0 else EVENS
suite = Suite(r)

INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
DTYPES = INTS + FLOATS + [torch.bool]


def short(dtype):
    return str(dtype).replace("torch.", "")


def same(got, want, what=""):
    assert got.dtype == want.dtype, "%s: dtype %s, expected %s" % (what, got.dtype, want.dtype)
    assert tuple(got.shape) == tuple(want.shape), "%s: shape %s, expected %s" % (
        what, tuple(got.shape), tuple(want.shape))
    if want.dtype.is_floating_point:
        ok = torch.allclose(got.double(), want.double(), rtol=1e-6, atol=1e-6)
    else:
        ok = torch.equal(got, want)
    assert ok, "%s: got %s, expected %s" % (what, got.tolist(), want.tolist())


def raises(kinds, call, words=""):
    """call() raises one of `kinds` (and not a ValueError where a RuntimeError is expected)."""
    try:
        call()
    except kinds as e:
        assert words in str(e), (words, str(e))
        return e
    raise AssertionError("no %s raised" % (kinds,))


# ---------------------------------------------------------------- 1. every dtype, every form

def value(k, dtype):
    """Rank k's input, 2 x 3: small values every dtype holds exactly (0/1 for bool)."""
    if dtype == torch.bool:
        return torch.tensor([[k % 2 == 0, True, False], [k == 0, k % 3 == 1, True]])
    return (torch.tensor([[1, 2, 3], [4, 5, 6]]) + k).to(dtype)


def reduce_closed(parts, op, dtype):
    stack = torch.stack([p.long() if dtype == torch.bool else p.double() for p in parts])
    if dtype == torch.bool:
        return {hvd.Sum: stack.amax(0), hvd.Max: stack.amax(0), hvd.Min: stack.amin(0),
                hvd.Product: stack.amin(0)}[op].bool()
    out = {hvd.Sum: stack.sum(0), hvd.Min: stack.amin(0), hvd.Max: stack.amax(0),
           hvd.Average: stack.sum(0) / n}[op]
    return out.trunc().to(dtype) if not dtype.is_floating_point else out.to(dtype)


def check_dtype(dtype):
    t = short(dtype)
    parts = [value(k, dtype) for k in range(n)]
    mine = parts[r]
    ops = [hvd.Sum, hvd.Min, hvd.Max] + ([] if dtype == torch.bool else [hvd.Average])
    for op in ops:
        want = reduce_closed(parts, op, dtype)
        same(hvd.allreduce(mine, op=op, name="dt.ar.%s.%s" % (t, op)), want, "allreduce %s" % op)
        x = mine.clone()
        assert hvd.allreduce_(x, op=op, name="dt.ar_.%s.%s" % (t, op)) is x
        same(x, want, "allreduce_ %s" % op)
        same(hvd.synchronize(hvd.allreduce_async(mine, op=op, name="dt.ara.%s.%s" % (t, op))),
             want, "allreduce_async %s" % op)
        x = mine.clone()
        hvd.synchronize(hvd.allreduce_async_(x, op=op, name="dt.ara_.%s.%s" % (t, op)))
        same(x, want, "allreduce_async_ %s" % op)
        pair = [mine, mine.flip(0)]
        outs = hvd.grouped_allreduce(pair, op=op, name="dt.gar.%s.%s" % (t, op))
        same(outs[0], want, "grouped_allreduce %s" % op)
        same(outs[1], want.flip(0), "grouped_allreduce[1] %s" % op)
        xs = [p.clone() for p in pair]
        hvd.grouped_allreduce_(xs, op=op, name="dt.gar_.%s.%s" % (t, op))
        same(xs[1], want.flip(0), "grouped_allreduce_ %s" % op)
        outs = hvd.synchronize(hvd.grouped_allreduce_async(pair, op=op,
                                                           name="dt.gara.%s.%s" % (t, op)))
        same(outs[0], want, "grouped_allreduce_async %s" % op)
    # allgather: rank k gives k + 1 rows.
    rows = [value(k, dtype)[:1].repeat(k + 1, 1) for k in range(n)]
    same(hvd.allgather(rows[r], name="dt.ag.%s" % t), torch.cat(rows), "allgather")
    same(hvd.synchronize(hvd.allgather_async(rows[r], name="dt.aga.%s" % t)), torch.cat(rows),
         "allgather_async")
    g = hvd.grouped_allgather([rows[r], mine], name="dt.gag.%s" % t)
    same(g[1], torch.cat(parts), "grouped_allgather")
    # broadcast from the last rank, every form.
    root = n - 1
    same(hvd.broadcast(mine, root, name="dt.bc.%s" % t), parts[root], "broadcast")
    x = mine.clone()
    assert hvd.broadcast_(x, root, name="dt.bc_.%s" % t) is x
    same(x, parts[root], "broadcast_")
    same(hvd.synchronize(hvd.broadcast_async(mine, root, name="dt.bca.%s" % t)), parts[root],
         "broadcast_async")
    x = mine.clone()
    hvd.synchronize(hvd.broadcast_async_(x, root, name="dt.bca_.%s" % t))
    same(x, parts[root], "broadcast_async_")
    # alltoall: rank r sends row block j (one row of k + j ...) to rank j.
    send = torch.cat([value(r + j, dtype)[:1] for j in range(n)])
    out, received = hvd.alltoall(send, splits=[1] * n, name="dt.a2a.%s" % t)
    same(out, torch.cat([value(k + r, dtype)[:1] for k in range(n)]), "alltoall")
    assert received.tolist() == [1] * n, received
    # reducescatter: n rows, rank j gets row j; grouped and async as well.
    blocks = [torch.cat([value(k + j, dtype)[:1] for j in range(n)]) for k in range(n)]
    for op in ops:
        want = reduce_closed(blocks, op, dtype)[r:r + 1]
        same(hvd.reducescatter(blocks[r], op=op, name="dt.rs.%s.%s" % (t, op)), want,
             "reducescatter %s" % op)
        outs = hvd.grouped_reducescatter([blocks[r], blocks[r]], op=op,
                                         name="dt.grs.%s.%s" % (t, op))
        same(outs[1], want, "grouped_reducescatter %s" % op)
        same(hvd.synchronize(hvd.reducescatter_async(blocks[r], op=op,
                                                     name="dt.rsa.%s.%s" % (t, op))),
             want, "reducescatter_async %s" % op)


for dt in DTYPES:
    suite.add("dtype.%s" % short(dt), check_dtype, dt)


# ---------------------------------------------------------------- 3. scale factors

def hv_scale(t, factor):
    """Horovod's CPU ScaleBuffer: integers in float64, truncated toward zero; float16 and
    bfloat16 in float32; float32 with a float32 factor; float64 in float64."""
    if not t.dtype.is_floating_point:
        return (t.double() * factor).trunc().to(t.dtype)
    if t.dtype in (torch.float16, torch.bfloat16):
        return (t.float() * torch.tensor(factor, dtype=torch.float32)).to(t.dtype)
    return t * torch.tensor(factor, dtype=t.dtype)


def scaled_sum(parts, pre, post):
    total = torch.stack([hv_scale(p, pre).double() for p in parts]).sum(0).to(parts[0].dtype)
    return hv_scale(total, post)


def check_scales(dtype):
    t = short(dtype)
    # Odd values: truncation after prescale shows for integers; pre * post != 1 and each alone
    # differs, so a factor that is ignored (or applied at the wrong end) changes the result.
    parts = [(torch.tensor([[3, 5], [7, 9]]) + 2 * k).to(dtype) for k in range(n)]
    pre, post = 0.5, 3.0
    want = scaled_sum(parts, pre, post)
    wrongs = [scaled_sum(parts, 1.0, 1.0), scaled_sum(parts, 1.0, post),
              scaled_sum(parts, pre, 1.0)]
    if not dtype.is_floating_point:  # integers also tell which factor comes first
        wrongs.append(scaled_sum(parts, post, pre))
    for wrong in wrongs:
        assert not torch.equal(want, wrong), "inputs do not tell the factors apart"
    kw = dict(prescale_factor=pre, postscale_factor=post)
    same(hvd.allreduce(parts[r], op=hvd.Sum, name="sc.ar.%s" % t, **kw), want, "allreduce")
    same(hvd.allreduce(parts[r], op=hvd.Average, name="sc.avg.%s" % t, **kw),
         scaled_sum(parts, pre, post / n), "allreduce average")
    outs = hvd.grouped_allreduce([parts[r], parts[r]], op=hvd.Sum, name="sc.gar.%s" % t, **kw)
    same(outs[1], want, "grouped_allreduce")
    # Reducescatter with the same arithmetic: rank j gets row j of 2 (n = 2) or its share.
    rows = [p.repeat(n, 1)[:n] for p in parts]
    whole = scaled_sum(rows, pre, post)
    same(hvd.reducescatter(rows[r], op=hvd.Sum, name="sc.rs.%s" % t, **kw), whole[r:r + 1],
         "reducescatter")
    same(hvd.reducescatter(rows[r], op=hvd.Average, name="sc.rsavg.%s" % t, **kw),
         scaled_sum(rows, pre, post / n)[r:r + 1], "reducescatter average")
    outs = hvd.grouped_reducescatter([rows[r], rows[r] + 1], op=hvd.Sum, name="sc.grs.%s" % t,
                                     **kw)
    same(outs[0], whole[r:r + 1], "grouped_reducescatter[0]")
    same(outs[1], scaled_sum([x + 1 for x in rows], pre, post)[r:r + 1],
         "grouped_reducescatter[1]")
    same(hvd.synchronize(hvd.reducescatter_async(rows[r], name="sc.rsa.%s" % t, op=hvd.Sum,
                                                 **kw)), whole[r:r + 1], "reducescatter_async")


for dt in INTS + FLOATS:
    suite.add("scale.%s" % short(dt), check_scales, dt)


@suite.check("scale.float16_range")
def _():
    # 40000 on every rank overflows float16 when summed unscaled; prescale 1/(2n) keeps the
    # sum at 20000 and postscale 2 brings it back to 40000.
    x = torch.full((3,), 40000.0, dtype=torch.float16)
    got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=1.0 / (2 * n), postscale_factor=2.0,
                        name="sc.f16range")
    same(got, torch.full((3,), 40000.0, dtype=torch.float16), "scaled float16")
    assert torch.isinf(hvd.allreduce(x, op=hvd.Sum, name="sc.f16overflow")).all()


# ---------------------------------------------------------------- 2. global roots with sets

@suite.check("process_sets.static_at_init")
def _():
    assert EVENS.process_set_id == 1 and ODDS.process_set_id == 2, (EVENS, ODDS)
    assert EVERYONE.process_set_id == 0, EVERYONE  # every rank: the global set
    assert MINE.included() and not OTHER.included() and OTHER.rank() == -1
    assert MINE.size() == len(MINE.ranks) and MINE.rank() == MINE.ranks.index(r)
    assert hvd.ProcessSet([0]).size() is None  # not registered: None, as in Horovod
    s = hvd.allreduce(torch.tensor([r]), op=hvd.Sum, name="static.sum", process_set=MINE)
    assert s.item() == sum(MINE.ranks), s
    s = hvd.allreduce(torch.tensor([r]), op=hvd.Sum, name="static.all", process_set=EVERYONE)
    assert s.item() == n * (n - 1) // 2, s
    e = raises(RuntimeError, lambda: hvd.allreduce(torch.ones(1), name="static.other",
                                                   process_set=OTHER), "not a member")
    assert isinstance(e, hvd.HorovodInternalError), type(e)


@suite.check("root_rank.is_global_with_process_sets")
def _():
    root = MINE.ranks[-1]  # a global rank
    same(hvd.broadcast(torch.tensor([r]), root, name="gr.bc", process_set=MINE),
         torch.tensor([root]), "broadcast")
    x = torch.tensor([r, 2 * r])
    hvd.broadcast_(x, root_rank=root, name="gr.bc_", process_set=MINE)
    same(x, torch.tensor([root, 2 * root]), "broadcast_")
    same(hvd.synchronize(hvd.broadcast_async(torch.tensor([r]), root, name="gr.bca",
                                             process_set=MINE)), torch.tensor([root]), "async")
    got = hvd.broadcast_object({"from": r} if r == root else None, root_rank=root,
                               process_set=MINE)
    assert got == {"from": root}, got
    model = torch.nn.Linear(2, 1)
    with torch.no_grad():
        model.weight.fill_(r)
    hvd.broadcast_parameters(model.state_dict(), root_rank=root, process_set=MINE)
    assert model.weight.eq(root).all(), model.weight
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * (r + 1))
    hvd.broadcast_optimizer_state(opt, root_rank=root, process_set=MINE)
    assert opt.param_groups[0]["lr"] == 0.1 * (root + 1), opt.param_groups[0]
    # The gradient of broadcast: the set's average on the (global) root, zeros elsewhere.
    x = torch.ones(2, requires_grad=True)
    (hvd.broadcast(x, root, name="gr.grad", process_set=MINE) * (r + 1)).sum().backward()
    mean = sum(k + 1 for k in MINE.ranks) / MINE.size()
    same(x.grad, torch.full((2,), mean if r == root else 0.0), "broadcast gradient")
    # A root outside the set: RuntimeError (HorovodInternalError) on every member.
    outsider = OTHER.ranks[0] if OTHER.ranks else None
    if outsider is not None:
        raises(hvd.HorovodInternalError, lambda: hvd.broadcast(torch.ones(1), outsider,
                                                              name="gr.bad", process_set=MINE),
               "not a member")


# ---------------------------------------------------------------- 3. reducescatter extras

@suite.check("reducescatter.gradient_and_errors")
def _():
    # Rank k's loss is (k + 1) * sum(output): Horovod's gradient is the allgather of the output
    # gradients, times n for Sum, times prescale and postscale.
    counts = [(n + 1) // n + (1 if k < (n + 1) % n else 0) for k in range(n)]
    blocks = torch.cat([torch.full((c, 2), k + 1.0) for k, c in enumerate(counts)])
    for op, factor in ((hvd.Sum, n), (hvd.Average, 1)):
        for pre, post in ((1.0, 1.0), (3.0, 0.5)):
            x = torch.ones(n + 1, 2, requires_grad=True)
            out = hvd.reducescatter(x, op=op, prescale_factor=pre, postscale_factor=post,
                                    name="rsg.%s.%s" % (op, pre))
            (out * (r + 1)).sum().backward()
            same(x.grad, blocks * factor * pre * post, "reducescatter %s gradient" % op)
    xs = [torch.ones(n, 1, requires_grad=True), torch.ones(2 * n, 3, requires_grad=True)]
    outs = hvd.grouped_reducescatter(xs, op=hvd.Sum, name="rsg.grouped")
    sum((o * (r + 1)).sum() for o in outs).backward()
    same(xs[0].grad, torch.arange(1.0, n + 1).reshape(n, 1) * n, "grouped gradient[0]")
    same(xs[1].grad, torch.arange(1.0, n + 1).repeat_interleave(2).unsqueeze(1).expand(-1, 3)
         * n, "grouped gradient[1]")
    raises(hvd.HorovodInternalError, lambda: hvd.reducescatter(torch.ones(n, 2), op=hvd.Adasum,
                                                              name="rs.adasum"), "Adasum")


# ---------------------------------------------------------------- 4. sparse

@suite.check("sparse.allreduce_async_and_sync")
def _():
    # Rank k: 1 at index k, k + 1 at the shared index n, and a duplicate of index k (an
    # uncoalesced tensor, as embedding gradients are).
    sp = torch.sparse_coo_tensor([[r, n, r]], [1.0, r + 1.0, 0.5], (n + 1,))
    dense = torch.cat([torch.full((n,), 1.5), torch.tensor([n * (n + 1) / 2.0])])
    h = hvd.sparse_allreduce_async(sp, "sp.sum", op=hvd.Sum)
    got = h()  # Horovod's handle is a callable
    assert got.is_sparse and got._nnz() == 3 * n, got  # every rank's entries, not summed yet
    same(got.to_dense(), dense, "sparse sum")
    h = hvd.sparse_allreduce_async(sp, "sp.avg", op=hvd.Average)
    while not hvd.poll(h):
        pass
    same(hvd.synchronize(h).to_dense(), dense / n, "sparse average")
    same(hvd.sparse_allreduce(sp, "sp.sync", op=hvd.Sum).to_dense(), dense, "sparse_allreduce")
    raises(RuntimeError, lambda: hvd.sparse_allreduce_async(torch.ones(2), "sp.dense"))


def embedding_training(sparse_as_dense):
    def net():
        torch.manual_seed(5)
        return torch.nn.Embedding(n + 2, 3, sparse=True)

    def loss(m, k):
        return m(torch.tensor([k, k + 1, n + 1, k])).pow(2).sum()

    m = net()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                   named_parameters=m.named_parameters(),
                                   sparse_as_dense=sparse_as_dense)
    for _ in range(2):
        opt.zero_grad()
        loss(m, r).backward()
        opt.synchronize()
        assert m.weight.grad.is_sparse, "the reduced gradient is not sparse (as in Horovod)"
        with opt.skip_synchronize():
            opt.step()
    ref = net()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(2):
        ref_opt.zero_grad()
        (sum(loss(ref, k) for k in range(n)) / n).backward()
        ref_opt.step()
    assert torch.allclose(m.weight, ref.weight, atol=1e-6), (m.weight, ref.weight)


suite.add("sparse.optimizer_embedding", embedding_training, False)
suite.add("sparse.optimizer_embedding_as_dense", embedding_training, True)


# ---------------------------------------------------------------- 5. optimizer state

@suite.check("optimizer_state.parameters_without_grads")
def _():
    # Horovod's test_broadcast_state_no_grad: a fresh optimizer is initialized with zero
    # gradients (for parameters that require them) before its state is broadcast.
    class NoGrad(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Parameter(torch.tensor([1, 3], dtype=torch.int32),
                                        requires_grad=False)
            self.b = torch.nn.Parameter(torch.rand(4))

    model = NoGrad()
    opt = torch.optim.SGD(model.parameters(), lr=0.001, weight_decay=1e-6, momentum=0.9,
                          nesterov=True)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    grad = opt.param_groups[0]["params"][1].grad
    assert opt.param_groups[0]["params"][0].grad is None
    same(hvd.broadcast(grad, root_rank=0, name="ost.grad"), grad, "zero gradient")


@suite.check("optimizer_state.missing_and_empty_state")
def _():
    # SGD without momentum keeps None buffers; with momentum, a parameter that had no
    # gradient has no buffer. The root trained two of three layers; the others nothing.
    torch.manual_seed(30 + r)
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2),
                                torch.nn.Linear(2, 1))
    plain = torch.optim.SGD(model.parameters(), lr=0.1)
    momentum = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if r == 0:
        model[2](model[1](torch.ones(1, 2))).sum().backward()
        plain.step()
        momentum.step()
    for opt, tag in ((plain, "plain"), (momentum, "momentum")):
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        everyone = hvd.allgather_object(sorted(
            (k, sorted(v)) for k, v in opt.state_dict()["state"].items()))
        assert all(e == everyone[0] for e in everyone), (tag, everyone)
    buffers = [momentum.state[p].get("momentum_buffer") for p in model.parameters()]
    flat = torch.cat([b.reshape(-1) for b in buffers if b is not None])
    gathered = hvd.allgather(flat.unsqueeze(0), name="ost.buffers")
    assert torch.equal(gathered, gathered[0].expand_as(gathered)), gathered


# ---------------------------------------------------------------- 6. error types

@suite.check("errors.allgather_after_join_and_the_job_continues")
def _():
    if r == 0:
        last = hvd.join()
    else:
        e = raises(RuntimeError, lambda: hvd.allgather(torch.ones(2, 1), name="join.ag"),
                   "joined")
        assert isinstance(e, hvd.HorovodInternalError), type(e)
        e = raises(RuntimeError, lambda: hvd.alltoall(torch.ones(n), name="join.a2a"), "joined")
        last = hvd.join()
    assert last != 0 or n == 1, last
    s = hvd.allreduce(torch.ones(1), op=hvd.Sum, name="join.after")
    assert s.item() == n, s


@suite.check("errors.types_match_horovod")
def _():
    value_errors = [
        ("unsupported dtype", lambda: hvd.allreduce(torch.ones(2, dtype=torch.complex64),
                                                    name="et.complex")),
        ("average and op", lambda: hvd.allreduce(torch.ones(2), average=True, op=hvd.Sum,
                                                 name="et.both")),
    ]
    runtime_errors = [
        ("root out of range", lambda: hvd.broadcast(torch.ones(2), root_rank=n, name="et.root")),
        ("splits of the wrong length",
         lambda: hvd.alltoall(torch.ones(n + 1), splits=[1] * (n + 1), name="et.splits")),
        ("uneven alltoall", lambda: hvd.alltoall(torch.ones(n + 1), name="et.uneven")),
        ("0-d reducescatter", lambda: hvd.reducescatter(torch.tensor(1.0), name="et.rs0")),
        ("0-d allgather", lambda: hvd.allgather(torch.tensor(1.0), name="et.ag0")),
        ("Adasum on integers", lambda: hvd.allreduce(torch.ones(2, dtype=torch.int32),
                                                    op=hvd.Adasum, name="et.adasum_int")),
        ("average of bool", lambda: hvd.allreduce(torch.ones(2, dtype=torch.bool),
                                                  name="et.bool_avg")),
        ("unknown op", lambda: hvd.allreduce(torch.ones(2), op=6, name="et.op")),
    ]
    for what, call in value_errors:
        e = raises(ValueError, call)
        assert not isinstance(e, RuntimeError), (what, type(e))
    for what, call in runtime_errors:
        e = raises(RuntimeError, call)
        assert not isinstance(e, ValueError) and isinstance(e, hvd.HorovodInternalError), (
            what, type(e))
    # An op that is not an int is refused by Horovod's binding (pybind11) with TypeError.
    raises(TypeError, lambda: hvd.allreduce(torch.ones(2), op="Median", name="et.op_str"))
    s = hvd.allreduce(torch.ones(1), op=hvd.Sum, name="et.after")
    assert s.item() == n, s


# ---------------------------------------------------------------- 7. Adasum, names, timeline

def adasum_pair(a, b):
    """Maleki et al.'s combination, written out in float64."""
    a, b = a.double(), b.double()
    dot = float(a @ b)
    return (1 - dot / (2 * float(a @ a))) * a + (1 - dot / (2 * float(b @ b))) * b


def adasum_tree(vectors):
    while len(vectors) > 1:
        vectors = [adasum_pair(vectors[i], vectors[i + 1]) for i in range(0, len(vectors), 2)]
    return vectors[0]


def adasum_input(k):
    return torch.tensor([1.0, k + 1.0, (k - 1.0) ** 2, 2.0 - k])


@suite.check("adasum.allreduce_power_of_two")
def _():
    parts = [adasum_input(k) for k in range(n)]
    want = adasum_tree(parts)
    if n > 1:  # neither the sum nor the average: Adasum cannot pass for them
        assert not torch.allclose(want, torch.stack(parts).double().sum(0))
        assert not torch.allclose(want, torch.stack(parts).double().mean(0))
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-5), (torch.float16, 2e-3)):
        got = hvd.allreduce(parts[r].to(dtype), op=hvd.Adasum, name="ad.%s" % short(dtype))
        assert got.dtype == dtype
        assert torch.allclose(got.double(), want, rtol=tol, atol=tol), (dtype, got, want)
    got = hvd.allreduce(parts[r], op=hvd.Adasum, prescale_factor=2.0, postscale_factor=0.25,
                        name="ad.scaled")
    assert torch.allclose(got.double(), adasum_tree([p * 2 for p in parts]) * 0.25, atol=1e-5)
    raises(NotImplementedError, lambda: hvd.allreduce(torch.ones(2), op=hvd.Adasum,
                                                      name="ad.set", process_set=MINE),
           "process sets")


@suite.check("adasum.delta_optimizer")
def _():
    # Horovod's Adasum optimizer combines each rank's local update -lr * g_k with Adasum.
    torch.manual_seed(11)
    w0 = torch.randn(1, 3)
    xs = [torch.tensor([[1.0, k, 0.5 * k * k]]) for k in range(n)]

    def grad(k):
        w = w0.clone().requires_grad_(True)
        (w @ xs[k].t()).pow(2).sum().backward()
        return w.grad

    model = torch.nn.Linear(3, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(w0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    opt.zero_grad()
    model(xs[r]).pow(2).sum().backward()
    opt.step()
    want = w0.double() + adasum_tree([(-0.1 * grad(k)).reshape(-1) for k in range(n)]).reshape(1, 3)
    if n > 1:
        averaged = w0.double() - 0.1 * torch.stack([grad(k) for k in range(n)]).double().mean(0)
        assert not torch.allclose(want, averaged, atol=1e-4)
    assert torch.allclose(model.weight.double(), want, atol=1e-5), (model.weight, want)
    raises(AssertionError, lambda: opt.skip_synchronize().__enter__(), "Adasum")


@suite.check("mpi_ops_names_scripts_import")
def _():
    from horovod.torch.mpi_ops import (  # noqa: F401
        Adasum, Average, Compression, HorovodInternalError, ProcessSet, Sum, add_process_set,
        allgather, allreduce, allreduce_async_, barrier, broadcast_, ccl_built, cross_rank,
        cuda_built, global_process_set, gloo_built, gloo_enabled,
        handle_average_backwards_compatibility, init, is_initialized, join, local_rank,
        local_size, mpi_built, mpi_enabled, nccl_built, poll, rank, reducescatter,
        remove_process_set, rocm_built, shutdown, size, sparse_allreduce_async,
        start_timeline, stop_timeline, synchronize)
    assert rank() == r and size() == n and allreduce is hvd.allreduce
    assert handle_average_backwards_compatibility(None, False) == Sum


@suite.check("nothing_accepted_and_ignored")
def _():
    assert hvd.gloo_built() is False and hvd.gloo_enabled() is False
    assert hvd.mpi_built() is False and hvd.mpi_enabled() is False
    # HOROVOD_CYCLE_TIME=0.5 (the job's environment) is half a millisecond, not 0.
    assert os.environ["HOROVOD_CYCLE_TIME"] == "0.5"
    assert hvd.global_process_set._engine.cycle_time_ms == 0.5


def grouped_training(kw):
    torch.manual_seed(21)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    ref = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    ref.load_state_dict(model.state_dict())
    if kw.get("groups") == "explicit":
        kw["groups"] = [[model[0].weight, model[2].weight]]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters(), **kw)
    if "num_groups" in kw:
        assert any(issubclass(w.category, DeprecationWarning) for w in caught), caught
    torch.manual_seed(22)
    x = torch.randn(4 * n, 3)
    y = x.sum(1, keepdim=True)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x[4 * r:4 * r + 4]), y[4 * r:4 * r + 4]).backward()
    groups = [k for k in opt._handles if isinstance(k, tuple)]
    assert groups, "no grouped allreduce was submitted during backward"
    opt.step()
    torch.nn.functional.mse_loss(ref(x), y).backward()
    torch.optim.SGD(ref.parameters(), lr=0.1).step()
    for a, b in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(a, b, atol=1e-5), (a, b)


suite.add("optimizer.groups_count", grouped_training, {"groups": 2})
suite.add("optimizer.groups_lists", grouped_training, {"groups": "explicit"})
suite.add("optimizer.num_groups_deprecated", grouped_training, {"num_groups": 2})


@suite.check("optimizer.gradient_predivide_factor_keeps_float16_in_range")
def _():
    # Every rank's gradient is 40000: averaged through float16 without predividing, the sum
    # overflows; with gradient_predivide_factor=n each rank sends 40000/n.
    def train(factor):
        model = torch.nn.Linear(1, 1, bias=False)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                       named_parameters=model.named_parameters(),
                                       compression=hvd.Compression.fp16,
                                       gradient_predivide_factor=factor)
        opt.zero_grad()
        (model(torch.ones(1, 1)) * 40000.0).sum().backward()
        opt.synchronize()
        return model.weight.grad.clone()

    if n > 1:
        assert torch.isinf(train(1.0)).all()
    same(train(float(n)), torch.full((1, 1), 40000.0), "predivided gradient")


@suite.check("timeline.started_by_script")
def _():
    # Every rank asks for a file of its own; only rank 0 writes, as Horovod's coordinator (the
    # pytest reads the files).
    path = os.path.join(os.environ["RESULT_DIR"], "started-timeline-%d.json" % r)
    hvd.start_timeline(path, mark_cycles=True)
    hvd.allreduce(torch.ones(2, 3), name="tl.traced")
    hvd.stop_timeline()
    assert os.path.exists(path) == (r == 0), (r, os.path.exists(path))


suite.run(finish=hvd.shutdown)
