"""The defaults table (``make defaults``): renyiboost with only a schema and ε, beside
interpret's DP-EBM with its defaults and the trivial baseline, on the development suite.

    .venv/bin/python benchmarks/defaults.py [--sets adult,abalone] [--epsilons 0.5,1,4]
                                            [--seeds 6] [--prequential-runs 5] [--workers 2]
    .venv/bin/python benchmarks/defaults.py --validation

``--validation`` runs the same held-out protocol and checks on the validation sets
(:data:`renyiboost.experiments.suite.VALIDATION`: river generators written after the policy;
two have since prompted a rule each, see README), the closest this table comes to what a
user's unseen data gets; it has no extras and writes ``benchmarks/results/validation.*``.

Protocols (issue 12), δ = 1e-6, production noise (``seed=None``) for our models:

* **held-out** (every set): 30 % of the rows held out (6 shuffles, 12 for the sets under
  2,000 rows); AUC (classification) or R² (regression) on them of
  - ``batch``: :class:`~renyiboost.models.batch.SGBDT` with the defaults (it buys a noisy
    count of the rows with 5 % of ε to choose them),
  - ``batch_hint``: the same told ``expected_records`` = the number of training rows (it
    buys no count), the like-for-like of the hinted stream,
  - ``learn_one``: the River estimator with the defaults, fed the shuffled training rows in
    order (``learn_many``, which equals a ``learn_one`` loop), then asked to predict,
  - ``learn_one_finish``: that stream after ``finish()``, an end burst of a share of its
    nominal rounds (the caller says the stream ended; no size is given),
  - ``learn_one_hint``: the same with ``expected_records`` = the number of training rows
    (70 % of the set's published size: public for these public sets, never for a user's),
  - ``dpebm``: interpret's DP-EBM with its defaults and the same public bounds,
  - ``prior``: the training rows' mean / base rate (not private: the trivial floor);
* **prequential** (the natural-order streams): test-then-train over the stream in its own
  order with the River estimator's defaults, 5 noise draws (``--prequential-runs``; 20 for
  the short streams of :data:`SMALL_SETS`, whose five-draw means move by 1–2 points);
  accuracy or R², beside the running mean / majority class (not private). Phishing at
  ε = 1 is README's River example.

Extras (skipped with ``--no-extras``): the ablation rows of the stream and learner options,
the short-stream ablation (the policy's interval against the earlier tree every 10
positions, on the short sets at ε = 1 and 4), an imbalanced unbounded stream and the
anchors. The closing section checks issue 12's targets cell by cell on *paired*
differences (every column of a shuffle sees the same split): ours against the better of
DP-EBM and the trivial baseline, ``learn_one`` with the hint against the batch fit with
the same hint (``batch_hint``; before 29 November against ``batch``, which had paid 5 % of
ε for its size while the stream got it free: review X), and
each prequential stream against the running mean / majority class (the public target
midpoint before its first label). Each check is met beyond noise, level (within two
standard errors of the target; a check of one run, which has no standard error, is
level) or missed beyond noise; the level and missed ones are
named with their mean paired difference and its standard error, corrected for the
overlap of the shuffles (Nadeau and Bengio 2003). The shuffles and noise runs start at
``--seed-offset`` (:data:`REPORT_SEEDS`): the explorations that chose the policy's
constants used lower seeds, so no cell repeats an exploration's shuffle; but the shuffles
are of the same rows, which the explorations trained and scored on, so the development
table measures the defaults on the data that chose them (review X, 29 November).

Prints one table and writes ``benchmarks/results/defaults.json`` and ``defaults.md``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import sys
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from renyiboost.experiments.metrics import sample_std

RESULTS = Path(__file__).parent / "results"
EPSILONS = (0.5, 1.0, 4.0)
DELTA = 1e-6
#: Sets under 2,000 rows (breast cancer 569, ChickWeights 578, TrumpApproval 1,001,
#: Phishing 1,250): six shuffles of a few hundred test rows move a cell by more than the
#: gaps the targets ask about, so these get :data:`SMALL_SET_SEEDS` shuffles.
SMALL_SETS = ("breast_cancer", "chick_weights", "trump_approval", "phishing")
SMALL_SET_SEEDS = 12
#: The first seed of the reported runs. Every exploration that chose a constant of the
#: policy used seeds below it (0–99 and 100 on), so the table is not scored on the held-out
#: rows that chose the defaults; earlier tables were (they used seeds 0 to 11).
REPORT_SEEDS = 10_000
#: Prequential noise draws of the short streams among them (Phishing is README's example).
SMALL_SET_RUNS = 20
#: Item 3's tolerance: ``learn_one`` (with the size hint) within this of the batch fit.
STREAM_TOLERANCE = 0.01


def _mean_sd(values: list[float]) -> str:
    return f"{np.mean(values):.3f} ± {sample_std(values):.3f}"


def _quiet() -> None:
    warnings.filterwarnings("ignore")
    os.environ.setdefault("PYTHONWARNINGS", "ignore")


def _score(task: str, y: np.ndarray, score: np.ndarray) -> float:
    from sklearn.metrics import r2_score, roc_auc_score

    if task == "classification":
        return float(roc_auc_score(y, score))
    return float(r2_score(y, score))


def _columns(schema: Any, X: np.ndarray) -> dict[str, Any]:
    """Schema-encoded rows back to raw columns (category values) for the River API."""
    columns: dict[str, Any] = {}
    for j, (name, spec) in enumerate(schema.features.items()):
        if isinstance(spec, list):
            codes = X[:, j]
            values = np.array(spec + [None], dtype=object)
            columns[name] = values[np.where(np.isnan(codes), len(spec), codes).astype(int)]
        else:
            columns[name] = X[:, j]
    return columns


def _estimator(suite_set: Any, epsilon: float, expected_records: int | None = None,
               **overrides: Any) -> Any:
    from renyiboost import SGBDTClassifier, SGBDTRegressor

    features = dict(suite_set.schema.features)
    if suite_set.task == "classification":
        return SGBDTClassifier(features, epsilon=epsilon, delta=DELTA,
                               expected_records=expected_records, **overrides)
    return SGBDTRegressor(features, target_bounds=suite_set.schema.target_bounds,
                          epsilon=epsilon, delta=DELTA, expected_records=expected_records,
                          **overrides)


def _estimator_scores(model: Any, task: str, columns: dict[str, Any]) -> np.ndarray:
    import pandas as pd

    frame = pd.DataFrame(columns)
    if task == "classification":
        return model.predict_proba_many(frame)[True].to_numpy()
    return model.predict_many(frame).to_numpy()


@functools.cache
def _suite_set(name: str) -> tuple[Any, np.ndarray, np.ndarray]:
    """A suite set, loaded once per worker process (Covertype takes seconds) and read-only,
    since every cell of the same set shares the arrays."""
    from renyiboost.experiments.suite import load_suite_set

    suite_set, X, y = load_suite_set(name)
    X.flags.writeable = y.flags.writeable = False
    return suite_set, X, y


def _held_out_split(name: str, epsilon: float, seed: int, protocol: str) -> tuple[Any, ...]:
    """A suite set, its 70 / 30 shuffle ``seed`` and the result row to fill."""
    suite_set, X, y = _suite_set(name)
    order = np.random.default_rng(seed).permutation(y.size)
    cut = round(0.7 * y.size)
    row: dict[str, Any] = {"set": name, "task": suite_set.task, "epsilon": epsilon,
                           "seed": seed, "protocol": protocol}
    return suite_set, X, y, order[:cut], order[cut:], row


def _batch_score(model: Any, task: str, X: np.ndarray, y: np.ndarray) -> float:
    """AUC or R² of a fitted batch :class:`SGBDT` on ``(X, y)``."""
    scores = model.predict_proba(X)[:, 1] if task == "classification" else model.predict(X)
    return _score(task, y, scores)


def _streamed(suite_set: Any, epsilon: float, X: np.ndarray, y: np.ndarray,
              train: np.ndarray, test: np.ndarray
              ) -> tuple[Callable[..., tuple[float, Any]], Callable[[Any], float]]:
    """``(learn, score)``: ``learn(hint, **overrides)`` feeds the River estimator the
    training rows in order and returns its held-out AUC / R² and the estimator (the rows
    are converted once); ``score(estimator)`` scores it again (after ``finish()``)."""
    import pandas as pd

    task, schema = suite_set.task, suite_set.schema
    labels = pd.Series(y[train].astype(bool) if task == "classification" else y[train])
    train_columns = pd.DataFrame(_columns(schema, X[train]))
    test_columns = _columns(schema, X[test])

    def score(stream: Any) -> float:
        return _score(task, y[test], _estimator_scores(stream, task, test_columns))

    def learn(hint: int | None, **overrides: Any) -> tuple[float, Any]:
        stream = _estimator(suite_set, epsilon, hint, **overrides)
        stream.learn_many(train_columns, labels)
        return score(stream), stream

    return learn, score


def held_out_cell(name: str, epsilon: float, seed: int) -> dict[str, Any]:
    """One shuffle of one set at one ε: the four held-out figures."""
    _quiet()

    from renyiboost.experiments.peers import make_peer
    from renyiboost.models.batch import SGBDT

    suite_set, X, y, train, test, row = _held_out_split(name, epsilon, seed, "held-out")
    task, schema = suite_set.task, suite_set.schema
    started = time.perf_counter()
    model = SGBDT(schema, task=task, epsilon=epsilon, delta=DELTA).fit(X[train], y[train])
    row["batch"] = _batch_score(model, task, X[test], y[test])
    row["batch_s"] = time.perf_counter() - started
    # the hinted stream's like-for-like: the batch fit told the same public size (it buys no
    # count); the hinted stream was judged against the fit that paid 5 % of ε for one
    hinted = SGBDT(schema, task=task, epsilon=epsilon, delta=DELTA,
                   expected_records=int(train.size)).fit(X[train], y[train])
    row["batch_hint"] = _batch_score(hinted, task, X[test], y[test])
    learn_one, score = _streamed(suite_set, epsilon, X, y, train, test)
    for column, hint in (("learn_one", None), ("learn_one_hint", int(train.size))):
        started = time.perf_counter()
        row[column], stream = learn_one(hint)
        row[column + "_s"] = time.perf_counter() - started
        if hint is None:  # the same stream, told that it ended
            stream.finish()
            row["learn_one_finish"] = score(stream)
    started = time.perf_counter()
    peer = make_peer("dpebm", schema, task, name, epsilon, DELTA, seed).fit(X[train], y[train])
    row["dpebm"] = _score(task, y[test], peer.predict_score(X[test]))
    row["dpebm_s"] = time.perf_counter() - started
    prior = np.full(test.size, y[train].mean())
    row["prior"] = 0.5 if task == "classification" else _score(task, y[test], prior)
    return row


def prequential_cell(name: str, epsilon: float, seed: int) -> dict[str, Any]:
    """Test-then-train over the stream in its natural order (batches of 1 record)."""
    _quiet()
    suite_set, X, y = _suite_set(name)
    task, schema = suite_set.task, suite_set.schema
    model = _estimator(suite_set, epsilon)
    columns = _columns(schema, X)
    names = list(columns)
    rows = [dict(zip(names, values, strict=True)) for values in zip(*columns.values(),
                                                                     strict=True)]
    predictions = np.empty(y.size)
    for i, x in enumerate(rows):
        if task == "classification":
            predictions[i] = model.predict_one(x)
            model.learn_one(x, bool(y[i]))
        else:
            predictions[i] = model.predict_one(x)
            model.learn_one(x, float(y[i]))
    seen = np.arange(y.size)
    running_mean = np.concatenate([[0.0], np.cumsum(y)[:-1]]) / np.maximum(seen, 1)
    if task == "regression":  # before any label, the public midpoint (as our stream's)
        running_mean[0] = float(np.mean(schema.target_bounds))
    if task == "classification":
        ours = float(np.mean(predictions == y))
        prior = float(np.mean((running_mean > 0.5) == y))
    else:
        ours = _score(task, y, predictions)
        prior = _score(task, y, running_mean)
    return {"set": name, "task": task, "epsilon": epsilon, "seed": seed,
            "protocol": "prequential", "learn_one": ours, "prior": prior}


#: The held-out columns of the River estimator: without a hint, the same stream after
#: ``finish()`` (its end burst), and with the size hint.
STREAM_COLUMNS = ("learn_one", "learn_one_finish", "learn_one_hint")

#: Ablation rows (learn_one at ε = 1 on five sets, no hint): each of this issue's stream
#: options off, and a classifier's pair trees after half its nominal rounds however few its
#: features (:data:`~renyiboost.models.defaults.MAINS_CYCLES`), which a stream without a
#: hint that ends before it assumed never reaches.
ABLATION_SETS = ("adult", "california", "phishing", "friedman", "bananas")
ABLATION_EPSILON = 1.0
ABLATIONS: dict[str, dict[str, Any]] = {
    "leaf_depth fixed": {"leaf_depth": "fixed"},
    "no trigger growth": {"trigger_growth": 0.0},
    "pairs after half the rounds": {"mains_cycles": None},
}
#: The same stream told that it ended, with the split grid its end buys and without
#: (``finish(split_grid=...)``, :data:`~renyiboost.models.defaults.FINISH_GRID_SHARE`).
FINISH_ABLATIONS: dict[str, bool | None] = {"finish(), public grid": False}
#: The ablation table's reference columns, read from the held-out row of the same shuffle
#: at ε = 1 (the same split; running them again in the ablation cell fitted every one twice).
ABLATION_REFERENCES = {"defaults": "learn_one", "finish()": "learn_one_finish",
                       "batch, size hint": "batch_hint"}


#: Batch ablations of the learner options (each with the exact size as a public hint, so the
#: rows differ in the option only): leaf clipping, Newton leaves, the feature choice (one
#: feature a tree where the policy adds pairs, pairs where it does not; for regression
#: one-feature trees instead of random ones),
#: batched boosting (4 trees per gradient refresh, learning rate and leaf clip × 4), the
#: answers' smoothing, the other logistic gradient (proper where the policy clips, at
#: ε = 1 below 30,000 records; clipped where it is proper) and a fixed λ (not raised by
#: the noise, :data:`~renyiboost.models.defaults.LAMBDA_NOISE_STDS`) and the public split
#: grid (no private one, :data:`~renyiboost.models.defaults.GRID_SHARE`).
BATCH_ABLATIONS: dict[str, dict[str, Any]] = {
    "no leaf clip": {"leaf_clip": None},
    "count leaves": {"hess_clip": None},
    "other feature choice": {},
    "batched boosting x4": {"trees_per_gradient": 4, "learning_rate": 0.8, "leaf_clip": 1.6},
    "no smoothing": {"smoothing": 0.0},
    "other logistic gradient": {},
    "fixed λ": {"reg_lambda_noise_stds": 0.0},
    "public split grid": {"grid_share": 0.0},
}


def _engine_score(engine: Any, suite_set: Any, X: np.ndarray, y: np.ndarray,
                  train: np.ndarray, test: np.ndarray, finish: bool = False,
                  split_grid: bool | None = None) -> float:
    """Feed ``engine`` the training rows (then ``finish(split_grid)`` if asked) and score
    its answers on the test rows."""
    engine.add(X[train], y[train], [str(i) for i in range(train.size)])
    if finish:
        engine.finish(split_grid)
    margin = engine.predict_margin(X[test])
    task = suite_set.task
    scores = margin if task == "classification" else engine.booster.loss.unscale(margin)
    return _score(task, y[test], scores)


def ablation_cell(name: str, epsilon: float, seed: int) -> dict[str, Any]:
    """learn_one with each option of :data:`ABLATIONS` switched off, then told the stream
    ended without the private split grid, and the batch fit (with the size hint) with each
    option of :data:`BATCH_ABLATIONS` flipped; the references they differ from come from
    the held-out cell of the same shuffle (:data:`ABLATION_REFERENCES`)."""
    _quiet()
    from renyiboost.models.batch import SGBDT
    from renyiboost.stream.engine import EngineConfig, StreamEngine

    suite_set, X, y, train, test, row = _held_out_split(name, epsilon, seed, "ablation")
    task, schema = suite_set.task, suite_set.schema
    for label, overrides in ABLATIONS.items():
        if "mains_cycles" in overrides and task != "classification":
            continue  # regression trees pick a random feature a node
        config = EngineConfig.from_defaults(schema, task, epsilon, DELTA, **overrides)
        if overrides.get("trigger_growth") == 0.0:  # the same final interval, fixed
            fixed = EngineConfig.from_defaults(schema, task, epsilon, DELTA)
            config = EngineConfig.from_defaults(schema, task, epsilon, DELTA,
                                                train_every=fixed.max_train_every)
        row[label] = _engine_score(StreamEngine(config), suite_set, X, y, train, test)
    for label, split_grid in FINISH_ABLATIONS.items():
        row[label] = _engine_score(
            StreamEngine(EngineConfig.from_defaults(schema, task, epsilon, DELTA)),
            suite_set, X, y, train, test, finish=True, split_grid=split_grid)
    policy = SGBDT(schema, task=task, epsilon=epsilon, delta=DELTA,
                   expected_records=int(train.size)).params  # what the options flip
    for label, overrides in BATCH_ABLATIONS.items():
        if label in ("count leaves", "other logistic gradient", "fixed λ") and (
                task != "classification"):
            continue  # regression: count leaves, no logits, and a fixed λ already
        if label == "other feature choice":
            other = {"mains_then_pairs": "cyclic", "cyclic": "mains_then_pairs",
                     "random": "cyclic"}[policy.feature_selection]
            overrides = {"feature_selection": other}
        if label == "other logistic gradient":
            other = "proper" if policy.logistic_gradient == "clipped" else "clipped"
            overrides = {"logistic_gradient": other}
        model = SGBDT(schema, task=task, epsilon=epsilon, delta=DELTA,
                      expected_records=int(train.size), **overrides).fit(X[train], y[train])
        row[label] = _batch_score(model, task, X[test], y[test])
    return row


#: The short-stream ablation: short sets at ε = 1 and 4, whose policy interval is under 10
#: positions (:func:`~renyiboost.models.defaults.stream_schedule`).
TRIGGER_ABLATION_SETS = ("chick_weights", "trump_approval", "breast_cancer")
TRIGGER_ABLATION_EPSILONS = (1.0, 4.0)


def trigger_cell(name: str, epsilon: float, seed: int) -> dict[str, Any]:
    """``learn_one`` with the size hint: the policy's interval against the schedule before
    it, a tree every 10 positions with ``round(batch rounds / triggers)`` trees a trigger."""
    _quiet()
    from renyiboost.models.defaults import (
        STREAM_MIN_INTERVAL,
        STREAM_WARMUP,
        default_params,
        trees_per_trigger,
    )
    from renyiboost.stream.schedule import TriggerSchedule

    suite_set, X, y, train, test, row = _held_out_split(name, epsilon, seed, "trigger")
    learn, _ = _streamed(suite_set, epsilon, X, y, train, test)
    hint = int(train.size)
    row["policy"], stream = learn(hint)
    row["policy: interval"] = stream.engine.config.train_every
    rounds = default_params(suite_set.task, epsilon, hint)["rounds"]
    every = STREAM_MIN_INTERVAL
    trees = trees_per_trigger(hint, rounds, TriggerSchedule(every, STREAM_WARMUP, 0.0, every))
    row["every 10"], _ = learn(hint, train_every=every, trees_per_trigger=trees)
    row["every 10: trees a trigger"] = trees
    return row


#: Positions of an unbounded i.i.d. stream (:func:`iid_split`), each a new key.
IID_POSITIONS = 200_000


def iid_split(name: str, seed: int) -> tuple[Any, Any, np.ndarray]:
    """An unbounded i.i.d. stream of a suite set: 80 % of its rows (shuffled by ``seed``)
    to draw :data:`IID_POSITIONS` positions from with replacement, the other 20 % held out
    to measure on, and the draws. Adult is its training split (:func:`renyiboost.datasets.
    load`): no test split is read."""
    from renyiboost.experiments.suite import load_suite_set

    suite_set, X, y = load_suite_set(name)
    order = np.random.default_rng(seed).permutation(y.size)
    cut = round(0.8 * y.size)
    train = SimpleNamespace(schema=suite_set.schema, X=X[order[:cut]], y=y[order[:cut]])
    test = SimpleNamespace(X=X[order[cut:]], y=y[order[cut:]])
    return train, test, np.random.default_rng(seed + 1).integers(0, cut, IID_POSITIONS)


def iid_stream(train: Any, test: Any, draws: np.ndarray, epsilon: float,
               **overrides: Any) -> np.ndarray:
    """The predicted probabilities on ``test`` of a binary stream with the default policy
    (and ``overrides``) after the ``draws`` of ``train``, 10,000 a batch, each a new key
    (``seed=None``: production noise)."""
    from renyiboost.stream.engine import EngineConfig, StreamEngine

    engine = StreamEngine(EngineConfig.from_defaults(
        train.schema, "classification", epsilon, DELTA, **overrides))
    for start in range(0, draws.size, 10_000):
        chunk = draws[start:start + 10_000]
        engine.add(train.X[chunk], train.y[chunk],
                   [f"k{i}" for i in range(start, start + chunk.size)])
    return 1.0 / (1.0 + np.exp(-engine.predict_margin(test.X)))


def tilt_cell(name: str, epsilon: float, seed: int) -> dict[str, Any]:
    """An unbounded i.i.d. stream with an imbalanced label: 200,000 positions drawn with
    replacement from 80 % of Adult's training split (every draw a new key), then the mean
    predicted probability on the other 20 % against its base rate, beside the batch
    fit's.

    The tilt has two causes, which the row separates: the gradient clip's link (a batch
    fit without noise, with clipped gradients and with proper ones;
    :class:`~renyiboost.models.losses.LogisticLoss`) and the filter's retention of
    well-fitted keys (the stream without its answers' recalibration against the batch fit,
    both with proper gradients). The policy's stream recalibrates its answers
    (:mod:`~renyiboost.models.recalibration`); the row shows it with and without."""
    _quiet()
    from sklearn.metrics import roc_auc_score

    from renyiboost.models.batch import SGBDT

    # a fifth of Adult's training split held out for the measurement: the official test
    # split is never read here (its base rate once guided the recalibration's constants)
    train, test, draws = iid_split(name, seed)

    def stream(**overrides: Any) -> np.ndarray:
        return iid_stream(train, test, draws, epsilon, **overrides)

    def batch(private_epsilon: float | None = epsilon, **overrides: Any) -> np.ndarray:
        model = SGBDT(train.schema, task="classification", epsilon=private_epsilon,
                      delta=DELTA, **overrides)
        return model.fit(train.X, train.y).predict_proba(test.X)[:, 1]

    stream_p, batch_p, plain_p = stream(), batch(), stream(recalibration=None)
    return {"set": name, "task": "classification", "epsilon": epsilon, "seed": seed,
            "protocol": "tilt", "base_rate": float(test.y.mean()),
            "stream_mean_p": float(stream_p.mean()), "batch_mean_p": float(batch_p.mean()),
            "stream_auc": float(roc_auc_score(test.y, stream_p)),
            "batch_auc": float(roc_auc_score(test.y, batch_p)),
            "stream_error": float(np.mean((stream_p > 0.5) != test.y) * 100),
            "unrecalibrated_stream_mean_p": float(plain_p.mean()),
            "unrecalibrated_stream_auc": float(roc_auc_score(test.y, plain_p)),
            "unrecalibrated_stream_error": float(np.mean((plain_p > 0.5) != test.y) * 100),
            "non_private_batch_mean_p": float(batch(None, logistic_gradient="clipped").mean()),
            "proper_non_private_batch_mean_p": float(
                batch(None, logistic_gradient="proper").mean()),
            "proper_stream_mean_p": float(stream(logistic_gradient="proper",
                                                 recalibration=None).mean()),
            "proper_batch_mean_p": float(batch(logistic_gradient="proper").mean())}


#: Adult test AUC of the best configuration of Maddock et al.'s DP-GBDT framework (CCS'22)
#: at ε = 0.5 / 1 / 4, as issue 12 measured it (its split grid patched to public bounds).
MADDOCK_BEST = {0.5: 0.891, 1.0: 0.894, 4.0: 0.902}
#: The ε of the committed tuned configs' comparison (issue 12: within 0.01 AUC / 0.02 R²).
TUNED_EPSILON = 0.54


def anchor_cell(name: str, epsilon: float, run: int) -> dict[str, Any]:
    """A batch fit held against a published or committed figure, on the paper's protocol
    (``experiments.reproduce.splits``: Adult's official split, Abalone's five folds of
    shuffle 0), production noise: ``adult`` / ``abalone`` with the defaults and
    ``adult-tuned`` / ``abalone-tuned`` with the committed config
    (``experiments/configs``). Run ``run`` of Abalone is fold ``run % 5``."""
    _quiet()
    from renyiboost.experiments.metrics import held_out_metrics
    from renyiboost.experiments.reproduce import fit_sgbdt, load_config, params_for, splits

    dataset, _, variant = name.partition("-")
    data, folds = splits(dataset)
    split = folds[run % len(folds)]
    params = params_for(load_config(dataset), epsilon) if variant == "tuned" else {}
    model = fit_sgbdt(data, params, epsilon, None, split)  # δ = 1e-6 there as here
    score = (model.predict(split.X_test) if data.task == "regression"
             else model.predict_proba(split.X_test)[:, 1])
    return {"set": name, "task": data.task, "epsilon": epsilon, "seed": run,
            "protocol": "anchor", **held_out_metrics(data.task, split.y_test, score)}


def _anchor_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The anchors' verdicts: Adult against Maddock et al.'s best at each ε, and the
    defaults against the tuned configs at :data:`TUNED_EPSILON`."""
    def mean(name: str, epsilon: float, key: str) -> tuple[float, float, int]:
        values = [r[key] for r in rows if r["protocol"] == "anchor" and r["set"] == name
                  and r["epsilon"] == epsilon]
        return float(np.mean(values)), sample_std(values), len(values)

    out = []
    for epsilon, best in MADDOCK_BEST.items():
        if any(r["protocol"] == "anchor" and r["set"] == "adult" and r["epsilon"] == epsilon
               for r in rows):
            auc, std, n = mean("adult", epsilon, "auc")
            out.append(f"Adult, official split, ε = {epsilon:g}: defaults AUC {auc:.3f} ± "
                       f"{std:.3f} ({n} fits) against Maddock et al.'s best {best:.3f}: "
                       f"{'above' if auc > best else 'NOT above'}.")
    if any(r["protocol"] == "anchor" and r["set"] == "abalone-tuned" for r in rows):
        ours, ours_std, n = mean("abalone", TUNED_EPSILON, "r2")
        tuned, tuned_std, _ = mean("abalone-tuned", TUNED_EPSILON, "r2")
        out.append(f"Abalone, 5 folds, ε = {TUNED_EPSILON:g}: defaults R² {ours:.3f} ± "
                   f"{ours_std:.3f}, tuned config {tuned:.3f} ± {tuned_std:.3f} ({n} fits "
                   f"each): {'within' if ours >= tuned - 0.02 else 'NOT within'} 0.02.")
        ours, ours_std, n = mean("adult", TUNED_EPSILON, "auc")
        tuned, tuned_std, _ = mean("adult-tuned", TUNED_EPSILON, "auc")
        error, _, _ = mean("adult", TUNED_EPSILON, "error")
        tuned_error, _, _ = mean("adult-tuned", TUNED_EPSILON, "error")
        out.append(f"Adult, official split, ε = {TUNED_EPSILON:g}: defaults AUC {ours:.3f} ± "
                   f"{ours_std:.3f} (error {error:.2f} %), tuned config {tuned:.3f} ± "
                   f"{tuned_std:.3f} (error {tuned_error:.2f} %), {n} fits each: "
                   f"{'within' if ours >= tuned - 0.01 else 'NOT within'} 0.01.")
    return out


