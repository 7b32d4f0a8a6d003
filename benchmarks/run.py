"""renyiboost benchmarks: one command, numbers printed, results in benchmarks/results/.

    .venv/bin/python benchmarks/run.py            # everything
    .venv/bin/python benchmarks/run.py --quick    # smaller sizes

Each line prints our figure and, where the issue names a peer, the peer's figure and the
ratio measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

from renyiboost.accounting import ChargeTable, calibrate, rdp_to_dp, subsampled_gaussian_rdp
from renyiboost.exceptions import TestingOnlyWarning
from renyiboost.models.booster import RecordPool, SGBDTBooster, SGBDTParams
from renyiboost.schema import PublicSchema

RESULTS = Path(__file__).parent / "results"


def best_of(fn: Callable[[], object], repeats: int = 3) -> float:
    """Smallest wall time of ``repeats`` calls, in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def bench_accounting() -> dict[str, float]:
    out = {}
    cases = {
        "calibrate_eps0.15_q0.1_T100": dict(epsilon=0.15, delta=1e-6, rounds=100, sampling_rate=0.1),
        "calibrate_eps0.01_q0.01_T1000": dict(epsilon=0.01, delta=1e-8, rounds=1000, sampling_rate=0.01),
        "calibrate_eps0.54_q1_T200": dict(epsilon=0.54, delta=1e-6, rounds=200, sampling_rate=1.0),
    }
    for name, kwargs in cases.items():
        out[name + "_s"] = best_of(lambda kw=kwargs: calibrate(**kw))
        print(f"{name:34s} {out[name + '_s'] * 1e3:8.1f} ms   (goal < 500 ms)")
    cal = calibrate(**cases["calibrate_eps0.01_q0.01_T1000"])
    out["charge_table_order%d_s" % cal.order] = best_of(
        lambda: ChargeTable(cal.sigma, cal.sampling_rate, cal.order), 1
    )
    print(f"charge table (order {cal.order}, 1025 entries) "
          f"{out['charge_table_order%d_s' % cal.order] * 1e3:8.1f} ms")
    orders = np.arange(2, 2001)

    def curve() -> None:
        rdp_to_dp(orders, 50 * subsampled_gaussian_rdp(0.1, 63.0, orders), 5e-8)

    out["rdp_curve_orders_2_2000_s"] = best_of(curve)
    print(f"{'RDP curve, orders 2..2000':34s} {out['rdp_curve_orders_2_2000_s'] * 1e3:8.1f} ms")
    return out


def _booster(n_features: int, depth: int, rounds: int) -> tuple[SGBDTBooster, PublicSchema]:
    schema = PublicSchema(
        features={f"x{j}": (0.0, 1.0) for j in range(n_features)}, target_bounds=(0.0, 1.0)
    )
    params = SGBDTParams(epsilon=1.0, rounds=rounds, depth=depth, sampling_rate=0.1)
    return SGBDTBooster(params, schema, seed=0), schema


def bench_rounds(sizes: list[int]) -> dict[str, float]:
    out = {}
    for n in sizes:
        booster, _ = _booster(10, 6, 1000)
        rng = np.random.default_rng(0)
        X = rng.uniform(size=(n, 10))
        pool = RecordPool.from_arrays(X, rng.uniform(-1, 1, n))

        def one_round(booster: SGBDTBooster = booster, pool: RecordPool = pool) -> None:
            booster.apply_round(pool, booster.plan_round(pool))

        seconds = best_of(one_round)
        out[f"round_{n}_records_s"] = seconds
        print(f"round, {n:>9,} active records, depth 6  {seconds * 1e3:8.1f} ms "
              f"({n / seconds / 1e6:.1f} M records/s)")
    return out


def bench_predict(n_rows: int) -> dict[str, float]:
    booster, _ = _booster(10, 6, 200)
    rng = np.random.default_rng(1)
    pool = RecordPool.from_arrays(rng.uniform(size=(5000, 10)), rng.uniform(-1, 1, 5000))
    for _ in range(200):
        booster.apply_round(pool, booster.plan_round(pool))
    ens = booster.ensemble
    X = rng.uniform(size=(n_rows, 10))
    many = best_of(lambda: ens.predict_margin(X))
    one_rows = X[:2000]
    one = best_of(lambda: [ens.predict_margin(row) for row in one_rows], 1)
    out = {"predict_many_rows_per_s": n_rows / many, "predict_one_per_s": len(one_rows) / one}
    print(f"predict_many, 200 trees depth 6     {out['predict_many_rows_per_s']:12,.0f} rows/s")
    print(f"predict_one,  200 trees depth 6     {out['predict_one_per_s']:12,.0f} calls/s")
    return out


