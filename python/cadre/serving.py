"""Saving a trained PyTorch model for online scoring (`cadre serve`, deployments).

``cadre.save_model(model, example_input)`` writes a *model folder*, by default ``model/`` in the
job's results (``$RESULT_DIR``, or the current folder outside a job):

- ``model.pt``: the model as TorchScript (``torch.jit.script``, or ``torch.jit.trace`` on the
  example input where scripting fails), in evaluation mode, on the CPU. The scorer loads it with
  libtorch in C++: no Python on the prediction path.
- ``model.json``: its signature, which the scorer checks every request against::

    {"format": "cadre-model/1", "model_file": "model.pt", "framework": "pytorch",
     "torch_version": "1.13.1",
     "inputs":  [{"name": "input",  "datatype": "FP32", "shape": [-1, 1, 28, 28]}],
     "outputs": [{"name": "output", "datatype": "FP32", "shape": [-1, 10]}],
     "labels": ["T-shirt/top", ...]}

  Datatypes are the Open Inference Protocol's (KServe v2) names; the first dimension of every
  input and output is the batch (-1). ``labels`` (optional) name the classes of the first
  output's last dimension: the scorer then adds the predicted label to WML-style answers.

``model.json`` is written last and both files are renamed into place, so a folder with a
``model.json`` is complete. In a distributed job, call it from one process (rank 0, or the
first worker in parameter-server mode): every process would otherwise write the same folder.
"""
import json
import os
import warnings

__all__ = ["save_model", "DATATYPES"]

FORMAT = "cadre-model/1"
MODEL_FILE = "model.pt"
SIGNATURE_FILE = "model.json"

# torch dtype name -> Open Inference Protocol datatype.
DATATYPES = {
    "float32": "FP32", "float64": "FP64", "float16": "FP16", "bfloat16": "BF16",
    "int64": "INT64", "int32": "INT32", "int16": "INT16", "int8": "INT8", "uint8": "UINT8",
    "bool": "BOOL",
}


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _names(given, count, default):
    if given is None:
        return [default] if count == 1 else ["%s_%d" % (default, i) for i in range(count)]
    given = [given] if isinstance(given, str) else list(given)
    if len(given) != count or len(set(given)) != count or not all(given):
        raise ValueError("expected %d distinct non-empty names, got %r" % (count, given))
    return given


