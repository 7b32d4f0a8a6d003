"""The main job: replay a bundled data set under drift through the engine, prequentially.

``renyiboost demo`` (``make demo``) streams the data set in batches through a
:class:`~renyiboost.stream.engine.StreamEngine` backed by a new SQLite store (the demo
creates it explicitly, every run, in ``out/demo/``). Every batch is first predicted by the
committed model, then learned (test-then-train). It prints the metrics per batch, the public
privacy guarantee and, marked as such, the operator telemetry (exact pool counts: for the
person running the demo, never for a report), and writes a PNG of public quantities only:
the prequential metric over the stream and the trees released against stream positions (the
public schedule). The metric is computed on the demo's public data set.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from renyiboost.accounting.inputs import check_delta, check_epsilon
from renyiboost.experiments.evaluation import replay, rounded
from renyiboost.plotting import pyplot
from renyiboost.stream.engine import EngineConfig, StreamEngine
from renyiboost.stream.sources import (
    LATE_SUBPOPULATIONS,
    InMemorySource,
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
    state_path = Path(state)
    if not resume:  # the demo starts a new model, so it creates a new store on purpose
        for suffix in ("", "-wal", "-shm"):
            Path(str(state_path) + suffix).unlink(missing_ok=True)
    store = str(state_path) if resume else SQLiteStore(state_path, create=True)
    engine = StreamEngine(config, store=store, seed=seed)
    late_name = (LATE_SUBPOPULATIONS.get(source.data.name, ("-",))[0]
                 if scenario == "late" else None)
    print(f"renyiboost demo: {source.data.name} ({len(source)} records), scenario "
          f"'{scenario}'{f' (late: {late_name})' if late_name else ''}, "
          f"epsilon={epsilon}, delta={delta}, state {state_path}")
    metric = "mae" if task == "regression" else "error"
    print(f"{'batch':>5} {'seen':>6} {metric:>8} {'late ' + metric:>10} {'trees':>6}   "
          f"[operator: {'active':>7} {'retired':>8}]")
    start = time.perf_counter()

    def show(row: dict[str, Any]) -> None:  # the table's rows are the progress
        late = row.get(f"late_{metric}")
        operator = row["operator"]
        print(f"{row['batch']:>5} {row['seen']:>6} {row[metric]:>8.3f} "
              f"{'' if late is None else f'{late:.3f}':>10} {row['n_trees']:>6}   "
              f"[operator: {operator['n_active']:>7} {operator['n_retired']:>8}]", flush=True)

    history = replay(engine, source, on_batch=show)
    elapsed = time.perf_counter() - start
    guarantee = engine.privacy_guarantee()
    print(f"\nreplayed {len(source)} records in {elapsed:.1f} s")
    print("privacy guarantee (public):")
    for name, value in guarantee.model_dump().items():
        print(f"  {name:28s} {rounded(value)}")
    print("operator telemetry (exact counts: not for release):")
    for name, value in engine.operator_telemetry().model_dump(exclude={"channel"}).items():
        print(f"  {name:28s} {rounded(value)}")
    plot_path = Path(plot_path)
    plot_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        plot(history, plot_path, f"{source.data.name}, scenario '{scenario}', "
             f"ε = {guarantee.epsilon_or_inf:.3g}", late_name, source.drift_starts)
        print(f"plot written to {plot_path} (public quantities only)")
    except ImportError as missing:  # matplotlib is the optional plot extra
        print(f"plot skipped: {missing}")
    if json_path:
        Path(json_path).write_text(json.dumps(
            {"history": history, "guarantee": guarantee.model_dump()}, indent=1))
    engine.close()
    return 0
