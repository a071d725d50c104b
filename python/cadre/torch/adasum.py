"""The Adasum reduction (Maleki et al., "Scaling Distributed Training with Adaptive Summation"),
as Horovod's op=hvd.Adasum on CPUs: gradients are combined pairwise along a binary tree over the
ranks (rank 2i with 2i+1, then pairs of pairs, ...),
adasum(a, b) = (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b,
so that parallel components are averaged and orthogonal ones added.

Horovod's arithmetic is kept: each tensor on its own; dot products and squared norms in float64
of the element products (float32 products rounded to float32 first, as its loop computes them);
a coefficient is 1 when its squared norm is below 1e-8; each level's result is rounded to the
tensor's dtype (float16 combined in float32); prescale and postscale multiply the input and the
result as Horovod's ScaleBuffer does. As in Horovod, Adasum takes float16, float32 and float64
tensors of the global process set at power-of-two sizes (NotImplementedError otherwise).

Only the arithmetic lives here; submission.py submits the allgather and registers its handle.
Every rank gathers all contributions (allgather) and evaluates the same tree, so all ranks get
bit-identical results; that costs size x the memory of the tensor, which suits the moderate rank
counts this mode runs at. Horovod computes the same tree with vector halving and distance
doubling; per element the arithmetic is the same.
"""
import torch

from cadre.torch.basics import HorovodInternalError

_ADASUM_DTYPES = (torch.float16, torch.float32, torch.float64)


def scale_like_horovod(t, factor):
    """t * factor in Horovod's CPU arithmetic (ScaleBuffer): the factor in the tensor's own
    precision, float16 widened to float32."""
    if factor == 1.0:
        return t
    if t.dtype == torch.float16:
        return (t.float() * torch.tensor(factor, dtype=torch.float32)).half()
    return t * torch.tensor(factor, dtype=t.dtype)


def _dot_and_norms(a, b):
    if a.dtype == torch.float64:
        return float(torch.dot(a, b)), float(torch.dot(a, a)), float(torch.dot(b, b))
    wa, wb = a.float(), b.float()  # float16 is widened first; float32 products round here
    return (float((wa * wb).double().sum()), float((wa * wa).double().sum()),
            float((wb * wb).double().sum()))


def combine(a, b):
    """adasum(a, b) of two 1-d tensors of one dtype, as Horovod's pairwise step computes it."""
    dot, anorm, bnorm = _dot_and_norms(a, b)
    acoeff = 1.0 - dot / anorm * 0.5 if anorm >= 1e-8 else 1.0
    bcoeff = 1.0 - dot / bnorm * 0.5 if bnorm >= 1e-8 else 1.0
    if a.dtype == torch.float16:
        return (torch.tensor(acoeff, dtype=torch.float32) * a.float() +
                torch.tensor(bcoeff, dtype=torch.float32) * b.float()).half()
    return (acoeff * a.double() + bcoeff * b.double()).to(a.dtype)


def adasum_reduce(vectors):
    """Reduces a power-of-two list of 1-d tensors along the binary tree."""
    level = list(vectors)
    while len(level) > 1:
        level = [combine(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


def check_supported(dtype, process_set, size):
    """Raises what Horovod raises where it has no Adasum."""
    if process_set is not None and process_set.process_set_id != 0:
        raise NotImplementedError("Adasum does not support non-global process sets yet.")
    if size & (size - 1):
        raise NotImplementedError("Running Adasum with non-power of 2 ranks is not supported "
                                  "yet.")
    if dtype not in _ADASUM_DTYPES:
        raise HorovodInternalError("Adasum supports float16, float32 and float64 tensors, not %s"
                                   % dtype)
