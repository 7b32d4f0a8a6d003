"""The reproduction command: protocol, JSON record, and the learner beating its baseline."""

from __future__ import annotations

import json

import pytest

from renyiboost.cli import main as cli
from renyiboost.experiments.reproduce import load_config, params_for, splits


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
