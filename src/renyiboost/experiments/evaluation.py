"""Prequential evaluation shared by the demo, the experiment grid and the paper preset:
test-then-train replay of a source through an engine, per-batch metrics, and the progress
and number formatting of their reports."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from renyiboost.exceptions import InvalidRecord
from renyiboost.experiments.metrics import error_rate, r2_score
from renyiboost.stream.engine import StreamEngine
from renyiboost.stream.sources import InMemorySource, committed_records

log = logging.getLogger(__name__)


def batch_metrics(task: str, y: np.ndarray, prediction: np.ndarray) -> dict[str, float]:
    """MAE and R² (regression) or error in percent (classification) of one batch."""
    if task == "regression":
        mae = float(np.mean(np.abs(y - prediction)))
        r2 = r2_score(y, prediction) if np.ptp(y) > 0 else float("nan")
        return {"mae": mae, "r2": r2}
    return {"error": error_rate(y, prediction)}


def predict(engine: StreamEngine, X: np.ndarray) -> np.ndarray:
    """Predictions of the committed model on the label's scale (probabilities for 0/1)."""
    margin = engine.predict_margin(X)
    if engine.config.params.task == "regression":
        return engine.booster.loss.unscale(margin)
    return 1.0 / (1.0 + np.exp(-margin))


def replay(
    engine: StreamEngine,
    source: InMemorySource,
    on_batch: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Test-then-train over the source's batches; one record per batch: the public metric
    and release version, and (under ``operator``) the exact pool counts. An engine whose
    store committed part of the source continues after it (:func:`~renyiboost.stream.
    sources.committed_records`)."""
    task = engine.config.params.task
    history = []
    seen = committed_records(source, engine.offsets)
    # The prior baseline, test-then-train like the model: the mean of the labels seen so
    # far (the middle of the public bounds, or 1/2, before the first).
    bounds = engine.schema.target_bounds
    label_sum, labels, prior = 0.0, 0, (sum(bounds) / 2.0 if bounds is not None else 0.5)
    for index, batch in enumerate(source.batches(after=seen), start=seen // source.batch_size):
        prediction = predict(engine, batch.X)
        row: dict[str, Any] = {"batch": index, "seen": seen + batch.y.size,
                               "late_share": float(batch.late.mean())}
        # the metrics score the labels the engine would learn (a NaN label is no score)
        valid = np.ones(batch.y.size, dtype=bool)
        valid[[i for i, _ in engine.validator.bad_labels(batch.y)]] = False
        y, late = batch.y[valid], batch.late & valid
        if y.size:
            row |= batch_metrics(task, y, prediction[valid])
            row |= {f"prior_{k}": v for k, v in batch_metrics(
                task, y, np.full(y.size, prior)).items()}
            label_sum, labels = label_sum + float(y.sum()), labels + y.size
            prior = label_sum / labels
        if late.any():
            late_metrics = batch_metrics(task, batch.y[late], prediction[late])
            row |= {f"late_{k}": v for k, v in late_metrics.items()}
        try:
            engine.add(batch.X, batch.y, batch.keys, batch.positions)
        except InvalidRecord as error:
            # the batch's valid rows were learned and its bad ones kept their positions (the
            # engine's contract); the replay goes on, as a stream does (it once stopped here)
            log.warning("batch %d: a record was not learned (%s): %s", index, error.reason,
                        error.detail)
            row["invalid"] = True
        seen += batch.y.size
        telemetry = engine.operator_telemetry()
        row |= {"n_trees": telemetry.n_trees, "version": telemetry.release_version,
                "operator": {"channel": telemetry.channel, "n_active": telemetry.n_active,
                             "n_retired": telemetry.n_retired}}
        history.append(row)
        if on_batch:
            on_batch(row)
    return history


def rounded(value: Any) -> Any:
    """A value for a human: floats to 6 significant digits (``1`` for ``0.99999999994``),
    also inside lists and dicts."""
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, list | tuple):
        return type(value)(rounded(v) for v in value)
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    return value


def progress_bar(unit: str) -> Callable[[int, int], None]:
    """A ``tick(done, total)`` that draws a tqdm bar on stderr, only when stderr is a
    terminal (a log or a pipe gets no carriage returns between its lines)."""
    from tqdm import tqdm

    state: dict[str, Any] = {}

    def tick(done: int, total: int) -> None:
        bar = state.get("bar")
        if bar is None:
            bar = state["bar"] = tqdm(total=total, unit=unit, file=sys.stderr, leave=False,
                                      disable=not sys.stderr.isatty())
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    return tick
