"""cadre: distributed deep-learning training.

The compiled part, ``cadre._core``, is built into the build tree; this package spans both
folders so that ``PYTHONPATH=<build>/python:<source>/python`` finds everything.
"""
import pkgutil as _pkgutil

__path__ = _pkgutil.extend_path(__path__, __name__)

from cadre.metrics import log_metrics  # noqa: E402

__all__ = ["log_metrics", "save_model"]


def save_model(model, example_input, path=None, labels=None, **kwargs):
    """Saves a trained model for online scoring (TorchScript and its signature); see
    cadre.serving.save_model. Imported here lazily so that ``import cadre`` needs no torch."""
    from cadre.serving import save_model as _save

    return _save(model, example_input, path=path, labels=labels, **kwargs)
