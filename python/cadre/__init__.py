"""cadre: distributed deep-learning training.

The compiled part, ``cadre._core``, is built into the build tree; this package spans both
folders so that ``PYTHONPATH=<build>/python:<source>/python`` finds everything.
"""
import pkgutil as _pkgutil

__path__ = _pkgutil.extend_path(__path__, __name__)

from cadre.metrics import log_metrics  # noqa: E402

__all__ = ["log_metrics"]
