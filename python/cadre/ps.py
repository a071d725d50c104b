"""cadre.ps: parameter-server mode for PyTorch.

Every learner of a ``pytorch`` (parameter-server) job runs the same program. Learners
1..PS_HOSTS_COUNT are servers, the rest are workers (see ``role()``)::

    import cadre.ps as ps
    if ps.role() == "ps":
        ps.serve()                      # returns once every worker called done()
    else:
        opt = ps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model=model)
        for x, y in data:
            opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()
        opt.done()

The servers hold the variables and apply the optimizer themselves (SGD, momentum, Adam, or a plain
sum), with the wrapped optimizer's hyper-parameters as they are at each step: each ``step()``
sends every param group's current ``lr`` (and its momentum, dampening, nesterov, betas, eps and
weight decay when they differ from the ones the optimizer was made with), so schedulers
(``torch.optim.lr_scheduler``, momentum cycling) and hand-written changes reach the servers;
what the servers cannot apply (``amsgrad``, ``maximize``) is refused.
``state_dict()``/``load_state_dict()`` carry the servers'
optimizer state (momentum buffers, Adam's moments and step) in torch.optim's format, so a
checkpoint resumes exactly. A worker pushes gradients and pulls the updated parameters on every
``step()``; the model's buffers (BatchNorm running statistics) travel with them and come back as
the workers' mean (``sync_buffers``). In ``mode="sync"`` each step is one update with the mean
gradient of all workers; in ``mode="async"`` each push is applied as it arrives. Parameters must
be float32 tensors, on the CPU or a GPU: a model on a GPU keeps page-locked host copies of its
parameters and gradients, which the client reads and writes; gradients are copied to them after
the backward pass (on a side stream, after the producing stream), the updated values back to the
GPU before the work queued next (docs/gpu.md).
"""
import atexit
import functools
import weakref

from cadre import _core

if not getattr(_core, "PS_BUILT", False):
    raise ImportError("cadre.ps: this cadre was built without parameter servers "
                      "(-DCADRE_WITH_PS=OFF or -DCADRE_CORE_ONLY=ON); rebuild with them to use "
                      "parameter-server mode")

__all__ = ["role", "serve", "DistributedOptimizer", "PsServer", "PsClient", "learner_role"]

PsServer = _core.PsServer
PsClient = _core.PsClient
CadreError = _core.CadreError


def learner_role():
    """This learner's full parameter-server role (a dict) from the learner contract
    (LEARNER_ID, NUM_LEARNERS, LEARNER_NAME_PREFIX, PS_HOSTS_COUNT, CADRE_JOB_TOKEN)."""
    return _core.ps_role()


def role():
    """``"ps"`` on learners 1..PS_HOSTS_COUNT, ``"worker"`` on the others."""
    return learner_role()["role"]


def serve(step_timeout=300.0, timeout=None, worker_timeout=600.0):
    """Serves this learner's share of the variables on its port 2222 and returns once every
    worker is done (True), or False when ``timeout`` seconds pass first.

    Never waits forever for dead workers: a worker that has not said done and has had no request
    in progress for ``worker_timeout`` seconds (counted from the start for one never heard from)
    is presumed dead, and serve() raises CadreError naming it. Under ``cadre run`` the
    supervisor ends the job sooner when a worker process fails. A sync step waits at most
    ``step_timeout`` seconds for the other workers' gradients."""
    r = learner_role()
    if r["role"] != "ps":
        raise _core.CadreInvalidArgument(
            "cadre.ps.serve: learner %d is a worker (PS_HOSTS_COUNT=%d)"
            % (r["learner_id"], r["num_servers"]))
    server = _core.PsServer(r["listen_address"], r["num_workers"], r["token"], step_timeout,
                            worker_timeout)
    try:
        return server.wait(timeout)
    finally:
        server.shutdown()


