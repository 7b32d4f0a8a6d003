"""Peer comparisons of the benchmark suite, each timed against renyiboost in the same run.

Used by ``benchmarks/run.py``; also holds the small report helper that prints each line as
*our figure | the peer's figure | ratio* and renders ``results/table.md``. A ratio is always
renyiboost's speed over the peer's (throughput ours/peer, time peer/ours): above 1 means
renyiboost is faster.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Protocol

import numpy as np

from renyiboost.accounting import calibrate
from renyiboost.datasets import Dataset, load
from renyiboost.experiments.peers import make_peer
from renyiboost.models.booster import RecordPool, SGBDTBooster, SGBDTParams
from renyiboost.models.defaults import INPUT_SMOOTHING
from renyiboost.models.trees import SMOOTHING_SHIFTS, input_shifts
from renyiboost.schema import PublicSchema

Record = tuple[dict[str, Any], Any]


# --------------------------------------------------------------------------- helpers
def best_of(fn: Callable[[], object], repeats: int = 3) -> float:
    """Smallest wall time of ``repeats`` calls, in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def per_s(value: float, unit: str) -> str:
    """``12,345 rows/s``."""
    return f"{value:,.0f} {unit}/s"


def seconds(value: float) -> str:
    """``12.3 ms`` below a second, ``1.23 s`` above."""
    return f"{value * 1e3:.1f} ms" if value < 1.0 else f"{value:.2f} s"


