"""Drift scenarios of the in-memory source, and the main job end to end."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from renyiboost.cli import main as cli_main
from renyiboost.exceptions import TestingOnlyWarning
from renyiboost.experiments import evaluation
from renyiboost.schema import PublicSchema
from renyiboost.stream.sources import LATE_SUBPOPULATIONS, InMemorySource

warnings.simplefilter("ignore", TestingOnlyWarning)


def _rows(source: InMemorySource) -> np.ndarray:
    return np.array([int(k) for batch in source for k in batch.keys])


@pytest.mark.parametrize("scenario", ["iid", "natural", "sorted", "late"])
def test_every_row_arrives_exactly_once(scenario: str) -> None:
    source = InMemorySource("abalone", scenario=scenario, batch_size=333)
    rows = _rows(source)
    assert sorted(rows.tolist()) == list(range(4177))
    positions = [p for batch in source for p in batch.positions]
    assert [o for _, o in positions] == list(range(1, 4178))  # next offsets, in order


def test_late_scenario_holds_the_sub_population_back() -> None:
    source = InMemorySource("abalone", scenario="late", batch_size=100)
    late = np.concatenate([batch.late for batch in source])
    first_late = int(np.argmax(late))
    assert not late[:first_late].any() and late[first_late:].all()
    data = source.data
    assert late.sum() == int(LATE_SUBPOPULATIONS["abalone"][1](data).sum())


def test_sorted_and_natural_orders() -> None:
    sorted_source = InMemorySource("abalone", scenario="sorted", sort_by="diameter")
    column = sorted_source.schema.names.index("diameter")
    values = sorted_source.data.X[_rows(sorted_source), column]
    assert np.all(np.diff(values) >= 0)
    natural = InMemorySource("elec2", scenario="natural", limit=1000)
    assert _rows(natural).tolist() == list(range(1000))


def test_switch_scenario_changes_the_concept_halfway() -> None:
    source = InMemorySource("agrawal", scenario="switch", batch_size=1000)
    y = source.data.y
    # Agrawal function 0 labels by age alone; function 2 does not.
    age = source.data.X[:, source.schema.names.index("age")]
    rule0 = (age < 40) | (age >= 60)
    half = y.size // 2
    assert np.mean(rule0[:half] == (y[:half] == 0)) == 1.0 or np.mean(
        rule0[:half] == (y[:half] == 1)) == 1.0
    assert 0.2 < np.mean(rule0[half:] == (y[half:] == 1)) < 0.95
    with pytest.raises(ValueError, match="agrawal"):
        InMemorySource("abalone", scenario="switch")


def test_demo_writes_the_report_plot_and_history(tmp_path, capsys) -> None:
    state, png, out = tmp_path / "s.db", tmp_path / "d.png", tmp_path / "h.json"
    args = ["--dataset", "abalone", "--state", str(state), "--plot", str(png), "--json", str(out),
            "--seed", "3"]
    assert cli_main(["demo", *args]) == 0
    text = capsys.readouterr().out
    assert "privacy guarantee (public)" in text and "budget_rdp" in text
    assert "operator telemetry (exact counts: not for release)" in text
    # how many records it replayed is the operator's too, not a line of the run (review L)
    operator = text.split("operator telemetry (exact counts: not for release)")[1]
    assert "records_replayed_now" in operator and "replayed 4177" not in text
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    record = json.loads(out.read_text())
    history, guarantee = record["history"], record["guarantee"]
    assert len(history) == 17 and history[-1]["seen"] == 4177
    assert guarantee["epsilon"] <= 1.0 and guarantee["unit"] == "key"
    assert history[-1]["n_trees"] > 100
    assert {row["operator"]["channel"] for row in history} == {"operator-telemetry"}
    # the model learns: the prequential MAE of the early batches falls well below the first's
    assert np.mean([h["mae"] for h in history[4:12]]) < 0.5 * history[0]["mae"]


def _late_error(individual_filter: bool, global_rounds: bool, seed: int) -> float:
    """The late sub-population's prequential MAE with the default policy but Fig. 7's
    T = 30 and fixed triggers of 6 trees every 100 positions (so T is spent long before the
    stream ends); ``global_rounds``: T rounds in all."""
    from renyiboost.stream.engine import EngineConfig, StreamEngine

    source = InMemorySource("abalone", scenario="late", batch_size=250)
    triggers = {"train_every": 100, "trees_per_trigger": 6, "rounds": 30}
    config = EngineConfig.from_defaults(source.schema, "regression", 1.0,
                                        individual_filter=individual_filter, **triggers)
    if global_rounds:
        config = EngineConfig.from_defaults(
            source.schema, "regression", 1.0, individual_filter=individual_filter,
            max_rounds=config.params.rounds, **triggers)
    history = evaluation.replay(StreamEngine(config, seed=seed), source)
    return float(np.mean([h["late_mae"] for h in history if "late_mae" in h]))


def test_individual_budgets_let_the_late_sub_population_in_at_the_same_epsilon() -> None:
    """Fig. 7's setting: with global accounting the model has T rounds in all, spent before
    the old shells arrive; with the individual filter every key brings its own budget, and
    the prequential MAE on the late sub-population falls (4 seeds, same ε = 1)."""
    with_filter = [_late_error(True, False, seed) for seed in range(4)]
    global_rounds = [_late_error(False, True, seed) for seed in range(4)]
    assert np.mean(with_filter) < np.mean(global_rounds) - 0.25
    assert max(with_filter) < min(global_rounds)


def test_a_source_refuses_arguments_it_cannot_replay() -> None:
    """``limit=-5`` silently dropped the last 5 records, ``limit=0`` gave an empty stream,
    ``batch_size=True`` gave batches of one, an unknown ``sort_by`` and a ``late`` scenario
    on a set without a late sub-population raised bare ``ValueError`` / ``KeyError`` text."""
    for bad, match in (({"limit": -5}, "limit must be a whole number >= 1 or None"),
                       ({"limit": 0}, "limit"), ({"batch_size": True}, "batch_size"),
                       ({"batch_size": 2.5}, "batch_size"), ({"seed": -1}, "seed"),
                       ({"scenario": "sorted", "sort_by": "nope"}, "sort_by must name a numeric"),
                       ({"scenario": "sorted", "sort_by": "sex"}, "sort_by"),
                       ({"sort_by": "diameter"}, "sort_by is read only by the 'sorted'")):
        with pytest.raises(ValueError, match=match):
            InMemorySource("abalone", **bad)
    data = InMemorySource("abalone").data
    with pytest.raises(ValueError, match="scenario 'late' holds back"):
        InMemorySource(type(data)("mine", data.X, data.y, data.schema, data.task),
                       scenario="late")
    # river's error about drift locations, and a bare StopIteration (review Y #6)
    with pytest.raises(ValueError, match="friedman replays need at least 3 records"):
        InMemorySource("friedman", limit=2)
    only_sex = PublicSchema(features={"sex": data.schema.features["sex"]},
                            target_bounds=data.schema.target_bounds)
    with pytest.raises(ValueError, match="scenario 'sorted' orders by a numeric feature"):
        InMemorySource(type(data)("mine", data.X[:, :1], data.y, only_sex, data.task),
                       scenario="sorted")


def test_drift_starts_of_the_generators_in_their_natural_order() -> None:
    """``natural`` replays a generator as ``switch`` does, so its drift points are the same
    (they were none)."""
    for name, points in (("agrawal", [500]), ("friedman", [333, 666])):
        for scenario in ("switch", "natural"):
            assert InMemorySource(name, scenario=scenario, limit=1000).drift_starts == points


def test_a_memory_replay_continues_after_what_its_store_committed(tmp_path, capsys) -> None:
    """A second ``train --source memory:X`` on the same store fed every record again: 8,354
    positions and 135 more trees for Abalone's 4,177 records. It now continues after the
    committed offset; over shards, whose positions cannot say where it stopped, it is
    refused. A replay that stopped part-way continues where its store's commit ended, and
    a replay in another order is refused."""
    from pathlib import Path

    from renyiboost.stream.engine import EngineConfig, StreamEngine
    from renyiboost.stream.store import SQLiteStore

    config = str(Path(__file__).parents[1] / "examples" / "abalone.toml")
    argv = ["train", "--config", config, "--source", "memory:abalone", "--state",
            str(tmp_path / "x.db"), "--json"]
    runs = []
    for extra in (["--new-state"], []):
        assert cli_main([*argv, *extra]) == 0
        runs.append(json.loads(capsys.readouterr().out.strip().splitlines()[0]))
    first, second = runs
    assert (first["consumed"], second["consumed"]) == (4177, 0)
    assert first["engine"]["positions"] == second["engine"]["positions"] == 4177
    assert first["engine"]["release_version"] == second["engine"]["release_version"]
    # shards commit their own records: their positions cannot say where a replay stopped,
    # so a second replay over them is refused (it fed every record again)
    argv = [*argv[:6], str(tmp_path / "s.db"), "--shards", "2"]
    assert cli_main([*argv, "--new-state"]) == 0
    capsys.readouterr()
    assert cli_main(argv) == 1
    assert "a memory:abalone replay over shards cannot continue them" in capsys.readouterr().err
    source = InMemorySource("abalone", batch_size=500)
    cfg = EngineConfig.from_defaults(source.schema, "regression", 1.0, 1e-6, 4177)
    path = tmp_path / "part.db"
    engine = StreamEngine(cfg, store=SQLiteStore(path, create=True), seed=1)
    for batch in list(source)[:3]:
        engine.add(batch.X, batch.y, batch.keys, batch.positions)
    committed = engine.offsets["memory:abalone"]
    engine.close()
    assert 0 < committed <= 1500
    engine = StreamEngine(cfg, store=str(path), seed=1)
    history = evaluation.replay(engine, source)
    assert history[-1]["seen"] == 4177 and engine.positions == 4177
    assert sum(b.y.size for b in source.batches(after=committed)) == 4177 - committed
    engine.close()
    with pytest.raises(ValueError, match="a replay in another order cannot continue it"):
        evaluation.replay(StreamEngine(cfg, store=str(path), seed=1),
                          InMemorySource("abalone", scenario="sorted"))


def test_a_bad_record_does_not_end_a_replay(caplog) -> None:
    """A NaN label stopped a replay at its batch (position 250 of 1,000): the engine learns
    the valid rows and raises after them, and the replay now goes on to the end, logging the
    record and marking the batch."""
    from renyiboost.stream.engine import EngineConfig, StreamEngine

    data = InMemorySource("abalone").data
    y = data.y[:1000].astype(float)
    y[249] = np.nan
    mine = type(data)("mine", data.X[:1000], y, data.schema, data.task)
    source = InMemorySource(mine, scenario="natural", batch_size=100)
    config = EngineConfig.from_defaults(source.schema, "regression", 1.0, 1e-6, 1000)
    engine = StreamEngine(config, seed=2)
    history = evaluation.replay(engine, source)
    assert len(history) == 10 and engine.positions == 1000
    assert [row.get("invalid", False) for row in history] == [i == 2 for i in range(10)]
    assert "batch 2: a record was not learned (label)" in caplog.text
