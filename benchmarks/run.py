"""renyiboost benchmarks: one command, numbers printed, results in benchmarks/results/.

    .venv/bin/python benchmarks/run.py            # everything; writes core.json, table.md
    .venv/bin/python benchmarks/run.py --quick    # smaller sizes; prints only

Each line prints our figure and, where the issue names a peer, the peer's figure and the
ratio measured in the same run (the peers are in ``benchmarks/peers.py``). Everything runs
on one thread; peak memory is measured in fresh subprocesses.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from peers import (
    Report,
    bench_fit,
    bench_learn_one_arf,
    bench_learn_one_sgt,
    bench_predict,
    best_of,
    seconds,
    synthetic_booster,
)

from renyiboost.accounting import ChargeTable, calibrate, rdp_to_dp, subsampled_gaussian_rdp
from renyiboost.exceptions import ignore_comparison_warnings
from renyiboost.models.booster import RecordPool, SGBDTBooster
from renyiboost.stream.engine import EngineConfig, StreamEngine
from renyiboost.stream.postgres import PostgresStore
from renyiboost.stream.store import SQLiteStore, StateStore

RESULTS = Path(__file__).parent / "results"


def bench_accounting(report: Report) -> None:
    """Calibration of σ for three (ε, q, T) settings, the filter's charge table, an RDP curve."""
    cases = {
        "calibrate_eps0.15_q0.1_T100": {"epsilon": 0.15, "delta": 1e-6, "rounds": 100,
                                        "sampling_rate": 0.1},
        "calibrate_eps0.01_q0.01_T1000": {"epsilon": 0.01, "delta": 1e-8, "rounds": 1000,
                                          "sampling_rate": 0.01},
        "calibrate_eps0.54_q1_T200": {"epsilon": 0.54, "delta": 1e-6, "rounds": 200,
                                      "sampling_rate": 1.0},
    }
    def cold(kwargs: dict[str, Any]) -> None:
        calibrate.cache_clear()  # a first calibration in this process, not the cached answer
        calibrate(**kwargs)

    for name, kwargs in cases.items():
        report.values[name + "_s"] = spent = best_of(lambda kw=kwargs: cold(kw))
        report.line(name, seconds(spent), note="goal < 500 ms")
    cal = calibrate(**cases["calibrate_eps0.01_q0.01_T1000"])
    table = best_of(lambda: ChargeTable(cal.sigma, cal.sampling_rate, cal.order), 1)
    report.values[f"charge_table_order{cal.order}_s"] = table
    report.line(f"charge table, order {cal.order}, 1025 entries", seconds(table))
    orders = np.arange(2, 2001)

    def curve() -> None:
        rdp_to_dp(orders, 50 * subsampled_gaussian_rdp(0.1, 63.0, orders), 5e-8)

    report.values["rdp_curve_orders_2_2000_s"] = spent = best_of(curve)
    report.line("RDP curve, orders 2..2000", seconds(spent))


def _round_time(n: int, seed: int | None, compiled: bool, repeats: int | None = None) -> float:
    """Best time of one booster round (plan + apply, depth 6, q = 0.1) on ``n`` records,
    over more repeats the shorter the round (a 2 ms round is easily hit by the VM's noise)."""
    repeats = repeats or (30 if n <= 10**5 else 10 if n <= 10**6 else 5)
    template, schema = synthetic_booster(10, 6, 1000)
    booster = SGBDTBooster(template.params, schema, seed=seed, compiled=compiled)
    rng = np.random.default_rng(0)
    pool = RecordPool.from_arrays(rng.uniform(size=(n, 10)), rng.uniform(-1, 1, n))
    booster.apply_round(pool, booster.plan_round(pool))  # compiles the kernels once

    def one_round() -> None:
        booster.apply_round(pool, booster.plan_round(pool))

    return best_of(one_round, repeats)


