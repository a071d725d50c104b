"""Puts a Horovod-mode test script's collectives on a device (torch_job_on_device.py): each
collective of the module gets its dense CPU tensor arguments moved to the device first, every
result is checked to be on that device and handed back on the CPU, and the in-place forms write
their device result back into the script's own tensors, so that checks written for CPU tensors
(results, identity of in-place outputs) hold unchanged.

kind "cuda": the device is cuda:(local rank % GPUs). kind "copies": tensors are "moved" by
cloning them (for the simulated device, whose tensors are CPU tensors), so that this module's
own logic runs in CI too.
"""
import functools

import torch

# Collectives taking a tensor (or a list of tensors) first and returning results.
_OUT_OF_PLACE = ["allreduce", "allreduce_async", "grouped_allreduce", "grouped_allreduce_async",
                 "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async",
                 "broadcast", "broadcast_async", "alltoall", "alltoall_async", "reducescatter",
                 "reducescatter_async", "grouped_reducescatter", "grouped_reducescatter_async"]
# In-place forms: the script's tensors must hold the result afterwards.
_IN_PLACE = ["allreduce_", "allreduce_async_", "grouped_allreduce_", "grouped_allreduce_async_",
             "broadcast_", "broadcast_async_"]


def install(hvd, kind="cuda"):
    """Wraps hvd's collectives (call before the script's hvd.init()); returns a dict whose
    "moved" counts the results that came back from the device."""
    state = {"write_back": {}, "moved": 0}
    if kind not in ("cuda", "copies"):
        raise ValueError("kind %r: cuda or copies" % kind)

    def move(t):
        if kind == "copies":
            return t.clone()
        return t.to(torch.device("cuda", hvd.local_rank() % torch.cuda.device_count()))

    def on_device(t):
        return t.is_cuda if kind == "cuda" else True

    def to_device(x):
        if torch.is_tensor(x) and not x.is_sparse and x.device.type == "cpu":
            return move(x)
        if isinstance(x, (list, tuple)) and x and all(torch.is_tensor(t) for t in x):
            return type(x)(to_device(t) for t in x)
        return x

    def back(x):
        if torch.is_tensor(x):
            if x.is_cuda:
                state["moved"] += 1
                return x.cpu()
            return x
        if isinstance(x, (list, tuple)):
            return type(x)(back(t) for t in x)
        return x

    def pairs(original, moved):
        if torch.is_tensor(original):
            return [(original, moved)]
        return list(zip(original, moved))

    original = {name: getattr(hvd, name) for name in _OUT_OF_PLACE + _IN_PLACE + ["synchronize"]}

    def out_of_place(name):
        fn = original[name]

        @functools.wraps(fn)
        def wrapper(tensor, *args, **kwargs):
            result = fn(to_device(tensor), *args, **kwargs)
            return result if name.endswith("_async") else back(result)
        return wrapper

    def in_place(name):
        fn = original[name]

        @functools.wraps(fn)
        def wrapper(tensor, *args, **kwargs):
            moved = to_device(tensor)
            result = fn(moved, *args, **kwargs)
            if name.endswith("_async_"):
                state["write_back"][result] = (tensor, pairs(tensor, moved))
                return result
            for mine, dev in pairs(tensor, moved):
                assert on_device(dev), "%s left its tensor on %s" % (name, dev.device)
                with torch.no_grad():
                    mine.copy_(dev.cpu())
            return tensor
        return wrapper

    @functools.wraps(original["synchronize"])
    def synchronize(handle):
        result = original["synchronize"](handle)
        written = state["write_back"].pop(handle, None)
        if written is None:
            return back(result)
        given, moved = written
        for mine, dev in moved:
            assert on_device(dev), "the in-place result left the device"
            with torch.no_grad():
                mine.copy_(dev.cpu())
        return given if torch.is_tensor(given) else list(given)

    for name in _OUT_OF_PLACE:
        setattr(hvd, name, out_of_place(name))
    for name in _IN_PLACE:
        setattr(hvd, name, in_place(name))
    hvd.synchronize = synchronize
    return state
