"""The main job: replay a bundled data set under drift through the engine, prequentially.

``renyiboost demo`` (``make demo``) streams the data set in batches through a
:class:`~renyiboost.stream.engine.StreamEngine` backed by a new SQLite store (the demo
creates it explicitly, every run, in ``out/demo/``). Every batch is first predicted by the
committed model, then learned (test-then-train). It prints the metrics per batch, the public
privacy guarantee and, marked as such, the operator telemetry (exact pool counts: for the
person running the demo, never for a report), and writes a PNG: the prequential metric over
the stream beside the prior baseline's, and the trees released against stream positions (the
public schedule). The metric, the baseline (the exact running mean of the labels) and the
drift marker are exact statistics of the bundled public data set, an evaluation's view:
nothing a deployment on private data would publish. ``--json`` writes the history with each
batch's operator counts under ``operator`` (marked ``"channel": "operator-telemetry"``).
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from renyiboost.accounting.inputs import check_delta, check_epsilon
from renyiboost.exceptions import LedgerConflict, StateStoreError, StoreLocked
from renyiboost.experiments.evaluation import replay, rounded
from renyiboost.plotting import pyplot
from renyiboost.stream.engine import EngineConfig, StreamEngine
from renyiboost.stream.sources import (
    LATE_SUBPOPULATIONS,
    InMemorySource,
    committed_records,
)
from renyiboost.stream.store import SQLiteStore


def plot(history: list[dict[str, Any]], path: Path, title: str,
         late_name: str | None = None, drift_starts: list[int] | None = None) -> list[str]:
    """The prequential metric per batch — the model's, the prior baseline's, and the late
    sub-population's when the scenario has one — with a marker where the drift begins, and
    the trees released over the stream. Returns the metric panel's legend."""
    plt = pyplot()

    seen = [h["seen"] for h in history]
    metric = "mae" if "mae" in history[0] else "error"
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    axes[0].plot(seen, [h[metric] for h in history], label="renyiboost, all records")
    if f"prior_{metric}" in history[0]:
        axes[0].plot(seen, [h[f"prior_{metric}"] for h in history], "--", color="grey",
                     label="prior (running mean of the labels)")
    late = [(h["seen"], h[f"late_{metric}"]) for h in history if f"late_{metric}" in h]
    if late and late_name:
        axes[0].plot(*zip(*late, strict=True), "o-", label=f"renyiboost, late: {late_name}")
    for i, start in enumerate(drift_starts or []):
        for ax in axes:
            ax.axvline(start, color="black", linestyle=":", linewidth=1,
                       label=("late sub-population begins" if late_name else "drift")
                       if i == 0 and ax is axes[0] else None)
    axes[0].set(xlabel="records seen", ylabel=f"prequential {metric}", title="metric per batch")
    legend = [text.get_text() for text in axes[0].legend(fontsize=8).get_texts()]
    axes[1].step(seen, [h["n_trees"] for h in history], where="post")
    axes[1].set(xlabel="stream position", ylabel="trees in the model",
                title="released trees (the public schedule)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return legend


#: The side value that marks a state store as the demo's own (:func:`remove_demo_store`).
DEMO_MARK = "demo"


def remove_demo_store(path: Path) -> None:
    """Remove the store an earlier demo left at ``path``, and nothing else.

    The demo starts a new model at each run, so it replaces its store; it once unlinked
    whatever was at ``--state``, a production store and its keys' budgets included, even
    one a trainer held. Now the file must open as a state store that is not in use
    (:class:`~renyiboost.exceptions.StoreLocked` otherwise) and carry the demo's mark,
    written when the demo created it; anything else is refused, naming the path.
    """
    if not any(Path(f"{path}{suffix}").exists() for suffix in ("", "-wal")):
        return
    refused = (f"--state {path} exists and is not a state store that the demo created; the "
               "demo replaces only its own stores (a state store's file holds its keys' "
               "spent budgets). Choose another --state, or pass --resume to continue it")
    if path.is_dir() or not _is_sqlite(path):
        raise ValueError(refused)
    try:
        old = SQLiteStore(path)
    except StoreLocked:
        raise
    except (sqlite3.Error, StateStoreError) as error:  # a SQLite file, not a store
        raise ValueError(f"{refused} ({error})") from None
    if old.get_meta(DEMO_MARK) is not True:
        old.close()
        raise ValueError(refused)
    old._remove()


def resumed_demo_store(path: Path) -> SQLiteStore:
    """The store ``demo --resume`` continues: only one the demo made (:data:`DEMO_MARK`).
    Any store was taken, and the demo's row numbers "0", "1", … were charged to the ledgers
    of the keys a production trainer had recorded under those names, and its offsets of the
    bundled set broke that trainer's every start (review C, 29 November)."""
    store = SQLiteStore(path)
    if store.get_meta(DEMO_MARK) is not True:
        store.close()
        raise LedgerConflict(
            f"--resume continues a store renyiboost demo made; {path} is another model's "
            "(its keys are not the demo's row numbers, and replaying the bundled rows would "
            "charge them). Give the demo its own --state")
    return store


def _is_sqlite(path: Path) -> bool:
    """Whether ``path`` is a file that starts as every SQLite database does."""
    try:
        with path.open("rb") as file:
            return file.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def check_outputs(plot_path: Path, json_path: Path | None, state_path: Path) -> None:
    """Refuse output paths the demo could not write, before it replays anything: a
    directory, the state file, or a plot format matplotlib does not write (it was found
    after the run, whose keys had spent their budgets)."""
    for option, path in (("--plot", plot_path), ("--json", json_path)):
        if path is not None and path.is_dir():
            raise ValueError(f"{option} {path} is a directory; give a file path")
        if path is not None and path.resolve() == state_path.resolve():
            raise ValueError(f"{option} {path} is the state file; give another path")
    if json_path is not None and json_path.resolve() == plot_path.resolve():
        # the history was written over the plot that the demo said it wrote (review L #8)
        raise ValueError(f"--json {json_path} is the --plot file; give another path")
    try:
        from matplotlib.figure import Figure
    except ImportError:  # the plot is skipped, with a word, after the run
        return
    formats = Figure().canvas.get_supported_filetypes()
    suffix = plot_path.suffix.removeprefix(".").lower()
    if suffix not in formats:
        raise ValueError(f"--plot {plot_path}: the file's extension must name an image "
                         f"format ({', '.join(sorted(formats))}), got {suffix or 'none'!r}")
    plot_path.parent.mkdir(parents=True, exist_ok=True)


def run_demo(dataset: str = "abalone", scenario: str = "late", epsilon: float = 1.0,
             delta: float = 1e-6, batch_size: int = 250, expected_records: int | None = None,
             train_every: int | None = None, trees_per_trigger: int | None = None,
             state: str = "out/demo/state.db", resume: bool = False,
             plot_path: str = "out/demo/demo.png", json_path: str | None = None,
             seed: int | None = None) -> int:
    """``renyiboost demo`` (the options are the command's, see :mod:`renyiboost.cli`)."""
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)  # before any data or file
    source = InMemorySource(dataset, scenario=scenario, batch_size=batch_size)
    task = source.data.task
    triggers: dict[str, Any] = {}
    if train_every is not None:
        triggers = {"train_every": train_every, "warmup": train_every,
                    "trigger_growth": 0.0}
    if trees_per_trigger is not None:
        triggers["trees_per_trigger"] = trees_per_trigger
    config = EngineConfig.from_defaults(source.schema, task, epsilon, delta,
                                        expected_records, **triggers)
    state_path, plot_path = Path(state), Path(plot_path)
    check_outputs(plot_path, None if json_path is None else Path(json_path), state_path)
    if not resume:  # the demo starts a new model, so it replaces its own earlier store
        remove_demo_store(state_path)
    store = (resumed_demo_store(state_path) if resume
             else SQLiteStore(state_path, create=True, meta={DEMO_MARK: True}))
    engine = StreamEngine(config, store=store, seed=seed)
    late_name = (LATE_SUBPOPULATIONS.get(source.data.name, ("-",))[0]
                 if scenario == "late" else None)
    print(f"renyiboost demo: {source.data.name} ({len(source)} records), scenario "
          f"'{scenario}'{f' (late: {late_name})' if late_name else ''}, "
          f"epsilon={epsilon}, delta={delta}, state {state_path}")
    metric = "mae" if task == "regression" else "error"
    # the late column only where the scenario has a late subpopulation: elsewhere it held
    # a subgroup's metric under a header that named none (review L #10)
    late_header = f" {'late ' + metric:>10}" if late_name else ""
    print(f"{'batch':>5} {'seen':>6} {metric:>8}{late_header} {'trees':>6}   "
          f"[operator: {'active':>7} {'retired':>8}]")
    start = time.perf_counter()

    def show(row: dict[str, Any]) -> None:  # the table's rows are the progress
        late = row.get(f"late_{metric}")
        operator = row["operator"]
        late_cell = f" {'' if late is None else f'{late:.3f}':>10}" if late_name else ""
        print(f"{row['batch']:>5} {row['seen']:>6} {row[metric]:>8.3f}{late_cell} "
              f"{row['n_trees']:>6}   "
              f"[operator: {operator['n_active']:>7} {operator['n_retired']:>8}]", flush=True)

    try:
        done = committed_records(source, engine.offsets)  # a resumed store's
        history = replay(engine, source, on_batch=show)
        return _report(engine, source, done, history, time.perf_counter() - start, late_name,
                       scenario, plot_path, json_path)
    finally:
        engine.close()


