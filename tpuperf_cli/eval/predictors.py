"""Predictions of a trained model for `tpuperf eval`, through the model library.

Kept apart from the metrics so that `tpuperf eval --predicted` and the
baseline never import torch or DGL.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from tpuperf_cli.records import Record

if TYPE_CHECKING:
    from tpuperf_cli.model.predict import Model


def model_predictions(path: str | None, records: Sequence[Record], batch_size: int = 256,
                      target: dict | None = None, known: bool = True) -> tuple[np.ndarray, Model]:
    """Predicted runtime (ns; for a tile-ranking model a score, lower =
    faster) per record, in record order, from the model file at path, and
    the model's name. Records are not changed. Errors (missing or bad model
    file, records that are not graph records) are TpuperfErrors raised by
    the model library, naming the record. path None: the default model
    for `target` (model.calibrated.default_choice). known=False: the
    network on every kernel, also those the model file knows (model.known)."""
    from tpuperf_cli.model.examples import example
    from tpuperf_cli.model.predict import load_model

    model = load_model(path, target=target)
    if not known:
        model.known = None
    examples = [example(r, i, "measured records") for i, r in enumerate(records, 1)]
    return np.asarray(model.predict_examples(examples, batch_size), dtype=np.float64), model