def bench_learn_one(n: int) -> dict[str, float]:
    """learn_one records/s: SGBDTRegressor vs river's SGTRegressor on the same stream."""
    from river.tree import SGTRegressor

    from renyiboost import SGBDTRegressor
    from renyiboost.datasets import load_california

    data = load_california()
    stream = list(data.records())[:n]
    ours = SGBDTRegressor(features=data.schema.features, target_bounds=data.schema.target_bounds,
                          epsilon=1.0, rounds=50, depth=6, sampling_rate=0.1, train_every=500,
                          warmup=500)
    peer = SGTRegressor()

    def run(model: object) -> float:
        start = time.perf_counter()
        for x, y in stream:
            model.learn_one(x, y)  # type: ignore[attr-defined]
        return len(stream) / (time.perf_counter() - start)

    out = {"learn_one_per_s": run(ours), "sgt_learn_one_per_s": run(peer)}
    out["learn_one_ratio_vs_sgt"] = out["learn_one_per_s"] / out["sgt_learn_one_per_s"]
    print(f"learn_one, California {n:,} records: ours {out['learn_one_per_s']:10,.0f}/s   "
          f"river SGTRegressor {out['sgt_learn_one_per_s']:10,.0f}/s   "
          f"ratio {out['learn_one_ratio_vs_sgt']:.1f}x (goal >= 10x)")
    return out


def bench_commit(sizes: list[int]) -> dict[str, float]:
    """Round compute vs SQLite commit time for an engine with n active records."""
    import tempfile

    from renyiboost.stream.engine import EngineConfig, StreamEngine
    from renyiboost.stream.store import PoolState

    out = {}
    for n in sizes:
        booster, schema = _booster(10, 6, 1000)
        config = EngineConfig(public_schema=schema, params=booster.params, train_every=10**9,
                              warmup=1)
        with tempfile.TemporaryDirectory() as tmp:
            engine = StreamEngine(config, store=f"{tmp}/state.db", seed=0)
            rng = np.random.default_rng(0)
            engine.add(rng.uniform(size=(n, 10)), rng.uniform(size=n))
            engine.train(1)  # initial score + first round: the new rows' segment is written
            store = engine.store
            spent = {"commit": 0.0}
            inner = store.commit

            def timed(change: object) -> None:
                start = time.perf_counter()
                inner(change)  # type: ignore[arg-type]
                spent["commit"] += time.perf_counter() - start

            store.commit = timed  # type: ignore[method-assign]
            rounds = 3
            start = time.perf_counter()
            engine.train(rounds)
            total = (time.perf_counter() - start) / rounds
            commit = spent["commit"] / rounds
            # A snapshot is written once the events since the last one outweigh it
            # snapshot_ratio times; its cost is spread over the rounds in between.
            pool = engine.pool
            state = PoolState(engine.pool_uids, pool.X, pool.target, pool.margin, pool.spent)
            store._db.execute("BEGIN IMMEDIATE")
            start = time.perf_counter()
            store._snapshot(state, 0)
            store._db.execute("COMMIT")
            snapshot = time.perf_counter() - start
            engine.close()
        per_snapshot = store.snapshot_ratio * 24 / 2  # rounds of 2-byte codes per snapshot
        amortised = commit + snapshot / per_snapshot
        compute = total - commit
        out[f"engine_round_{n}_s"] = compute
        out[f"engine_commit_{n}_s"] = commit
        out[f"engine_snapshot_{n}_s"] = snapshot
        out[f"engine_commit_ratio_{n}"] = amortised / compute
        print(f"engine round, {n:>9,} active: compute {1e3 * compute:8.1f} ms   "
              f"commit {1e3 * commit:6.1f} ms + snapshot {1e3 * snapshot:6.1f} ms every "
              f"{per_snapshot:.0f} rounds   ratio {amortised / compute:.2f} (goal <= 0.20)")
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    warnings.simplefilter("ignore", TestingOnlyWarning)
    results = {"machine": platform.platform(), "python": platform.python_version()}
    results |= bench_accounting()
    results |= bench_rounds([10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000])
    results |= bench_predict(20_000 if args.quick else 100_000)
    results |= bench_learn_one(5_000 if args.quick else 20_000)
    results |= bench_commit([10_000, 100_000] if args.quick else [100_000, 1_000_000])
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "core.json").write_text(json.dumps(results, indent=2))
    print(f"written {RESULTS / 'core.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