def _summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str, float], list[dict[str, Any]]] = {}
    for row in rows:
        if row["protocol"] not in ("held-out", "prequential"):
            continue
        groups.setdefault((row["protocol"], row["set"], row["epsilon"]), []).append(row)
    table = []
    for (protocol, name, epsilon), cells in groups.items():
        line: dict[str, Any] = {"protocol": protocol, "set": name, "epsilon": epsilon,
                                "task": cells[0]["task"], "runs": len(cells)}
        for column in ("batch", "batch_hint", *STREAM_COLUMNS, "dpebm", "prior"):
            values = [c[column] for c in cells if column in c]
            if values:
                line[column] = float(np.mean(values))
                line[column + "_std"] = sample_std(values)
        table.append(line)
    return table


def _markdown(table: list[dict[str, Any]]) -> str:
    note = ("Mean ± standard deviation over the runs (shuffles or noise draws; the closing "
            "list pairs them).\n\n")
    header = ("| protocol | set | metric | ε | ours batch | batch, size hint | ours learn_one "
              "| learn_one, then finish() | learn_one, size hint | DP-EBM | trivial |")
    lines = [header, "|---|---|---|---|---|---|---|---|---|---|---|"]

    def cell(line: dict[str, Any], column: str) -> str:
        if column not in line:
            return "–"
        return f"{line[column]:.3f} ± {line[column + '_std']:.3f}"

    for line in table:
        metric = ("AUC" if line["task"] == "classification" else "R²") \
            if line["protocol"] == "held-out" else \
            ("accuracy" if line["task"] == "classification" else "R²")
        lines.append(f"| {line['protocol']} | {line['set']} | {metric} | {line['epsilon']:g} | "
                     f"{cell(line, 'batch')} | {cell(line, 'batch_hint')} | "
                     f"{cell(line, 'learn_one')} | "
                     f"{cell(line, 'learn_one_finish')} | {cell(line, 'learn_one_hint')} | "
                     f"{cell(line, 'dpebm')} | {cell(line, 'prior')} |")
    return note + "\n".join(lines)