def _optimizer_config(optimizer, group):
    import torch

    def hp(name, default=0.0):
        return float(group.get(name, default))

    if isinstance(optimizer, torch.optim.SGD):
        if group.get("maximize", False):
            raise ValueError("cadre.ps: maximize=True is not served")
        momentum = hp("momentum")
        if momentum == 0.0:
            return {"kind": "sgd", "lr": hp("lr"), "weight_decay": hp("weight_decay")}
        return {"kind": "momentum", "lr": hp("lr"), "momentum": momentum,
                "dampening": hp("dampening"), "nesterov": bool(group.get("nesterov", False)),
                "weight_decay": hp("weight_decay")}
    if isinstance(optimizer, torch.optim.Adam) and not isinstance(optimizer, torch.optim.AdamW):
        if group.get("amsgrad", False):
            raise ValueError("cadre.ps: Adam(amsgrad=True) is not served; use amsgrad=False")
        if group.get("maximize", False):
            raise ValueError("cadre.ps: maximize=True is not served")
        beta1, beta2 = group["betas"]
        return {"kind": "adam", "lr": hp("lr"), "beta1": float(beta1), "beta2": float(beta2),
                "eps": hp("eps", 1e-8), "weight_decay": hp("weight_decay")}
    raise ValueError("cadre.ps: optimizer %s is not served; use torch.optim.SGD (with or without "
                     "momentum) or torch.optim.Adam" % type(optimizer).__name__)


def _without_lr(config):
    """All but the learning rate, which every step sends anyway."""
    return {k: v for k, v in config.items() if k != "lr"}


def _check_update(gi, config):
    """Raises ValueError naming param group `gi`'s hyper-parameter that no update may use (a
    server would refuse it, after other servers took the step)."""
    import math
    nonnegative = ("a finite value >= 0", lambda v: math.isfinite(v) and v >= 0)
    unit = ("in [0, 1)", lambda v: 0 <= v < 1)
    checks = {"lr": nonnegative, "weight_decay": nonnegative, "momentum": nonnegative,
              "dampening": ("finite", math.isfinite), "beta1": unit, "beta2": unit,
              "eps": nonnegative}
    for key, (want, ok) in checks.items():
        if key in config and not ok(config[key]):
            name = {"beta1": "betas[0]", "beta2": "betas[1]"}.get(key, key)
            raise ValueError("cadre.ps: param group %d's %s is %r; it must be %s"
                             % (gi, name, config[key], want))


def _entry(name, tensor):
    return (name, tensor.data_ptr(), tensor.numel())


class _DeviceMirrors:
    """Page-locked host copies of the parameters that live on a device, and of their gradients:
    what the client reads and writes for them."""

    def __init__(self, params):
        from cadre.torch import devices
        self._mirrors = {}  # name -> (param, device, host value, host gradient)
        for name, p in params:
            device = devices.device_of(p)
            if device is None:
                continue
            nbytes = p.numel() * p.element_size()
            host = [device.host_buffer(nbytes).view(p.dtype).view(p.shape) for _ in range(2)]
            self._mirrors[name] = (p, device, host[0], host[1])

    def __contains__(self, name):
        return name in self._mirrors

    def value(self, name):
        return self._mirrors[name][2]

    def grad(self, name):
        return self._mirrors[name][3]

    def settle(self):
        """Waits for the copies that still read the host values (before they are written)."""
        for device in {m[1] for m in self._mirrors.values()}:
            device.synchronize(device.record(device.side_stream()))

    def values_to_host(self):
        from cadre.torch import cuda_staging
        cuda_staging.to_host([(p, host, d) for p, d, host, _ in self._mirrors.values()])

    def grads_to_host(self, grads):
        """grads: name -> the gradient on the device to send (trained parameters only)."""
        from cadre.torch import cuda_staging
        cuda_staging.to_host([(grads[n], m[3], m[1]) for n, m in self._mirrors.items()
                              if n in grads])

    def values_to_device(self):
        from cadre.torch import cuda_staging
        cuda_staging.from_host([(host, p, d) for p, d, host, _ in self._mirrors.values()])


