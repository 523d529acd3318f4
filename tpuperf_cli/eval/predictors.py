"""Predictions of a trained model for `tpuperf eval`, through the model library.

Kept apart from the metrics so that `tpuperf eval --predicted` and the
baseline never import torch or DGL.
"""

import numpy as np

from tpuperf_cli.errors import TpuperfError


def model_predictions(path, records, batch_size=256):
    """Predicted runtime (ns, or a score where lower is faster) per record."""
    try:
        from tpuperf_cli import model as model_lib  # noqa: F401
    except ImportError as e:
        raise TpuperfError(f"cannot run model {path}: the model library is missing ({e})") from None
    raise TpuperfError("model library API not wired yet")