def _extras(rows: list[dict[str, Any]]) -> str:
    """The ablation table (means ± std over seeds) and the imbalance line."""
    out = []
    ablations = [r for r in rows if r["protocol"] == "ablation"]
    if ablations:
        held_out = {(r["set"], r["seed"]): r for r in rows
                    if r["protocol"] == "held-out" and r["epsilon"] == ABLATION_EPSILON}
        for r in ablations:  # the references: the same shuffle's held-out figures
            r.update({k: held_out[r["set"], r["seed"]][v] for k, v in ABLATION_REFERENCES.items()})
        learn_one = ["defaults", *ABLATIONS]
        finish = ["finish()", *FINISH_ABLATIONS]
        columns = [*learn_one, *finish, "batch, size hint", *BATCH_ABLATIONS]
        title = (f"Ablations (ε = {ABLATION_EPSILON:g}, AUC / R²; the first {len(learn_one)} "
                 f"columns learn_one without a hint, the next {len(finish)} the same then "
                 "finish(), the others batch fits with the exact size as a hint; the "
                 "reference columns defaults, finish() and batch, size hint are the "
                 "held-out table's figures for the same shuffles):")
        out += ["", title, "",
                "| set | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
        for name in dict.fromkeys(r["set"] for r in ablations):
            cells = [r for r in ablations if r["set"] == name]
            values = [_mean_sd([c[k] for c in cells]) if k in cells[0] else "–"
                      for k in columns]
            out.append(f"| {name} | " + " | ".join(values) + " |")
    triggers = [r for r in rows if r["protocol"] == "trigger"]
    if triggers:
        title = ("Short streams (learn_one with the size hint): the policy's interval "
                 "against a tree every 10 positions, round(batch rounds / triggers) a trigger:")
        out += ["", title, "", "| set | ε | policy | interval | every 10 | trees a trigger |",
                "|---|---|---|---|---|---|"]
        for name, epsilon in dict.fromkeys((r["set"], r["epsilon"]) for r in triggers):
            cells = [r for r in triggers if (r["set"], r["epsilon"]) == (name, epsilon)]
            policy, every_10 = (_mean_sd([c[k] for c in cells]) for k in ("policy", "every 10"))
            out.append(f"| {name} | {epsilon:g} | {policy} | {cells[0]['policy: interval']} | "
                       f"{every_10} | {cells[0]['every 10: trees a trigger']} |")
    for r in (r for r in rows if r["protocol"] == "tilt"):
        line = (f"Imbalanced unbounded stream (Adult's training split i.i.d., 200,000 "
                f"positions, measured on a fifth of it held out, ε = "
                f"{r['epsilon']:g}): mean predicted probability {r['stream_mean_p']:.3f} "
                f"(batch fit {r['batch_mean_p']:.3f}) for a base rate of {r['base_rate']:.3f}; "
                f"AUC {r['stream_auc']:.3f} (batch {r['batch_auc']:.3f}), error "
                f"{r['stream_error']:.2f} %; without the answers' recalibration "
                f"{r['unrecalibrated_stream_mean_p']:.3f}, AUC "
                f"{r['unrecalibrated_stream_auc']:.3f}, error "
                f"{r['unrecalibrated_stream_error']:.2f} %. The clip's share: the batch fit "
                "without noise "
                f"{r['non_private_batch_mean_p']:.3f} with clipped gradients, with proper ones "
                f"{r['proper_non_private_batch_mean_p']:.3f}; the filter's: with proper "
                f"gradients the stream without recalibration {r['proper_stream_mean_p']:.3f}, "
                "the batch fit "
                f"{r['proper_batch_mean_p']:.3f}.")
        out += ["", line]
    anchors = _anchor_lines(rows)
    if anchors:
        out += ["", "Anchors (batch fits, the paper's protocol, production noise):", "",
                *(f"- {line}" for line in anchors)]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    _quiet()
    commit = _commit()  # the code that runs: read before the run, not after it
    from renyiboost.experiments.suite import SUITE, VALIDATION

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--validation", action="store_true",
                        help="the validation sets (experiments.suite.VALIDATION), written "
                             "after the policy, instead of the development suite; held-out "
                             "protocol only, no extras")
    parser.add_argument("--sets", default=None, help="comma-separated (default: every set)")
    parser.add_argument("--epsilons", default=",".join(str(e) for e in EPSILONS))
    parser.add_argument("--seeds", type=int, default=6,
                        help="shuffles of each set (the issue's protocol asks for 3; three "
                             "left paired gaps of 0.02 within noise on Abalone)")
    parser.add_argument("--small-seeds", type=int, default=SMALL_SET_SEEDS,
                        help=f"shuffles of the sets under 2,000 rows ({', '.join(SMALL_SETS)})")
    parser.add_argument("--seed-offset", type=int, default=REPORT_SEEDS,
                        help="first seed of the shuffles and noise runs (the reported table "
                             "uses seeds no exploration used; explorations stay below it)")
    parser.add_argument("--prequential-runs", type=int, default=5,
                        help="noise draws of each prequential stream (its order is fixed)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", default=None,
                        help="results path without suffix (default: results/defaults, or "
                             "results/validation)")
    parser.add_argument("--no-extras", action="store_true",
                        help="skip the ablation rows, the imbalance (tilt) run and the anchors")
    args = parser.parse_args(argv)
    catalogue = VALIDATION if args.validation else SUITE
    names = [n for n in (args.sets or ",".join(catalogue)).split(",") if n]
    unknown = sorted(set(names) - set(catalogue))
    if unknown:
        parser.error(f"unknown sets {unknown}; choose from {list(catalogue)}")
    epsilons = [float(e) for e in args.epsilons.split(",")]

    first = args.seed_offset

    def shuffles(name: str) -> range:
        return range(first, first + (max(args.seeds, args.small_seeds) if name in SMALL_SETS
                                     else args.seeds))

    jobs = [(held_out_cell, n, e, s) for n in names for e in epsilons for s in shuffles(n)]
    jobs += [(prequential_cell, n, e, r) for n in names if catalogue[n].natural_order
             for e in epsilons
             for r in range(first, first + (max(args.prequential_runs, SMALL_SET_RUNS)
                                            if n in SMALL_SETS else args.prequential_runs))]
    if not (args.no_extras or args.validation):
        # the ablations read their reference columns from the held-out cells at ε = 1
        jobs += [(ablation_cell, n, ABLATION_EPSILON, s) for n in ABLATION_SETS
                 if n in names and ABLATION_EPSILON in epsilons
                 for s in range(first, first + args.seeds)]
        jobs += [(trigger_cell, n, e, s) for n in TRIGGER_ABLATION_SETS
                 for e in TRIGGER_ABLATION_EPSILONS for s in shuffles(n)]
        jobs += [(tilt_cell, "adult", 1.0, first)]
        jobs += [(anchor_cell, "adult", e, r) for e in MADDOCK_BEST for r in range(5)]
        jobs += [(anchor_cell, name, TUNED_EPSILON, r) for name in ("adult", "adult-tuned")
                 for r in range(5)]
        jobs += [(anchor_cell, name, TUNED_EPSILON, r) for name in ("abalone", "abalone-tuned")
                 for r in range(15)]
    started = time.perf_counter()
    load = os.getloadavg()[0]
    with ProcessPoolExecutor(args.workers) as pool:
        futures = [pool.submit(fn, n, e, s) for fn, n, e, s in jobs]
        rows = [f.result() for f in futures]
    table = _summary(rows)
    text = _markdown(table) + _extras(rows) + _verdicts(rows)
    print(text)
    elapsed = time.perf_counter() - started
    print(f"\n{len(jobs)} runs in {elapsed:.0f} s on {args.workers} workers "
          f"({os.cpu_count()} cores, load average {load:.2f} at the start)")
    out = Path(args.out or RESULTS / ("validation" if args.validation else "defaults"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(
        {"machine": platform.platform(), "cores": os.cpu_count(), "load_at_start": load,
         "seconds": elapsed, "delta": DELTA, "seed_offset": first, "commit": commit,
         "rows": rows, "table": table}, indent=1))
    out.with_suffix(".md").write_text(text + "\n")
    return 0


def _commit() -> str | None:
    """The commit the table is measured at, ``-dirty`` when the work tree differs from it
    outside ``benchmarks/results`` (``None`` outside a git checkout): a bare hash once named
    a commit that lacked the very code the table ran (review X, 29 November). Read at the
    start: read at the end, the results the first table of ``make defaults`` had just
    written made the second one's record dirty (review D5)."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).parent).stdout.strip()

    try:
        changed = git("status", "--porcelain", "--", ":/", ":(exclude,top)benchmarks/results")
        return git("rev-parse", "--short=7", "HEAD") + ("-dirty" if changed else "")
    except (OSError, subprocess.CalledProcessError):
        return None


#: Test rows over training rows of a held-out shuffle (30 / 70).
TEST_OVER_TRAIN = 0.3 / 0.7


def _paired(cells: list[dict[str, Any]], ours: str, *theirs: str
            ) -> tuple[float, float, float]:
    """Mean and standard error of ``ours`` minus the best of ``theirs`` over the runs of one
    cell, and the two-sided 95 % critical value of Student's t with k − 1 degrees of
    freedom. Held-out shuffles overlap (each pair shares about 70 % of its training rows), so
    their differences are correlated and the plain s/√k is too small: the variance is
    corrected as Nadeau and Bengio propose (Machine Learning 52, 2003: s²·(1/k + n_test /
    n_train), with the t test they pair it with). Prequential runs differ only in their
    noise and are independent. (The critical value was 2 whatever k: at 6 shuffles, 5
    degrees of freedom, it is 2.57, so cells between 2 and 2.57 standard errors were called
    beyond noise: review X, 29 November.)"""
    from scipy.stats import t

    differences = np.array([c[ours] - max(c[column] for column in theirs) for c in cells])
    k = differences.size
    if k < 2:
        return float(differences.mean()), float("nan"), float("nan")
    overlap = TEST_OVER_TRAIN if cells[0]["protocol"] == "held-out" else 0.0
    error = float(np.std(differences, ddof=1) * np.sqrt(1 / k + overlap))
    return float(differences.mean()), error, float(t.ppf(0.975, k - 1))


def _verdicts(rows: list[dict[str, Any]]) -> str:
    """Issue 12's cell targets, met or missed, on paired differences (module docstring)."""
    groups: dict[tuple[str, str, float], list[dict[str, Any]]] = {}
    for row in rows:
        if row["protocol"] in ("held-out", "prequential"):
            groups.setdefault((row["protocol"], row["set"], row["epsilon"]), []).append(row)
    checks = 0
    missed: list[str] = []
    level: list[str] = []

    def check(label: str, difference: tuple[float, float, float], floor: float = 0.0) -> None:
        """Met beyond noise (the mean more than t s.e. above the floor, t the 95 % critical
        value of :func:`_paired`), missed beyond noise (more than t s.e. below), or level
        with it (within t s.e. either way)."""
        nonlocal checks
        checks += 1
        mean, error, critical = difference
        line = f"- {label}: {mean:+.3f} ± {error:.3f}"
        if np.isnan(error):  # one run has no standard error: it cannot be beyond noise
            level.append(line)
        elif mean < floor - critical * error:
            missed.append(line)
        elif mean <= floor + critical * error:
            level.append(line)

    for (protocol, name, epsilon), cells in groups.items():
        where = f"{name} ε = {epsilon:g}"
        if protocol == "prequential":
            check(f"{where}, prequential − running baseline", _paired(cells, "learn_one", "prior"))
            continue
        for column in ("batch", *STREAM_COLUMNS):
            if not all(column in c for c in cells):
                continue  # a column this run did not measure
            check(f"{where}, {column} − max(DP-EBM, trivial)",
                  _paired(cells, column, "dpebm", "prior"))
        # like for like: the batch fit told the same size (runs before 29 November compared
        # the hinted stream with the fit that bought its size with 5 % of ε: review X #6)
        batch = "batch_hint" if all("batch_hint" in c for c in cells) else "batch"
        check(f"{where}, learn_one_hint − {batch} (tolerance {STREAM_TOLERANCE})",
              _paired(cells, "learn_one_hint", batch), -STREAM_TOLERANCE)
    if not checks:
        return ""
    head = (f"Targets, cell by cell (paired over the runs: mean difference ± its standard "
            "error, corrected for overlapping shuffles): "
            f"{checks - len(missed) - len(level)} of {checks} met beyond noise, "
            f"{len(level)} level (within t s.e. of the target, t the 95 % critical value at "
            f"k − 1 degrees of freedom), {len(missed)} missed beyond "
            "noise.")
    return "\n".join(["", "", head, "", "Missed beyond noise:", "", *(missed or ["- none"]),
                      "", "Level:", "", *(level or ["- none"])])


if __name__ == "__main__":
    sys.exit(main())
