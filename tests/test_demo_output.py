"""The demo's output for people (issue 16, items 2, 4 and 8): no progress-bar fragments in a
log, rounded numbers, a plot with the prior baseline and the drift marker whose legend
matches the scenario, and a plotting extra that says how to get it."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from renyiboost.experiments import demo, evaluation
from renyiboost.experiments.metrics import error_rate, r2_score, roc_auc
from renyiboost.stream.sources import InMemorySource


def test_the_progress_bar_draws_nothing_when_stderr_is_not_a_terminal(capfd) -> None:
    tick = evaluation.progress_bar("fits")
    for done in range(1, 11):
        tick(done, 10)
    assert "\r" not in capfd.readouterr().err


def test_numbers_are_printed_rounded() -> None:
    assert evaluation.rounded(0.9999999999450357) == 1.0
    assert evaluation.rounded({"q50": 0.087806812345, "n": 3, "s": [(1000, 9.272181234)]}) == {
        "q50": 0.0878068, "n": 3, "s": [(1000, 9.27218)]}


@pytest.mark.parametrize(("scenario", "dataset"), [("late", "abalone"), ("iid", "abalone"),
                                                   ("switch", "friedman")])
def test_the_plot_has_the_baseline_and_a_drift_marker_that_match_the_scenario(
        tmp_path, scenario: str, dataset: str) -> None:
    source = InMemorySource(dataset, scenario=scenario, batch_size=500,
                            limit=3000 if dataset == "friedman" else None)
    starts = source.drift_starts
    if scenario == "late":
        assert starts == [int((~source.late_mask).sum())]  # the first late record
    elif scenario == "switch":
        assert starts == [1000, 2000]  # FriedmanDrift at n/3 and 2n/3
    else:
        assert starts == []
    history = [{"seen": 500 * (i + 1), "mae": 2.0, "prior_mae": 3.0, "n_trees": i,
                **({"late_mae": 2.5} if scenario == "late" and i > 6 else {})}
               for i in range(8)]
    late_name = "old shells" if scenario == "late" else None
    legend = demo.plot(history, tmp_path / "p.png", "t", late_name, starts)
    assert "prior (running mean of the labels)" in legend
    assert any("late" in label for label in legend) == (scenario == "late")
    assert ("drift" in legend) == (scenario == "switch")
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_the_prior_baseline_is_test_then_train(tmp_path) -> None:
    """Its first batch is scored against the middle of the public bounds, later ones
    against the mean of the labels before them."""
    from renyiboost.stream.engine import EngineConfig, StreamEngine

    source = InMemorySource("abalone", scenario="iid", batch_size=1000)
    engine = StreamEngine(EngineConfig.from_defaults(source.schema, "regression", 1.0), seed=1)
    history = evaluation.replay(engine, source)
    y = [batch.y for batch in source]
    assert history[0]["prior_mae"] == pytest.approx(np.mean(np.abs(y[0] - 15.0)))
    assert history[2]["prior_mae"] == pytest.approx(
        np.mean(np.abs(y[2] - np.concatenate(y[:2]).mean())))


def test_plotting_without_matplotlib_names_the_extra(monkeypatch) -> None:
    from renyiboost.plotting import pyplot

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"renyiboost\[plot\]"):
        pyplot()


def test_the_metrics_are_scikit_learns_under_our_units() -> None:
    y = np.array([0, 0, 1, 1, 1])
    score = np.array([0.1, 0.6, 0.4, 0.8, 0.9])
    assert error_rate(y, score) == pytest.approx(40.0)
    assert roc_auc(y, score) == pytest.approx(5 / 6)
    assert r2_score(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 4.0])) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="both classes"):
        roc_auc(np.ones(3), np.arange(3.0))


def test_the_demo_replaces_only_its_own_store(tmp_path) -> None:
    """The demo once unlinked whatever lay at --state: a production store with its keys'
    spent budgets, even one a trainer held (its files were gone once the holder closed).
    Now it replaces only a store it created, refuses anything else before it writes, and
    checks its output paths before it replays."""
    from renyiboost.exceptions import StoreLocked
    from renyiboost.stream.store import SQLiteStore

    def run(state, **options) -> None:
        assert demo.run_demo("abalone", "iid", batch_size=2000, state=str(state),
                      plot_path=str(options.pop("plot", tmp_path / "d.png")), **options) == 0

    precious = tmp_path / "precious.txt"
    precious.write_text("precious")
    with pytest.raises(ValueError, match="not a state store that the demo created"):
        run(precious)
    assert precious.read_text() == "precious"
    production = SQLiteStore(tmp_path / "prod.db", create=True)
    production.set_meta("published", {"version": 7})
    with pytest.raises(StoreLocked):  # a trainer holds it
        run(tmp_path / "prod.db")
    production.close()
    with pytest.raises(ValueError, match="not a state store that the demo created"):
        run(tmp_path / "prod.db")
    reopened = SQLiteStore(tmp_path / "prod.db")
    assert reopened.get_meta("published") == {"version": 7}
    reopened.close()
    run(tmp_path / "demo.db")
    run(tmp_path / "demo.db")  # its own store: replaced
    # --resume took any store: the demo's row numbers went into a production trainer's
    # ledgers (review C, 29 November); it continues only its own, and one that had read
    # every record ends without a plot (its empty history raised an IndexError)
    from renyiboost.exceptions import LedgerConflict

    with pytest.raises(LedgerConflict, match="another model's"):
        run(tmp_path / "prod.db", resume=True)
    reopened = SQLiteStore(tmp_path / "prod.db")
    assert reopened.get_meta("published") == {"version": 7} and not reopened.get_meta(
        "state")
    reopened.close()
    assert run(tmp_path / "demo.db", resume=True) is None
    with pytest.raises(ValueError, match="extension must name an image format"):
        run(tmp_path / "new.db", plot=tmp_path / "d.txt")
    with pytest.raises(ValueError, match="is a directory"):
        run(tmp_path / "new.db", json_path=str(tmp_path))
    assert not (tmp_path / "new.db").exists()