def _report(engine: StreamEngine, source: InMemorySource, done: int,
            history: list[dict[str, Any]], elapsed: float, late_name: str | None,
            scenario: str, plot_path: Path, json_path: str | None) -> int:
    """The demo's end: the public guarantee, the operator's counts, the plot and the
    history."""
    guarantee = engine.privacy_guarantee()
    print(f"\nreplayed the stream in {elapsed:.1f} s"
          + (" (resumed after the records its store held: counts below)" if done else ""))
    print("privacy guarantee (public):")
    for name, value in guarantee.model_dump().items():
        print(f"  {name:28s} {rounded(value)}")
    print("operator telemetry (exact counts: not for release):")
    for name, value in engine.operator_telemetry().model_dump(exclude={"channel"}).items():
        print(f"  {name:28s} {rounded(value)}")
    print(f"  {'records_replayed_now':28s} {len(source) - done}")
    if done:  # offsets of the store: operator telemetry, not a line of the run (review L #9)
        print(f"  {'records_before_resume':28s} {done}")
    if not history:  # a resumed store that had read every record
        print("plot skipped: no record was left to replay")
    else:
        try:
            plot(history, plot_path, f"{source.data.name}, scenario '{scenario}', "
                 f"ε = {guarantee.epsilon_or_inf:.3g}", late_name, source.drift_starts)
            print(f"plot written to {plot_path} (an evaluation on public data)")
        except ImportError as missing:  # matplotlib is the optional plot extra
            print(f"plot skipped: {missing}")
    if json_path:
        Path(json_path).write_text(json.dumps(
            {"history": history, "guarantee": guarantee.model_dump()}, indent=1))
    return 0
