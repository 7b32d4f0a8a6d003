"""Batch peers (DP-EBM, diffprivlib, xgboost) and the paper preset."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

from renyiboost.datasets import load
from renyiboost.experiments import paper
from renyiboost.experiments.metrics import error_rate, r2_score, roc_auc
from renyiboost.experiments.peers import _decode_categories, make_peer
from renyiboost.schema import PublicSchema


@pytest.fixture(scope="module")
def adult_sample():
    data = load("adult")
    rng = np.random.default_rng(0)
    rows = rng.permutation(len(data))[:6000]
    return data, data.X[rows[:4000]], data.y[rows[:4000]], data.X[rows[4000:]], data.y[rows[4000:]]


@pytest.mark.parametrize("name", ["dpebm", "dpebm_tuned", "dprf", "xgboost"])
def test_classification_peers_learn_from_public_bounds_only(name, adult_sample) -> None:
    data, X, y, X_test, y_test = adult_sample
    peer = make_peer(name, data.schema, "classification", "adult", 5.0, 1e-6, seed=0)
    proba = peer.fit(X, y).predict_score(X_test)
    assert proba.shape == y_test.shape and ((proba >= 0) & (proba <= 1)).all()
    # every peer ranks better than chance at ε = 5 (AUC 0.5; diffprivlib's forest is the
    # weakest, ~0.7) and none is worse than always-'<=50K' (24.5 % error on this sample)
    assert roc_auc(y_test, proba) > 0.65
    assert error_rate(y_test, proba) <= 100 * y_test.mean()


def test_regression_peers_and_their_refusals() -> None:
    data = load("abalone")
    X, y = data.X[:3000], data.y[:3000]
    ceiling = make_peer("xgboost", data.schema, "regression", "abalone", math.inf, 1e-6, 0)
    assert r2_score(data.y[3000:], ceiling.fit(X, y).predict_score(data.X[3000:])) > 0.3
    dpebm = make_peer("dpebm", data.schema, "regression", "abalone", 5.0, 1e-6, 0).fit(X, y)
    prediction = dpebm.predict_score(data.X[3000:])
    lo, hi = data.schema.target_bounds
    assert np.isfinite(prediction).all() and prediction.min() >= lo - 1e-9 \
        and prediction.max() <= hi + 1e-9  # DP-EBM clips to the public target bounds
    with pytest.raises(ValueError, match="classification only"):
        make_peer("dprf", data.schema, "regression", "abalone", 1.0, 1e-6, 0)
    with pytest.raises(ValueError, match="finite epsilon"):
        make_peer("dpebm", data.schema, "regression", "abalone", math.inf, 1e-6, 0)


def test_categories_reach_the_peers_as_their_public_names() -> None:
    schema = load("abalone").schema
    column = schema.names.index("sex")
    X = np.zeros((3, schema.n_features))
    X[:, column] = [0, 2, 3]  # 3 is the schema's code for a value outside the domain
    decoded = _decode_categories(schema)(X)[:, column]
    domain = [str(c) for c in schema.features["sex"]]
    assert list(decoded) == [domain[0], domain[2], "?"]
    # a real "?" category stays apart from the public "other" value (they were merged)
    asked = PublicSchema(features={"q": ["?", "??", "y"]})
    decoded = _decode_categories(asked)(np.array([[0.0], [1.0], [2.0], [3.0]]))[:, 0]
    assert list(decoded) == ["?", "??", "y", "???"]


def test_peers_take_the_other_category_and_a_public_binary_label_set() -> None:
    """A training row in the schema's public "other" category reaches DP-EBM as "?", which
    its ordinal domain now holds (interpret refused the row: "values outside of the
    ordinal set"); our peers take a binary schema's labels as given (they were cast to
    int: "invalid literal"), and an outside peer asked to do so says to code them 0 / 1."""
    from renyiboost.schema import PublicSchema

    rng = np.random.default_rng(0)
    schema = PublicSchema(features={"a": (0, 1), "c": ["x", "y"]})
    X = np.column_stack([rng.uniform(size=400), rng.integers(0, 3, 400).astype(float)])
    y = (X[:, 0] > 0.5).astype(int)
    dpebm = make_peer("dpebm", schema, "classification", "toy", 4.0, 1e-6, 0).fit(X, y)
    assert np.isfinite(dpebm.predict_score(X)).all()
    labelled = PublicSchema(features={"a": (0, 1)}, labels=["no", "yes"])
    words = np.where(y == 1, "yes", "no")
    for name in ("dpboost", "diprime", "dp_gam", "dp_mean"):
        peer = make_peer(name, labelled, "classification", "toy", 4.0, 1e-6, 0)
        score = peer.fit(X[:, :1], words).predict_score(X[:, :1])
        assert score.shape == (400,) and ((score >= 0) & (score <= 1)).all()
    with pytest.raises(ValueError, match="binary labels as 0 / 1"):
        make_peer("dprf", labelled, "classification", "toy", 4.0, 1e-6, 0).fit(X[:, :1], words)


def test_paper_preset_writes_tables_plots_and_verdicts_and_resumes(tmp_path, monkeypatch) -> None:
    config = paper.PaperConfig(datasets=["abalone"], epsilons=[0.54], repeats=1, folds=1,
                               workers=1, streams=False, out=str(tmp_path))
    results = paper.run_paper(config)
    assert {(r["figure"], r["method"]) for r in results} == {
        ("fig4", m) for m in ("renyiboost", "dp_mean", "dpebm", "dpebm_tuned", "non_private",
                              "xgboost")} | {("leaf_noise", "sln"), ("fig7", "irf"),
                                             ("fig7", "constant"), ("fig7", "global"), ("fig6", "irf_2x"),
                                             ("fig6", "no_filter")}
    by = {(r["figure"], r["method"]): r for r in results}
    assert by[("fig4", "renyiboost")]["r2"] > by[("fig4", "dp_mean")]["r2"] + 0.2
    assert by[("fig4", "xgboost")]["epsilon"] == math.inf
    summary = (tmp_path / "summary.md").read_text()
    assert "| renyiboost | 0." in summary and "Anchors" in summary
    verdicts = paper.verdicts(paper.summarise(results))
    official = next(v for v in verdicts if v["anchor"] == "official S-BDT code"
                    and v["epsilon"] == 0.54)
    assert official["verdict"] in ("beat", "match", "trail") and official["anchor_value"] == 0.357
    # DPBoost's anchor is at ε = 0.5, which this run lacks: shown beside ours at 0.54, not
    # judged (it was "beaten" with 8 % more budget on our side: review F #3)
    dpboost = next(v for v in verdicts if v["anchor"] == "S-GBDT paper, DPBoost")
    assert dpboost["our_epsilon"] == 0.54 and dpboost["verdict"] == "n/a (ε differs)"
    for name in ("fig4.png", "ablations.png"):
        assert (tmp_path / name).stat().st_size > 10_000
    with open(tmp_path / "runs.csv") as fh:
        assert len(list(csv.DictReader(fh))) == len(results)

    def fail(_job):
        raise AssertionError("job recomputed")

    monkeypatch.setattr(paper, "run_job", fail)
    again = paper.run_paper(config)
    assert [r["seed"] for r in again] == [r["seed"] for r in results]
    # changed code must not be served the old code's numbers
    monkeypatch.setattr(paper, "code_fingerprint", lambda: "changed code")
    with pytest.raises(AssertionError, match="job recomputed"):
        paper.run_paper(config)


def test_paper_preset_appends_the_stream_grid_with_peers(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(paper, "STREAM_GRID", ((("abalone",), ("iid",)), (("sea",), ("switch",))))
    monkeypatch.setattr(paper, "STREAM_METHODS", ("irf", "dp_mean", "xgboost", "sgt", "arf"))
    config = paper.PaperConfig(datasets=["abalone"], epsilons=[1.0], repeats=1, folds=1,
                               workers=1, stream_limit=1000, out=str(tmp_path))
    monkeypatch.setattr(paper, "jobs", lambda _config: [])  # the figures are tested above
    paper.run_paper(config)
    text = (tmp_path / "summary.md").read_text()
    streams = text.split("## Drifting streams")[1]
    rows = {tuple(cell.strip() for cell in line.split("|")[1:5])
            for line in streams.splitlines() if line.startswith(("| abalone", "| sea"))}
    # at stream_epsilon, each data set with its own scenario; the task picks the river peer
    assert rows == {("abalone", "iid", "0.54", m) for m in ("irf", "dp_mean")} | {
        ("abalone", "iid", "inf", m) for m in ("xgboost", "sgt")} | {
        ("sea", "switch", "0.54", m) for m in ("irf", "dp_mean")} | {
        ("sea", "switch", "inf", m) for m in ("xgboost", "arf")}


def test_repeated_runs_are_summarised_by_their_sample_standard_deviation() -> None:
    """The tables' "± sd" and the verdicts' "within one sd" used the population sd, 1/√2
    of the sample one at the default two repeats (review F #4)."""
    from renyiboost.experiments.metrics import sample_std

    assert sample_std([0.0, 1.0]) == pytest.approx(math.sqrt(0.5))
    assert sample_std([0.3]) == 0.0
    rows = [{"figure": "fig4", "dataset": "abalone", "method": "renyiboost", "epsilon": 1.0,
             "seed": seed, "r2": value} for seed, value in enumerate((0.0, 1.0))]
    (row,) = [r for r in paper.summarise(rows) if r["metric"] == "r2"]
    assert row["std"] == pytest.approx(math.sqrt(0.5))


def test_a_missing_category_reaches_a_peer_as_missing() -> None:
    """A NaN categorical code was cast to INT64_MIN and indexed the lookup: the DP-EBM
    peers crashed with an IndexError (review F #5). It is now a missing value (``None``),
    which the peer refuses in its own words if it cannot bin it privately."""
    from renyiboost.experiments.peers import _decode_categories

    to_input = _decode_categories(PublicSchema(features={"a": (0, 1), "c": ["x", "y"]}))
    out = to_input(np.array([[0.5, 0.0], [0.2, np.nan], [0.1, 5.0]]))
    assert out[:, 1].tolist() == ["x", None, "?"]  # past the domain: its "other" value
