"""The reproduction command: protocol, JSON record, and the learner beating its baseline."""

from __future__ import annotations

import json

import numpy as np
import pytest

from renyiboost.cli import main as cli
from renyiboost.experiments.reproduce import load_config, params_for, splits
from renyiboost.experiments.tune import tune, validation_splits


def test_protocol_splits() -> None:
    _, folds = splits("abalone")
    assert len(folds) == 5
    assert sum(f.y_test.size for f in folds) == 4177
    _, (adult,) = splits("adult")
    assert (adult.y_train.size, adult.y_test.size) == (30162, 15060)


def test_configs_pick_parameters_by_epsilon() -> None:
    config = load_config("abalone")
    assert params_for(config, 0.15) != params_for(config, 0.54)
    assert params_for(config, 0.54)["task"] == "regression"


def test_abalone_run_writes_the_record_and_beats_the_dp_mean(tmp_path, capsys) -> None:
    out = tmp_path / "abalone.json"
    assert cli(["reproduce", "--dataset", "abalone", "--epsilon", "0.54", "--repeats", "1",
                "--workers", "1", "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    for key in ("metric", "mean", "std", "epsilon", "delta", "repeats"):
        assert key in record
    assert record["metric"] == "r2" and record["epsilon"] == 0.54 and record["delta"] == 1e-6
    methods = record["methods"]
    # Seeded noise (seed policy in the record): 5 folds, the learner well above the DP mean.
    assert record["mean"] > 0.30
    assert methods["dp_mean"]["mean"] < 0.01
    assert methods["non_private"]["mean"] > record["mean"]
    assert "r2 =" in capsys.readouterr().out


@pytest.mark.parametrize("epsilon", [0.54])
def test_adult_run_reports_error_and_auc(epsilon: float, tmp_path) -> None:
    from renyiboost.experiments.reproduce import reproduce

    record = reproduce("adult", epsilon, 1, workers=1, methods=("sgbdt",))
    assert record["metric"] == "error" and "auc" in record
    assert record["mean"] < 17.5 and record["auc"] > 0.87


def _sorted_rows(X, y):
    rows = np.column_stack([X, y])
    return rows[np.lexsort(rows.T[::-1])]


def test_tuning_validates_on_training_rows_only() -> None:
    _, outer = splits("abalone")
    for split, inner in zip(outer, validation_splits("abalone"), strict=True):
        assert inner.y_test.size == split.y_train.size - int(0.8 * split.y_train.size)
        # fit ∪ validation is exactly the outer training fold, row for row
        np.testing.assert_array_equal(
            _sorted_rows(np.vstack([inner.X_train, inner.X_test]),
                         np.concatenate([inner.y_train, inner.y_test])),
            _sorted_rows(split.X_train, split.y_train),
        )


def test_tune_scores_candidates_and_the_committed_config() -> None:
    table = tune("abalone", 0.15, candidates=2, seeds=1, workers=1, refine=1, refine_seeds=1,
                 space="abalone-small-eps", against_config=True)
    scores = [row["score"] for row in table]
    assert len(table) == 3 and scores[:2] == sorted(scores[:2], reverse=True)
    assert sum(row["committed_config"] for row in table) == 1
    # every candidate learns something on validation rows (the DP mean scores ≈ 0)
    assert all(0.1 < s < 0.5 for s in scores)
