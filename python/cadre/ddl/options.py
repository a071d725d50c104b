"""DDL's options string (``ddl.init(options)`` and the ``DDL_OPTIONS`` environment variable).

Understood flags (anything else is an error naming the flag):

``-mode ALGO[:DIMS]``
    ``h`` (the default): hierarchical allreduce — reduce-scatter among a learner's slots over shared
    memory, allreduce across learners, allgather inside. ``p``: the same (IBM's ``ddlrun`` writes
    ``-mode p:4x1x1x1``, its topology-aware default, into ``DDL_OPTIONS``). ``r``: one flat ring
    over every rank. Any other letter is refused, naming these.
    ``DIMS`` is DDL's topology, innermost first: slots per learner, then the learners as a grid,
    e.g. ``h:2x4`` (2 slots, 4 learners in one ring) or ``h:2x2x2`` (2 slots, learners as a 2x2 grid:
    DDL's multi-ring). The first dimension must equal the slots per learner and the rest must
    multiply to the number of learners; a dimension of 1 adds no level (``p:4x1x1x1`` is 4 slots
    on one learner).
``-dump_iter N``
    every N calls of ``grads_reduce``, rank 0 prints how long gradient reduction took.

``DDL_GROUP_SIZE`` (bytes, default 64 MiB) bounds how many gradient bytes ``grads_reduce`` hands
to the engine as one group (one negotiation, one fused allreduce).
"""
import os
import shlex
from dataclasses import dataclass, field

MODES = {"h": "hierarchical", "p": "hierarchical", "r": "ring"}
# What the refusal of an unknown -mode letter lists.
_MODE_HELP = ("h (hierarchical), p (hierarchical, as ddlrun's default -mode p:...) and r (one flat "
              "ring)")
DEFAULT_GROUP_SIZE = 64 << 20


@dataclass
class Options:
    algorithm: str = "hierarchical"         # "hierarchical" | "ring"
    dims: list = field(default_factory=list)  # [] = chosen from the topology
    dump_iter: int = 0                      # 0 = never
    group_size: int = DEFAULT_GROUP_SIZE

    def host_grid(self):
        """The learners' grid (dims after the first, without those of 1, which add no level), or
        [] when chosen automatically."""
        return [d for d in self.dims[1:] if d != 1]


def _parse_dims(text, flag):
    dims = []
    for part in text.split("x"):
        if not part.isdigit() or int(part) < 1:
            raise ValueError("DDL option %s: dimension %r of %r is not a positive integer"
                             % (flag, part, text))
        dims.append(int(part))
    return dims


def _positive_int(text, what):
    try:
        value = int(text)
    except ValueError:
        raise ValueError("%s=%r is not an integer" % (what, text)) from None
    if value < 1:
        raise ValueError("%s=%r must be >= 1" % (what, text))
    return value


def parse(text, opts=None):
    """Applies the flags of `text` to `opts` (a new Options when None) and returns it."""
    opts = opts or Options()
    words = shlex.split(text or "")
    i = 0
    while i < len(words):
        flag = words[i]
        if flag not in ("-mode", "-dump_iter"):
            raise ValueError("unknown DDL option %r in %r (cadre understands -mode and -dump_iter)"
                             % (flag, text))
        if i + 1 >= len(words):
            raise ValueError("DDL option %s needs a value (in %r)" % (flag, text))
        value = words[i + 1]
        i += 2
        if flag == "-mode":
            algo, _, dims = value.partition(":")
            if algo not in MODES:
                raise ValueError("DDL option -mode %r: algorithm %r is not supported; cadre "
                                 "supports %s" % (value, algo, _MODE_HELP))
            opts.algorithm = MODES[algo]
            opts.dims = _parse_dims(dims, "-mode") if dims else []
        else:
            opts.dump_iter = _positive_int(value, "DDL option -dump_iter")
    return opts


def from_environment(text=None, environ=None):
    """DDL_OPTIONS first, then `text` (its flags win), then DDL_GROUP_SIZE."""
    environ = os.environ if environ is None else environ
    opts = parse(environ.get("DDL_OPTIONS", ""))
    opts = parse(text, opts)
    group = environ.get("DDL_GROUP_SIZE")
    if group not in (None, ""):
        opts.group_size = _positive_int(group, "DDL_GROUP_SIZE")
    return opts


def check_topology(opts, local_size, num_hosts):
    """Raises ValueError when -mode's dimensions do not describe this job."""
    if not opts.dims:
        return
    product = 1
    for d in opts.dims[1:]:
        product *= d
    if opts.dims[0] != local_size or product != num_hosts:
        raise ValueError(
            "DDL option -mode dims %s describe %d slot(s) x %d learner(s), but the job has %d "
            "slot(s) per learner x %d learner(s)"
            % ("x".join(map(str, opts.dims)), opts.dims[0], product, local_size, num_hosts))