def _describe(tensors, names, what):
    import torch

    out = []
    for name, t in zip(names, tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError("%s %r is a %s, not a tensor" % (what, name, type(t).__name__))
        dtype = str(t.dtype).replace("torch.", "")
        if dtype not in DATATYPES:
            raise TypeError("%s %r has dtype %s, which the scorer does not take (one of %s)"
                            % (what, name, dtype, ", ".join(sorted(DATATYPES))))
        if t.dim() < 1:
            raise ValueError("%s %r must have a batch dimension (its shape is %s)"
                             % (what, name, list(t.shape)))
        out.append({"name": name, "datatype": DATATYPES[dtype], "shape": [-1] + list(t.shape[1:])})
    return out


def _export(model, example, method):
    import torch

    if isinstance(model, torch.jit.ScriptModule):
        return model
    if method in ("auto", "script"):
        try:
            return torch.jit.script(model)
        except Exception as e:  # scripting fails on much ordinary Python; tracing then serves
            if method == "script":
                raise
            warnings.warn("cadre.save_model: torch.jit.script failed (%s); tracing the model on "
                          "the example input instead" % str(e).splitlines()[0])
    if method not in ("auto", "trace"):
        raise ValueError("method must be 'auto', 'script' or 'trace', not %r" % (method,))
    return torch.jit.trace(model, example)


def _check_batch(scripted, example, expected, names):
    """Every output keeps the batch dimension: the example's rows, and twice as many for the
    example twice (the scorer runs requests together along dimension 0)."""
    import torch

    rows = example[0].shape[0]
    for name, out in zip(names, expected):
        if isinstance(out, torch.Tensor) and out.dim() >= 1 and out.shape[0] != rows:
            raise ValueError("cadre.save_model: output %r has shape %s for an example of %d "
                             "row(s); every output's first dimension must be the batch"
                             % (name, list(out.shape), rows))
    hint = ("the scorer runs requests together along the first dimension, so the model must not "
            "fix the batch size (with torch.jit.trace, x.view(1, -1) does: use "
            "torch.flatten(x, 1))")
    try:
        with torch.no_grad():
            doubled = _as_tuple(scripted(*(torch.cat([t, t]) for t in example)))
    except Exception as e:
        lines = [line for line in str(e).splitlines() if line.strip()]  # torch's cause is last
        raise ValueError("cadre.save_model: the model fails on the example twice (%d rows): %s; "
                         "%s" % (2 * rows, lines[-1] if lines else type(e).__name__, hint)) from e
    for name, one, two in zip(names, expected, doubled):
        if not isinstance(one, torch.Tensor) or one.dim() < 1:
            continue  # _describe says what is wrong with it
        want = [2 * rows] + list(one.shape[1:])
        if list(two.shape) != want:
            raise ValueError("cadre.save_model: for the example twice (%d rows) output %r has "
                             "shape %s, not %s; %s" % (2 * rows, name, list(two.shape), want,
                                                       hint))


def default_path():
    """``$RESULT_DIR/model`` in a job, ``./model`` elsewhere."""
    return os.path.join(os.environ.get("RESULT_DIR", "."), "model")


def save_model(model, example_input, path=None, labels=None, input_names=None,
               output_names=None, method="auto"):
    """Saves ``model`` (a ``torch.nn.Module``) for scoring; returns the folder it wrote.

    ``example_input``: a tensor, or a tuple of tensors for a model of several inputs, with a
    batch dimension first (one row is enough); it fixes the signature and checks the saved
    model. ``labels``: class names for the first output's last dimension (optional).
    ``input_names`` / ``output_names``: the names requests use (default ``input``/``output``,
    or ``input_0``... for several). ``method``: 'auto' (script, else trace), 'script' or 'trace'.
    The model is saved from a CPU copy in evaluation mode; ``model`` itself is left as it was.
    """
    import copy

    import torch

    path = path or default_path()
    example = tuple(t.detach().cpu() for t in _as_tuple(example_input))
    inputs = _describe(example, _names(input_names, len(example), "input"), "input")
    was_training = model.training
    model.eval()
    try:
        cpu_model = copy.deepcopy(model).cpu() if not isinstance(model, torch.jit.ScriptModule) \
            else model
        with torch.no_grad():
            scripted = _export(cpu_model, example, method)
            scripted.eval()
            expected = _as_tuple(scripted(*example))
        _check_batch(scripted, example, expected,
                     _names(output_names, len(expected), "output"))
    finally:
        model.train(was_training)
    outputs = _describe(expected, _names(output_names, len(expected), "output"), "output")
    if labels is not None:
        labels = [str(label) for label in labels]
        width = expected[0].shape[-1] if expected[0].dim() > 1 else None
        if width != len(labels):
            raise ValueError("%d labels given, but the first output's last dimension is %s"
                             % (len(labels), width))

    os.makedirs(path, exist_ok=True)
    model_tmp = os.path.join(path, ".%s.%d.tmp" % (MODEL_FILE, os.getpid()))
    torch.jit.save(scripted, model_tmp)
    # The saved file must load and answer as the model did: catch an export that lost something.
    with torch.no_grad():
        again = _as_tuple(torch.jit.load(model_tmp)(*example))
    for name, a, b in zip((o["name"] for o in outputs), expected, again):
        if not torch.allclose(a, b, equal_nan=True):
            os.unlink(model_tmp)
            raise RuntimeError("cadre.save_model: the saved model answers differently from the "
                               "model for output %r (try method='script')" % name)
    os.replace(model_tmp, os.path.join(path, MODEL_FILE))

    signature = {
        "format": FORMAT,
        "model_file": MODEL_FILE,
        "framework": "pytorch",
        "torch_version": torch.__version__,
        "inputs": inputs,
        "outputs": outputs,
    }
    if labels is not None:
        signature["labels"] = labels
    sig_tmp = os.path.join(path, ".%s.%d.tmp" % (SIGNATURE_FILE, os.getpid()))
    with open(sig_tmp, "w") as f:
        json.dump(signature, f, indent=2)
        f.write("\n")
    os.replace(sig_tmp, os.path.join(path, SIGNATURE_FILE))
    return path
