"""Training metrics for the job service: ``cadre.log_metrics(step, loss=..., accuracy=...)``.

Each call appends one JSON line, ``{"timestamp", "iteration", "ml_metrics": {name: value}}``, to
``$RESULT_DIR/metrics.jsonl``; ``cadre server`` shows the lines in a training's
``entity.status.metrics`` and draws them as curves in its dashboard. Only the process of rank 0
(``CADRE_RANK``) writes, so every learner may call it; outside a cadre job (no ``RESULT_DIR``)
it does nothing. Cheap enough to call every step: one small append, no locks, no imports.
"""
import datetime
import json
import math
import numbers
import os

__all__ = ["log_metrics"]


def log_metrics(step, **values):
    """Records ``values`` (numbers, by name) at training step ``step`` (an int >= 0).

    Returns True when the point was written, False when this process does not write (a rank
    other than 0, or not in a cadre job). Non-finite values (NaN, inf) are written as null.
    """
    if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
        raise ValueError(f"log_metrics: step must be an integer >= 0, got {step!r}")
    if not values:
        raise ValueError("log_metrics: give at least one metric, e.g. loss=0.5")
    metrics = {}
    for name, value in values.items():
        if hasattr(value, "item"):  # a one-element tensor or numpy scalar
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"log_metrics: {name} must be a number, got {value!r}")
        value = float(value)
        metrics[name] = value if math.isfinite(value) else None
    result_dir = os.environ.get("RESULT_DIR")
    if not result_dir or os.environ.get("CADRE_RANK", "0") != "0":
        return False
    now = datetime.datetime.now(datetime.timezone.utc)
    line = json.dumps({
        "timestamp": now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z",
        "iteration": int(step),
        "ml_metrics": metrics,
    }) + "\n"
    fd = os.open(os.path.join(result_dir, "metrics.jsonl"),
                 os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    return True