class _Buffers:
    """The model's buffers (BatchNorm running statistics, counters) as variables of kind
    "assign": each step pushes this worker's values and takes back the servers' (sync: the mean
    over the workers, so every worker ends a step with the same buffers; async: the latest
    pushed). They travel through float32 host copies, whatever their dtype and device; integer
    buffers come back rounded. Buffers of other dtypes (bool, complex) stay local."""

    def __init__(self, named_buffers):
        import torch
        self.entries = []  # (name, buffer, host copy sent, host copy received)
        for name, b in named_buffers:
            if b is None or not (b.is_floating_point() or _is_integer(b)) or b.is_complex():
                continue
            send = torch.empty(b.shape, dtype=torch.float32)
            self.entries.append((name, b, send, torch.empty_like(send)))

    def gather(self):
        """Copies the buffers' current values to the host copies that are sent."""
        for _, b, send, _ in self.entries:
            send.copy_(b.detach())

    def scatter(self):
        """Writes the received values into the buffers."""
        for _, b, _, recv in self.entries:
            b.copy_(recv if b.is_floating_point() else recv.round())

    def declarations(self, sync):
        return [(n, list(send.shape), send.data_ptr(), {"kind": "assign"}, sync)
                for n, _, send, _ in self.entries]

    def sent(self):
        return [_entry(n, send) for n, _, send, _ in self.entries]

    def received(self):
        return [_entry(n, recv) for n, _, _, recv in self.entries]


def _persistent_buffers(model):
    """The model's buffers that are part of its state dict: non-persistent ones are caches
    (masks, tables) that every worker computes alike, not statistics to share."""
    kept = set(model.state_dict(keep_vars=True))
    return [(n, b) for n, b in model.named_buffers() if n in kept]


def _is_integer(t):
    import torch
    return t.dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