def bench_rounds(report: Report, sizes: list[int]) -> None:
    """Time of one round vs the active-pool size: the compiled round with production noise
    (``seed=None``, the OS-keyed ChaCha20 stream) and seeded, beside the numpy reference.

    Every active record is charged and re-scored each round, so the cost per active
    record should stay flat as the pool grows.
    """
    per_record = []
    for n in sizes:
        secure = _round_time(n, None, True)
        seeded = _round_time(n, 0, True)
        reference = _round_time(n, None, False, repeats=2 if n >= 10**7 else None)
        per_record.append(secure / n)
        report.values |= {f"round_{n}_records_s": secure, f"round_{n}_seeded_s": seeded,
                          f"round_{n}_numpy_reference_s": reference,
                          f"round_{n}_ns_per_record": 1e9 * secure / n}
        report.line(f"round, {n:,} active records, depth 6, seed=None",
                    f"{seconds(secure)} ({1e9 * secure / n:.0f} ns/rec)",
                    f"numpy reference {seconds(reference)}", reference / secure,
                    note=f"compiled round; seeded noise {seconds(seeded)}; goal at 10^6 <= 40 "
                         "ms, at 10^7 <= 400 ms")
    spread = max(per_record) / min(per_record)
    report.values["round_per_record_spread"] = spread
    report.line(f"round cost per record, largest / smallest over {sizes[0]:,}..{sizes[-1]:,}",
                f"{spread:.2f}", note="goal: flat within ±25 %")