@dataclass
class Report:
    """Results of one run: JSON values, printed lines and the Markdown table rows."""

    values: dict[str, Any] = field(default_factory=dict)
    rows: list[tuple[str, str, str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def line(self, what: str, ours: str, peer: str = "—", ratio: float | None = None,
             note: str = "") -> None:
        """Print one result line and keep it as a table row (``note`` becomes a footnote)."""
        ratio_text = "—" if ratio is None else f"{ratio:.2f}×"
        if note:
            if note not in self.notes:
                self.notes.append(note)
            what = f"{what} [{self.notes.index(note) + 1}]"
        self.rows.append((what, ours, peer, ratio_text))
        text = f"{what:48s} ours {ours:>16s}"
        if peer != "—":
            text += f" | {peer:34s} | ratio {ratio_text}"
        print(text + (f"   ({note})" if note else ""), flush=True)

    def table(self, header: Iterable[str] = ()) -> str:
        """The rows as a Markdown table, with the notes as footnotes."""
        out = [*header, "| what | renyiboost | peer, same run | ratio |", "|---|---:|---|---:|"]
        out += [f"| {w} | {o} | {p} | {r} |" for w, o, p, r in self.rows]
        out += ["", "Ratio: renyiboost's speed over the peer's (> 1: renyiboost is faster)."]
        out += [f"- [{i}] {note}" for i, note in enumerate(self.notes, start=1)]
        return "\n".join(out) + "\n"


class _Learner(Protocol):
    def learn_one(self, x: dict[str, Any], y: Any) -> None: ...


def learn_rate(model: _Learner, stream: Sequence[Record]) -> float:
    """Records per second of a ``learn_one`` loop over ``stream``."""
    start = time.perf_counter()
    for x, y in stream:
        model.learn_one(x, y)
    return len(stream) / (time.perf_counter() - start)


# --------------------------------------------------------------------------- learn_one
def _streaming_params() -> dict[str, Any]:
    """What a user passes: ε. Everything else is the default policy, and the noise is the
    production CSPRNG (``seed=None``)."""
    return {"epsilon": 1.0, "seed": None}


def _bench_learn_one(report: Report, data: Dataset, n: int, ours: _Learner, peer: _Learner,
                     peer_name: str, keys: tuple[str, str, str], note: str) -> None:
    """learn_one records/s of ``ours`` and ``peer`` on the first ``n`` records of ``data``.

    A copy of ``ours`` first learns 1,000 records untimed: that loads the compiled kernels
    (0.2 s once per process, from numba's cache), which is not a per-record cost."""
    stream = list(islice(data.records(), n))
    warm = ours.clone()
    for x, y in stream[:1000]:
        warm.learn_one(x, y)
    mine, theirs = learn_rate(ours, stream), learn_rate(peer, stream)
    report.values |= dict(zip(keys, (mine, theirs, mine / theirs), strict=True))
    report.line(f"learn_one, {data.name.capitalize()}, {len(stream):,} records",
                per_s(mine, "rec"), f"river {peer_name} {per_s(theirs, 'rec')}", mine / theirs,
                note)


def bench_learn_one_sgt(report: Report, n: int) -> None:
    """learn_one records/s: SGBDTRegressor vs river's SGTRegressor on California records."""
    from river.tree import SGTRegressor

    from renyiboost import SGBDTRegressor

    data = load("california")
    ours = SGBDTRegressor(features=data.schema.features, target_bounds=data.schema.target_bounds,
                          **_streaming_params())
    _bench_learn_one(report, data, n, ours, SGTRegressor(), "SGTRegressor",
                     ("learn_one_per_s", "sgt_learn_one_per_s", "learn_one_ratio_vs_sgt"),
                     "goal >= 10×; ours: the defaults at ε = 1 (their growing trigger schedule), "
                     "seed=None")


def bench_learn_one_arf(report: Report, n: int) -> None:
    """learn_one records/s: SGBDTClassifier vs river's ARFClassifier on Adult records."""
    from river.forest import ARFClassifier

    from renyiboost import SGBDTClassifier

    data = load("adult")
    ours = SGBDTClassifier(features=data.schema.features, **_streaming_params())
    _bench_learn_one(report, data, n, ours, ARFClassifier(seed=0), "ARFClassifier",
                     ("learn_one_clf_per_s", "arf_learn_one_per_s", "learn_one_ratio_vs_arf"),
                     "ARF: 10 trees, seed 0, the same dict records (categories as strings)")


# --------------------------------------------------------------------------- fit time
def _fit_ours(data: Dataset, params: SGBDTParams, cold: bool = True) -> int:
    """One production fit (``seed=None``); ``cold`` empties the calibration cache first, so
    the fit pays for its calibration as a first fit in a process does."""
    from renyiboost.models.batch import SGBDT

    if cold:
        calibrate.cache_clear()
    model = SGBDT(data.schema, seed=None, **params.model_dump()).fit(data.X, data.y)
    return model.ensemble.n_trees if model.ensemble is not None else 0


def _fit_xgboost(data: Dataset, n_trees: int, depth: int) -> None:
    from xgboost import XGBClassifier

    XGBClassifier(n_estimators=n_trees, max_depth=depth, tree_method="hist",
                  n_jobs=1).fit(data.X, data.y)


def bench_fit(report: Report, n_trees: int, depth: int, repeats: int) -> None:
    """Fit time on Adult: SGBDT (ε=1) vs xgboost (same trees and depth) vs DP-EBM (ε=1).

    Best of ``repeats``, one thread each, production noise (``seed=None``). Our fit includes
    a cold privacy calibration (timed on its own as well); a refit with the same public
    inputs takes it from the cache and is timed too. DP-EBM boosts cyclically, one ≤3-leaf
    tree per feature per round, so its ``max_rounds`` is not a number of trees: it runs with
    its defaults.
    """
    data = load("adult")
    params = SGBDTParams(task="classification", epsilon=1.0, delta=1e-6, rounds=n_trees,
                         depth=depth)
    def cold_booster() -> None:
        calibrate.cache_clear()
        SGBDTBooster(params, data.schema, None)

    calibration = best_of(cold_booster, repeats)
    trees = _fit_ours(data, params)
    ours = best_of(lambda: _fit_ours(data, params), repeats)
    warm = best_of(lambda: _fit_ours(data, params, cold=False), repeats)
    xgb = best_of(lambda: _fit_xgboost(data, n_trees, depth), repeats)
    # the experiments' DP-EBM (public bounds and category lists), defaults otherwise
    ebm_peer = make_peer("dpebm", data.schema, "classification", "adult", 1.0, 1e-6, 0)
    ebm_model = ebm_peer.model
    ebm = best_of(lambda: ebm_peer.fit(data.X, data.y), repeats)
    report.values |= {
        f"fit_adult_{n_trees}_trees_s": ours, "fit_adult_calibration_s": calibration,
        f"fit_adult_{n_trees}_trees_cached_calibration_s": warm,
        f"xgb_fit_adult_{n_trees}_trees_s": xgb, "dpebm_fit_adult_s": ebm,
        "dpebm_max_rounds": ebm_model.max_rounds,
    }
    what = f"fit, Adult {len(data):,} rows, {trees} trees depth {depth}"
    report.line(what, seconds(ours), f"xgboost hist {seconds(xgb)}", xgb / ours,
                f"ours at ε=1, seed=None, incl. {seconds(calibration)} privacy calibration "
                f"({seconds(warm)} with the calibration cached), each round on a "
                f"{params.sampling_rate:.0%} Poisson sample; xgboost non-private, all rows")
    report.line(f"fit, Adult {len(data):,} rows, ε=1", seconds(ours),
                f"DP-EBM {seconds(ebm)} ({ebm_model.max_rounds} rounds)", ebm / ours,
                "DP-EBM with its defaults (max_rounds=300 cyclic rounds, each a ≤3-leaf tree "
                "per feature, 14 features), the public bounds and category lists: not one-to-one "
                "with our trees")


# --------------------------------------------------------------------------- prediction
def synthetic_booster(n_features: int, depth: int,
                      rounds: int) -> tuple[SGBDTBooster, PublicSchema]:
    """Our booster (ε = 1, q = 0.1, seed 0) on ``n_features`` public [0, 1] features."""
    schema = PublicSchema(
        features={f"x{j}": (0.0, 1.0) for j in range(n_features)}, target_bounds=(0.0, 1.0)
    )
    params = SGBDTParams(epsilon=1.0, rounds=rounds, depth=depth, sampling_rate=0.1)
    return SGBDTBooster(params, schema, seed=0), schema


def _trained(n_trees: int, depth: int, n_train: int) -> tuple[SGBDTBooster, Any]:
    """Our booster and an xgboost Booster with ``n_trees`` trees of ``depth``, same data."""
    import xgboost

    booster, _ = synthetic_booster(10, depth, n_trees)
    rng = np.random.default_rng(1)
    X, y = rng.uniform(size=(n_train, 10)), rng.uniform(-1, 1, n_train)
    pool = RecordPool.from_arrays(X, y)
    for _ in range(n_trees):
        booster.apply_round(pool, booster.plan_round(pool))
    peer = xgboost.train({"max_depth": depth, "tree_method": "hist", "nthread": 1},
                         xgboost.DMatrix(X, label=y), num_boost_round=n_trees)
    return booster, peer


def bench_predict(report: Report, n_rows: int, n_trees: int = 200, depth: int = 6) -> None:
    """predict_many rows/s and predict_one calls/s vs xgboost ``Booster.inplace_predict``.

    Both single-threaded (our compiled numba kernels have no threads; xgboost ``nthread=1``),
    the same float64 rows, 10 features. Both sides predict a few rows first, untimed: numba
    compiles (or loads from its cache) on the first call, xgboost sets up its predictor.
    """
    booster, peer = _trained(n_trees, depth, 5000)
    ens = booster.ensemble
    leaves = sum(tree.count("leaf=") for tree in peer.get_dump()) / n_trees
    X = np.random.default_rng(2).uniform(size=(n_rows, 10))
    ens.predict_margin(X[:100]), ens.predict_margin(X[0])  # untimed warm-up of both paths
    peer.inplace_predict(X[:100]), peer.inplace_predict(X[:1])
    many = n_rows / best_of(lambda: ens.predict_margin(X))
    peer_many = n_rows / best_of(lambda: peer.inplace_predict(X))
    rows = X[:2000]
    one = len(rows) / best_of(lambda: [ens.predict_margin(row) for row in rows], 1)
    peer_one = len(rows) / best_of(lambda: [peer.inplace_predict(row[None, :]) for row in rows],
                                   1)
    # the default policy's answers: the same trees averaged over shifted copies of a row
    ens.shifts = input_shifts(booster.grower.schema, INPUT_SMOOTHING)
    ens.predict_margin(X[:100]), ens.predict_margin(X[0])
    smooth_many = n_rows / best_of(lambda: ens.predict_margin(X))
    smooth_one = len(rows) / best_of(lambda: [ens.predict_margin(row) for row in rows], 1)
    ens.shifts = None
    report.values |= {
        "predict_many_rows_per_s": many, "predict_one_per_s": one,
        "smoothed_predict_many_rows_per_s": smooth_many, "smoothed_predict_one_per_s": smooth_one,
        "xgb_predict_many_rows_per_s": peer_many, "xgb_predict_one_per_s": peer_one,
        "xgb_mean_leaves_per_tree": leaves,
    }
    what = f"{n_trees} trees depth {depth}"
    report.line(f"predict_many, {n_rows:,} rows, {what}", per_s(many, "rows"),
                f"xgboost inplace_predict {per_s(peer_many, 'rows')}", many / peer_many,
                f"1 thread each; our trees are full ({2 ** depth} leaves), xgboost's have "
                f"{leaves:.0f} leaves on average")
    report.line(f"predict_one, {what}", per_s(one, "calls"),
                f"xgboost inplace_predict {per_s(peer_one, 'calls')}", one / peer_one)
    shifted = f"{what}, smoothed ({SMOOTHING_SHIFTS} shifted walks a row, the policy's answers)"
    report.line(f"predict_many, {n_rows:,} rows, {shifted}", per_s(smooth_many, "rows"),
                f"xgboost inplace_predict {per_s(peer_many, 'rows')}", smooth_many / peer_many)
    report.line(f"predict_one, {shifted}", per_s(smooth_one, "calls"),
                f"xgboost inplace_predict {per_s(peer_one, 'calls')}", smooth_one / peer_one)