class DistributedOptimizer:
    """Wraps a torch optimizer so that its updates happen on the parameter servers.

    Declares every parameter on the servers (the first worker's initial values win, and every
    worker starts from them), then each ``step()`` pushes this worker's gradients and writes the
    servers' updated values into the parameters. Other attributes (``param_groups``,
    ``zero_grad``...) are the wrapped optimizer's.

    Parameter names come from ``named_parameters``, else ``model.named_parameters()``, else
    their position in the optimizer's groups; every worker must use the same model.

    Parameters that do not require a gradient when it is made are frozen: declared, so that
    every worker starts from the same values, but never pushed, so the servers leave them as
    they are (as torch's optimizers skip them; pushed as zeros, weight decay would shrink them).

    Hyper-parameters: every ``step()`` sends each param group's current ``lr``, and its other
    hyper-parameters (momentum, dampening, nesterov, betas, eps, weight decay) when they differ
    from the ones it was made with; the servers apply them to that step's update, so a
    scheduler works as it does locally: the wrapper is a ``torch.optim.Optimizer`` to torch
    (``StepLR(opt, ...)``, ``OneCycleLR`` cycling the momentum, or on ``opt.optimizer``). Every
    worker must follow the same schedule: a sync step whose workers disagree is refused.

    Buffers (``sync_buffers``, on when ``model`` is given): the model's buffers, such as
    BatchNorm's running mean and variance, are declared too (every worker starts from the first
    worker's) and each ``step()`` replaces them by the workers' mean (sync) or the latest pushed
    values (async). This is what torch's DDP gives with ``broadcast_buffers`` in spirit -- every
    worker evaluates with the same statistics -- but averaged rather than copied from rank 0.

    Checkpoints: ``state_dict()`` returns the wrapped optimizer's state dict with the servers'
    optimizer state (momentum buffers; Adam's ``step``, ``exp_avg``, ``exp_avg_sq``) in
    torch.optim's format; ``load_state_dict()`` restores the hyper-parameters (``lr`` included)
    and sends that state to the servers. Call it on every worker before their first step of the
    resumed job, after loading the model's state dict and making the optimizer from it.
    """

    def __init__(self, optimizer, model=None, named_parameters=None, mode="sync",
                 servers=None, worker_id=None, token=None, sync_buffers=None, **client_options):
        import torch
        if mode not in ("sync", "async"):
            raise ValueError("cadre.ps: mode must be 'sync' or 'async', not %r" % (mode,))
        if sync_buffers and model is None:
            raise ValueError("cadre.ps: sync_buffers=True needs model= (the buffers are the "
                             "model's)")
        self._optimizer = optimizer
        # A torch Optimizer to torch's own checks, as Horovod's is: LR schedulers take it.
        if not isinstance(self, torch.optim.Optimizer):
            self.__class__ = _torch_optimizer_class(type(self))
        if named_parameters is None and model is not None:
            named_parameters = model.named_parameters()
        names = {}
        if named_parameters is not None:
            for name, p in named_parameters:
                names[id(p)] = name
        self._params = []  # (name, parameter) in the optimizer's order
        configs = []
        self._served = []  # per param group: the hyper-parameters the servers apply
        self._group_of = {}  # parameter name -> index of its param group
        from cadre.torch import devices
        for gi, group in enumerate(optimizer.param_groups):
            config = _optimizer_config(optimizer, group)
            self._served.append(config)
            for pi, p in enumerate(group["params"]):
                name = names.get(id(p), "group%d.param%d" % (gi, pi))
                # The client reads host memory; CUDA parameters get host copies. Any other
                # device's memory (meta, mps, ...) must never be read as the host's.
                if p.device.type != "cpu" and devices.device_of(p) is None:
                    raise ValueError("cadre.ps: parameter %r is on device '%s'; parameter-server "
                                     "mode trains parameters on the CPU or on CUDA GPUs"
                                     % (name, p.device))
                if p.dtype != torch.float32:
                    raise ValueError("cadre.ps: parameter %r is %s on %s; only float32 "
                                     "tensors are served" % (name, p.dtype, p.device))
                if not p.is_contiguous():
                    raise ValueError("cadre.ps: parameter %r is not contiguous" % name)
                self._params.append((name, p))
                self._group_of[name] = gi
                configs.append(config)
        self._buffers = _Buffers(_persistent_buffers(model) if model is not None and
                                 sync_buffers is not False else [])
        all_names = [n for n, _ in self._params] + [n for n, *_ in self._buffers.entries]
        if len(set(all_names)) != len(all_names):
            raise ValueError("cadre.ps: two parameters or buffers share a name")
        self._trained = [(n, p) for n, p in self._params if p.requires_grad]
        if servers is None or worker_id is None or token is None:
            r = learner_role()
            if r["role"] != "worker":
                raise _core.CadreInvalidArgument(
                    "cadre.ps.DistributedOptimizer: learner %d is a parameter server; call "
                    "cadre.ps.serve() there" % r["learner_id"])
            servers = r["server_addresses"] if servers is None else servers
            worker_id = r["worker_id"] if worker_id is None else worker_id
            token = r["token"] if token is None else token
        self._client = _core.PsClient(list(servers), int(worker_id), token, **client_options)
        self._mirrors = _DeviceMirrors(self._params)
        sync = mode == "sync"
        with torch.no_grad():
            self._mirrors.values_to_host()
            self._buffers.gather()
            self._client.declare([(n, list(p.shape), self._host(n, p).data_ptr(), c, sync)
                                  for (n, p), c in zip(self._params, configs)] +
                                 self._buffers.declarations(sync))
            self._pull(0, self._params)
        self._step = 0
        self._grads = {}  # zero gradients for parameters that got none, kept between steps
        # Tell the servers this worker finished even if the script forgets to (or fails).
        self._finalizer = weakref.finalize(self, DistributedOptimizer._finish, self._client)
        atexit.register(self._finalizer)

    def _host(self, name, p):
        """What the client reads and writes for parameter `p`: itself, or its host copy."""
        return self._mirrors.value(name) if name in self._mirrors else p

    def _pull(self, step, params):
        self._mirrors.settle()
        self._client.pull(step, [_entry(n, self._host(n, p)) for n, p in params] +
                          self._buffers.received())
        self._mirrors.values_to_device()
        self._buffers.scatter()

    @staticmethod
    def _finish(client):
        try:
            client.done()
        except Exception:  # noqa: BLE001 -- at exit, a dead server must not mask the real error
            pass

    @property
    def optimizer(self):
        """The wrapped torch optimizer (what an LR scheduler is made on)."""
        return self._optimizer

    @property
    def worker_id(self):
        return self._client.worker_id

    @property
    def steps(self):
        return self._step

    def _updates(self):
        """Per param group, the hyper-parameters of this step's update: None where they are the
        ones the servers were given at construction (the learning rate aside, sent anyway), else
        the group's current ones. Raises ValueError naming what the servers cannot apply: a
        value no update may use, a setting that is not served (amsgrad, maximize), or a change
        of which parameters require a gradient (the servers train exactly those that did when
        the optimizer was made)."""
        updates = []
        for gi, (group, served) in enumerate(zip(self._optimizer.param_groups, self._served)):
            now = _optimizer_config(self._optimizer, group)
            _check_update(gi, now)
            updates.append(None if _without_lr(now) == _without_lr(served) else now)
        trained = {n for n, _ in self._trained}
        for name, p in self._params:
            if p.requires_grad != (name in trained):
                raise ValueError(
                    "cadre.ps: parameter %r has requires_grad=%s now but had %s when the "
                    "DistributedOptimizer was made: the servers train exactly the parameters "
                    "that required a gradient then; make it after freezing or unfreezing"
                    % (name, p.requires_grad, not p.requires_grad))
        return updates


    def step(self, closure=None):
        """Pushes the gradients (with each group's current hyper-parameters) and this worker's
        buffers, and replaces the parameters and buffers with the servers' values after this
        step (sync: once every worker pushed it; async: at once). Raises ValueError, before
        anything is sent, for what the servers cannot apply (see ``_updates``)."""
        import torch
        updates = self._updates()
        groups = [self._group_of[n] for n, _ in self._trained]
        lrs = [float(self._optimizer.param_groups[g]["lr"]) for g in groups]
        hypers = [updates[g] for g in groups]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grads, outs = [], []
        keep = {}
        for name, p in self._trained:
            g = p.grad
            if g is None:
                g = self._grads.get(name)
                if g is None:
                    g = self._grads[name] = torch.zeros_like(p)
            elif not g.is_contiguous() or g.dtype != torch.float32:
                g = g.detach().contiguous().to(torch.float32)
            keep[name] = g
            grads.append(_entry(name, self._mirrors.grad(name) if name in self._mirrors else g))
            outs.append(_entry(name, self._host(name, p)))
        with torch.no_grad():
            self._mirrors.grads_to_host(keep)
            self._buffers.gather()
            none = [None] * len(self._buffers.entries)
            self._client.push_pull(self._step, grads + self._buffers.sent(),
                                   outs + self._buffers.received(),
                                   lrs + [0.0] * len(none),
                                   hypers + none if any(hypers) else None)
            self._mirrors.values_to_device()
            self._buffers.scatter()
        self._step += 1
        # LR schedulers count the wrapped optimizer's steps (and warn when they see none).
        if hasattr(self._optimizer, "_step_count"):
            self._optimizer._step_count += 1
        return loss

    def pull_parameters(self):
        """Replaces the parameters (and synchronised buffers) with the servers' values: after
        this worker's last step (sync), or the latest (async) -- e.g. before evaluating an
        async-trained model."""
        import torch
        with torch.no_grad():
            self._pull(self._step, self._trained)

    def _kind(self, name):
        return self._served[self._group_of[name]]["kind"]

    def state_dict(self):
        """The wrapped optimizer's state dict (``param_groups`` with the current hyper-parameters)
        whose ``state`` is the servers' optimizer state after this worker's steps, in
        torch.optim's format: ``momentum_buffer`` for SGD with momentum; ``step``, ``exp_avg``,
        ``exp_avg_sq`` for Adam. Loadable by ``load_state_dict`` here or by the same torch
        optimizer trained locally."""
        import torch
        sd = self._optimizer.state_dict()
        index = {n: i for i, (n, _) in enumerate(self._params)}
        got = self._client.get_state(self._step, [n for n, _ in self._trained])
        state = {}
        for (name, p), (steps, buf, sq) in zip(self._trained, got):
            def tensor(data):
                t = torch.frombuffer(bytearray(data), dtype=torch.float32).reshape(p.shape)
                return t.to(p.device)
            kind = self._kind(name)
            if kind in ("sgd", "momentum") and buf is not None:
                state[index[name]] = {"momentum_buffer": tensor(buf)}
            elif kind == "adam" and steps > 0 and buf is not None and sq is not None:
                state[index[name]] = {"step": torch.tensor(float(steps)),
                                      "exp_avg": tensor(buf), "exp_avg_sq": tensor(sq)}
        sd["state"] = state
        return sd

    def load_state_dict(self, state_dict):
        """Restores the wrapped optimizer's hyper-parameters (the next step sends them) and
        sends the optimizer state to the servers, all or nothing across them. Refuses
        (ValueError) a state dict with hyper-parameters the servers cannot apply, or whose state
        does not fit a parameter, and CadreError naming the server and variable when a server
        refuses its share; nothing is changed then, here or on any server."""
        import torch
        groups = [{k: v for k, v in g.items() if k != "params"}
                  for g in self._optimizer.param_groups]
        self._optimizer.load_state_dict(state_dict)
        try:
            self._updates()
            entries, keep = [], []
            for name, p in self._trained:
                st = self._optimizer.state.get(p, {})
                kind = self._kind(name)
                steps, parts = 0, []
                if kind in ("sgd", "momentum") and st.get("momentum_buffer") is not None:
                    steps, parts = 1, [st["momentum_buffer"], None]
                elif kind == "adam" and "step" in st:
                    steps, parts = int(float(st["step"])), [st.get("exp_avg"),
                                                            st.get("exp_avg_sq")]
                ptrs = []
                for t, field in zip(parts, ("buffer", "second moment")):
                    if t is None:
                        ptrs.append(0)
                        continue
                    if t.numel() != p.numel():
                        raise ValueError("cadre.ps: the state's %s for parameter %r has %d "
                                         "elements, the parameter %d"
                                         % (field, name, t.numel(), p.numel()))
                    host = t.detach().to("cpu", torch.float32).contiguous()
                    keep.append(host)
                    ptrs.append(host.data_ptr())
                ptrs += [0] * (2 - len(ptrs))
                entries.append((name, steps, ptrs[0], ptrs[1], p.numel()))
            self._client.set_state(entries)
        except Exception:
            for group, saved in zip(self._optimizer.param_groups, groups):
                group.update(saved)
            raise
        finally:
            # The servers hold the state; the wrapped optimizer never steps.
            self._optimizer.state.clear()

    def add_param_group(self, param_group):
        raise ValueError("cadre.ps: the parameter servers hold the variables declared when the "
                         "DistributedOptimizer was made; add the param group to the wrapped "
                         "optimizer before making it")

    def done(self):
        """Tells every server this worker finished (also done automatically at exit)."""
        self._finalizer()

    def zero_grad(self, set_to_none=False):
        self._optimizer.zero_grad(set_to_none=set_to_none)

    def __getattr__(self, name):
        return getattr(self._optimizer, name)