def bench_retirement(report: Report, n: int) -> None:
    """An engine round in which 1 % of the pool retires vs one in which nobody does.

    Retired rows stay in the arrays, flagged, until they are a quarter of the pool
    (``COMPACT_SHARE``); the compaction that then copies the pool is timed on its own."""
    engine = _engine(None)
    rng = np.random.default_rng(0)
    engine.add(rng.uniform(size=(n, 10)), rng.uniform(size=n))
    engine.train(1)
    budget = engine.booster.filter.budget_rdp

    def plain() -> None:
        engine.train(1)

    def retiring() -> float:
        active = np.flatnonzero(~engine.pool.retired)
        chosen = rng.choice(active, n // 100, replace=False)
        engine.pool.spent[chosen] = budget  # these cannot pay again: they retire this round
        start = time.perf_counter()
        engine.train(1)
        return time.perf_counter() - start

    calm, busy = best_of(plain), min(retiring() for _ in range(3))
    start = time.perf_counter()
    engine._compact()
    compaction = time.perf_counter() - start
    report.values |= {f"engine_round_{n}_no_retirement_s": calm,
                      f"engine_round_{n}_one_percent_retire_s": busy,
                      f"engine_compaction_{n}_s": compaction}
    report.line(f"engine round, {n:,} active, 1 % retiring vs none", seconds(busy),
                f"nobody retiring {seconds(calm)}", calm / busy,
                note=f"goal: retirement adds <= 10 %; the compaction once retired rows are a "
                     f"quarter of the pool: {seconds(compaction)}")


def _timed(owner: Any, name: str) -> dict[str, float]:
    """Wrap the method ``owner.name`` to add its wall time to the returned dict's ``"s"``."""
    spent = {"s": 0.0}
    inner = getattr(owner, name)

    def timed(*args: Any) -> Any:
        start = time.perf_counter()
        try:
            return inner(*args)
        finally:
            spent["s"] += time.perf_counter() - start

    setattr(owner, name, timed)
    return spent


def _engine(store: StateStore | str | None, seed: int | None = None,
            write_behind: bool | None = None) -> StreamEngine:
    """An empty engine (10 features, depth 6, production noise unless `seed`) that trains
    only when told to."""
    booster, schema = synthetic_booster(10, 6, 1000)
    config = EngineConfig(public_schema=schema, params=booster.params, train_every=10**9,
                          warmup=1)
    return StreamEngine(config, store=store, seed=seed, write_behind=write_behind)


def _engine_with(n: int, store: StateStore | str | None,
                 write_behind: bool | None = None) -> StreamEngine:
    """An engine (10 features, depth 6) holding ``n`` active records after its first round."""
    engine = _engine(store, write_behind=write_behind)
    rng = np.random.default_rng(0)
    engine.add(rng.uniform(size=(n, 10)), rng.uniform(size=n))
    engine.train(1)  # initial score + first round: the new rows' segment is written
    engine.wait_durable()
    return engine


#: Rounds per timed run of the commit benchmark: more than the ~380 after which the default
#: snapshot policy writes the first snapshot, so each run pays for one at its real rate.
COMMIT_ROUNDS = 400


def _rounds(n: int, store: Callable[[str], StateStore] | None,
            write_behind: bool | None = None) -> dict[str, float]:
    """Per round, over ``COMMIT_ROUNDS`` rounds of one commit each: wall time, and the time
    the engine spent waiting for (or doing) commits."""
    with tempfile.TemporaryDirectory() as tmp:
        engine = _engine_with(n, None if store is None else store(f"{tmp}/state.db"),
                              write_behind)
        if store is not None:
            # The setup's 8 MB merge sits in the write-ahead log; a long-running store has
            # checkpointed such merges long ago (and reuses the log file from its start).
            checkpoint = ("CHECKPOINT" if isinstance(engine.store, PostgresStore)
                          else "PRAGMA wal_checkpoint(RESTART)")
            engine.store._db.execute(checkpoint)  # type: ignore[attr-defined]
        waited = _timed(engine, "_store_commit")
        waited_end = _timed(engine, "wait_durable")
        start = time.perf_counter()
        engine.train(COMMIT_ROUNDS)
        engine.wait_durable()  # the last commit belongs to these rounds
        total = time.perf_counter() - start
        engine.close()
    return {"total": total / COMMIT_ROUNDS,
            "waited": (waited["s"] + waited_end["s"]) / COMMIT_ROUNDS}


def _alternating(n: int, stores: list[Callable[[str], StateStore]]
                 ) -> tuple[float, float, float]:
    """Runs on each new store alternating with the same rounds in memory: the medians of
    the stored round, of its wait for commits, and of the memory round (seconds)."""
    stored, memory = [], []
    for store in stores:
        stored.append(_rounds(n, store))
        memory.append(_rounds(n, None)["total"])
    return (float(np.median([s["total"] for s in stored])),
            float(np.median([s["waited"] for s in stored])), float(np.median(memory)))


def bench_commit(report: Report, sizes: list[int], pairs: dict[int, int]) -> None:
    """What committing every round to SQLite (snapshots included) adds to a round.

    Runs on a new SQLite store (write-behind, the default) alternate with the same rounds
    on a memory store; the figure is the difference of their medians over the memory
    round. It includes everything the store costs the round: the time waiting for a commit,
    and the slowdown of the round while the committer thread works beside it (on this VM
    any work on the second vCPU slows the round: a spinning process there, +50 %). An
    in-line run (``write_behind=False``) shows the cost without the overlap.
    """
    def sqlite(path: str) -> StateStore:
        return SQLiteStore(path, create=True)

    for n in sizes:
        total, waited, in_memory = _alternating(n, [sqlite] * pairs[n])
        inline = _rounds(n, sqlite, write_behind=False)
        ratio, inline_ratio = total / in_memory - 1.0, inline["total"] / in_memory - 1.0
        report.values |= {
            f"engine_round_memory_{n}_s": in_memory, f"engine_round_sqlite_{n}_s": total,
            f"engine_commit_waited_{n}_s": waited, f"engine_commit_ratio_{n}": ratio,
            f"engine_commit_inline_ratio_{n}": inline_ratio,
        }
        report.line(f"engine round, {n:,} active, SQLite commit/round", f"{ratio:.2f}",
                    note=f"{COMMIT_ROUNDS} rounds, a commit each, snapshots included; medians "
                         f"of {pairs[n]} alternating runs: a round with the SQLite store "
                         f"{seconds(total)} (waiting for commits {seconds(waited)} of it), "
                         f"in memory {seconds(in_memory)}; commits in-line (no write-behind): "
                         f"{inline_ratio:.2f}; goal <= 0.20")


def bench_postgres_commit(report: Report, sizes: list[int], pairs: int) -> None:
    """The same measure as :func:`bench_commit` with the PostgreSQL store, on a throw-away
    server on this machine (Debian's binaries, loopback TCP, fsync on): what a durable commit
    to a database server adds to a round, beside SQLite's figure from the same run."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from pg_server import LocalPostgres

    server = LocalPostgres()
    server.start()
    try:
        for n in sizes:
            stores = [lambda _path, schema=f"bench_{n}_{i}": PostgresStore(
                server.url, schema=schema, create=True) for i in range(pairs)]
            total, waited, in_memory = _alternating(n, stores)
            ratio = total / in_memory - 1.0
            sqlite_ratio = report.values.get(f"engine_commit_ratio_{n}")
            report.values |= {f"engine_round_postgres_{n}_s": total,
                              f"engine_commit_postgres_ratio_{n}": ratio}
            report.line(f"engine round, {n:,} active, PostgreSQL commit/round", f"{ratio:.2f}",
                        peer="—" if sqlite_ratio is None else f"SQLite {sqlite_ratio:.2f}",
                        note=f"{COMMIT_ROUNDS} rounds, write-behind, local server over "
                             f"loopback TCP; medians of {pairs} alternating runs: "
                             f"{seconds(total)} a round (waiting {seconds(waited)}), in memory "
                             f"{seconds(in_memory)}")
    finally:
        server.remove()


# --------------------------------------------------------------------------- memory
def _rss_kib(field: str) -> int:
    """``VmRSS`` (current) or ``VmHWM`` (peak) of this process from /proc, in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def memory_child(n: int, trace: bool) -> dict[str, float]:
    """In a fresh process: an in-memory engine takes ``n`` records and runs 4 rounds.

    The input arrays and the engine (with its privacy calibration) are made before
    measuring, so only what grows with the records is counted. With ``trace``, tracemalloc
    (which sees numpy's buffers) gives the retained state and the peak; without it, the
    peak resident set (VmHWM, reset first) over the resident set before the records
    (tracemalloc's own bookkeeping would inflate that).
    """
    import tracemalloc

    rng = np.random.default_rng(0)
    X, y = rng.uniform(size=(n, 10)), rng.uniform(size=n)
    warm = _engine(None)  # compiles the kernels (LLVM's memory is not the records')
    warm.add(X[:1000], y[:1000])
    warm.train(2)
    del warm
    engine = _engine(None)
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak resident set (VmHWM)
    before = _rss_kib("VmRSS")
    if trace:
        tracemalloc.start()
    engine.add(X, y)
    engine.train(1)
    if not trace:
        engine.train(3)
        return {"rss_growth": 1024.0 * (_rss_kib("VmHWM") - before),
                "n_active": len(engine.pool)}
    retained, ingest_peak = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    engine.train(3)
    _, round_peak = tracemalloc.get_traced_memory()
    return {"retained": float(retained), "peak": float(max(ingest_peak, round_peak)),
            "round_peak": float(round_peak), "n_active": len(engine.pool)}


def _run_child(n: int, trace: bool) -> dict[str, float]:
    command = [sys.executable, __file__, "--memory-child", str(n)] + (["--trace"] * trace)
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_memory(report: Report, n: int) -> None:
    """Peak memory per active record of a StreamEngine (10 features) with ``n`` records."""
    traced, rss = _run_child(n, trace=True), _run_child(n, trace=False)
    per = {key: traced[key] / n for key in ("retained", "peak", "round_peak")}
    per["rss"] = rss["rss_growth"] / n
    report.values |= {f"memory_{k}_bytes_per_record": v for k, v in per.items()}
    report.values["memory_active_records"] = n
    report.line(f"peak memory, engine with {n:,} active records",
                f"{per['peak']:.0f} B/rec",
                note=f"tracemalloc peak over ingest + 4 rounds ({per['peak'] * 1e6 / 2**20:.0f} "
                     f"MiB per 1e6 records); state retained after ingest "
                     f"{per['retained']:.0f} B/rec; peak during later rounds "
                     f"{per['round_peak']:.0f} B/rec; peak RSS growth {per['rss']:.0f} B/rec. "
                     "10 float64 features")


# --------------------------------------------------------------------------- main
def run_all(quick: bool) -> Report:
    """Every benchmark, in order; ``quick`` uses smaller sizes."""
    report = Report(values={"machine": platform.platform(), "python": platform.python_version()})
    bench_accounting(report)
    bench_learn_one_sgt(report, 5_000 if quick else 20_000)
    bench_learn_one_arf(report, 1_000 if quick else 5_000)
    bench_fit(report, n_trees=100, depth=6, repeats=1 if quick else 3)
    bench_predict(report, 20_000 if quick else 100_000)
    bench_rounds(report, [10_000, 100_000] if quick else [100_000, 1_000_000, 10_000_000])
    bench_retirement(report, 100_000 if quick else 1_000_000)
    bench_memory(report, 200_000 if quick else 1_000_000)
    bench_commit(report, [10_000, 100_000] if quick else [100_000, 1_000_000],
                 {10_000: 3, 100_000: 5, 1_000_000: 3})
    bench_postgres_commit(report, [10_000] if quick else [100_000, 1_000_000], 3)
    return report


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="smaller sizes; writes nothing")
    parser.add_argument("--memory-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    ignore_comparison_warnings()
    if args.memory_child:
        print(json.dumps(memory_child(args.memory_child, args.trace)))
        return 0
    start = time.perf_counter()
    report = run_all(args.quick)
    print(f"total {time.perf_counter() - start:.0f} s")
    if args.quick:
        return 0
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "core.json").write_text(json.dumps(report.values, indent=2) + "\n")
    machine = f"Machine: {report.values['machine']}, Python {report.values['python']}"
    header = [f"{machine}, one thread. `.venv/bin/python benchmarks/run.py`", ""]
    (RESULTS / "table.md").write_text(report.table(header))
    print(f"written {RESULTS / 'core.json'} and {RESULTS / 'table.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