@functools.lru_cache(maxsize=None)
def _torch_optimizer_class(cls):
    """`cls` (DistributedOptimizer or a user's subclass) with torch.optim.Optimizer as a base
    too, so that isinstance checks (LR schedulers, SWA utilities) accept it. Its own methods
    come first; Optimizer's others (``__repr__``, ``__getstate__``) read ``param_groups``,
    ``state`` and ``defaults``, which are the wrapped optimizer's (``__getattr__``)."""
    import torch
    return type(cls.__name__, (cls, torch.optim.Optimizer),
                {"__module__": cls.__module__, "__doc__": cls.__doc__})


def _bench(argv):
    """`python3 -m cadre.ps bench [--size 64M] [--steps 5]` as every learner of a PS job: servers
    serve, each worker push-pulls one tensor of SIZE per step (sync, sum optimizer) and reports
    its median step time and throughput. Run it under `cadre run --emulate-network RATE` to
    measure against a shaped link: with full-duplex links and pipelined partitions the bound for
    one worker and one server is SIZE / RATE per step."""
    import argparse
    import statistics
    import time

    import numpy as np

    parser = argparse.ArgumentParser(prog="python3 -m cadre.ps bench")
    parser.add_argument("--size", default="64M",
                        help="tensor size in bytes, with cadre's units (4096, 256K, 64M, 1G)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--partition-mib", type=float, default=None,
                        help="largest partition of a split variable (default: the client's)")
    parser.add_argument("--message-mib", type=float, default=None,
                        help="payload budget of one RPC (default: the client's)")
    parser.add_argument("--in-flight", type=int, default=None,
                        help="RPCs in flight per server (default: the client's)")
    parser.add_argument("--stall-timeout", type=float, default=None,
                        help="seconds without an answer to the liveness pings after which a "
                             "server counts as stalled (default: the client's)")
    args = parser.parse_args(argv)
    try:
        size = _core.parse_byte_size(args.size)  # the units of `cadre bench` (base/byte_size.h)
    except _core.CadreInvalidArgument as e:
        parser.error("--size: %s" % e)
    if size < 4:
        parser.error("--size: %r is less than one float32 (4 bytes)" % args.size)
    r = learner_role()
    if r["role"] == "ps":
        serve()
        return
    options = {}
    if args.partition_mib is not None:
        options["partition_bytes"] = int(args.partition_mib * (1 << 20))
    if args.message_mib is not None:
        options["message_bytes"] = int(args.message_mib * (1 << 20))
    if args.in_flight is not None:
        options["max_in_flight"] = args.in_flight
    if args.stall_timeout is not None:
        options["stall_timeout"] = args.stall_timeout
    client = _core.PsClient(r["server_addresses"], r["worker_id"], r["token"], **options)
    n = size // 4
    value = np.zeros(n, dtype=np.float32)
    grad = np.full(n, 1e-6, dtype=np.float32)
    client.declare([("bench", [n], value.ctypes.data, {"kind": "sum"}, True)])
    times = []
    for step in range(args.steps + 1):
        t0 = time.perf_counter()
        client.push_pull(step, [("bench", grad.ctypes.data, n)], [("bench", value.ctypes.data, n)])
        if step:
            times.append(time.perf_counter() - t0)
    client.done()
    t = statistics.median(times)
    print("ps bench: worker %d of %d, %d servers, %.1f MiB: step %.3f s, %.3f Gbit/s per worker"
          % (r["worker_id"], r["num_workers"], r["num_servers"], size / 2**20, t,
             size * 8 / t / 1e9), flush=True)


if __name__ == "__main__":
    import sys
    if sys.argv[1:2] != ["bench"]:
        sys.exit("usage: python3 -m cadre.ps bench [--size 64M] [--steps 5]")
    _bench(sys.argv[2:])
