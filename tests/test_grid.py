"""The experiment grid: cells, cache, tidy CSV, summary and plots."""

from __future__ import annotations

import csv
import math

import pytest

from renyiboost.datasets import load
from renyiboost.experiments import grid


def _config(tmp_path, **kw) -> grid.GridConfig:
    base = {"datasets": ["abalone"], "scenarios": ["late"], "epsilons": [1.0],
            "methods": ["irf", "global", "sgt"], "repeats": 1, "limit": 1500,
            "expected_records": 300,  # T covers 300 records: global accounting stops early
            "out": str(tmp_path)}
    return grid.GridConfig(**(base | kw))


def test_cells_cover_the_grid_and_peers_run_once_per_epsilon_free_combination() -> None:
    config = grid.GridConfig(datasets=["abalone", "adult"], scenarios=["iid", "late"],
                             epsilons=[0.5, 1.0], methods=["irf", "sgt"], repeats=3)
    cells = grid.cells(config)
    # sgt (a regressor) runs on abalone only; 2 scenarios x 3 repeats each
    assert len(cells) == 2 * 3 * ((2 + 1) + 2)
    assert {c["epsilon"] for c in cells if c["method"] == "sgt"} == {math.inf}


def test_grid_writes_outputs_and_resumes_from_its_cache(tmp_path, monkeypatch) -> None:
    config = _config(tmp_path)
    results = grid.run_grid(config, progress=False)
    assert {r["method"] for r in results} == {"irf", "global", "sgt"}
    for name in ("runs.csv", "summary.md", "abalone_vs_epsilon.png", "stream_late.png"):
        assert (tmp_path / name).stat().st_size > 0
    with open(tmp_path / "runs.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 3 * 6  # 1,500 records in batches of 250, three cells
    assert {row["delta"] for row in rows} == {"1e-06"} and "seed policy" in (
        tmp_path / "summary.md").read_text()
    by_method = {r["method"]: r["mean"] for r in results}
    # individual budgets keep learning where global accounting has stopped
    assert by_method["irf"] < by_method["global"]

    def fail(*_args):  # a second run must come from the cache
        raise AssertionError("cell recomputed")

    monkeypatch.setattr(grid, "RUNNERS", dict.fromkeys(grid.RUNNERS, fail))
    again = grid.run_grid(config, progress=False)
    assert [r["mean"] for r in again] == [r["mean"] for r in results]
    # a change to the package's code re-runs the cells (the key hashes its source)
    monkeypatch.setattr(grid, "code_fingerprint", lambda: "changed code")
    with pytest.raises(AssertionError, match="cell recomputed"):
        grid.run_grid(config, progress=False)


def test_the_code_fingerprint_follows_every_source_file(tmp_path, monkeypatch) -> None:
    """The fingerprint hashes each module's path and bytes: an edit anywhere in the
    package, or a module added, gives another key."""
    package = tmp_path / "renyiboost"
    (package / "models").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "models" / "leaf.py").write_text("SIGMA = 1.0\n")

    def fingerprint() -> str:
        grid.code_fingerprint.cache_clear()
        return grid.code_fingerprint()

    monkeypatch.setattr(grid.resources, "files", lambda _name: package)
    first = fingerprint()
    (package / "models" / "leaf.py").write_text("SIGMA = 0.5\n")
    second = fingerprint()
    (package / "models" / "extra.py").write_text("")
    third = fingerprint()
    assert len({first, second, third}) == 3
    (package / "models" / "leaf.py").write_text("SIGMA = 1.0\n")
    (package / "models" / "extra.py").unlink()
    assert fingerprint() == first
    grid.code_fingerprint.cache_clear()


def test_combinations_that_cannot_run_are_left_out() -> None:
    config = grid.GridConfig(datasets=["abalone", "elec2", "sea"], scenarios=["iid", "switch"],
                             epsilons=[1.0], methods=["irf", "sgt", "arf", "dprf"], repeats=1)
    combos = {(c["dataset"], c["scenario"], c["method"]) for c in grid.cells(config)}
    assert combos == {
        ("abalone", "iid", "irf"), ("abalone", "iid", "sgt"),
        ("elec2", "iid", "irf"), ("elec2", "iid", "arf"), ("elec2", "iid", "dprf"),
        ("sea", "iid", "irf"), ("sea", "iid", "arf"), ("sea", "iid", "dprf"),
        ("sea", "switch", "irf"), ("sea", "switch", "arf"), ("sea", "switch", "dprf"),
    }


def test_a_batch_peer_splits_its_budget_over_the_fits_that_predict(monkeypatch) -> None:
    """4 batches, 2 refits: one fit after batch 2 predicts batches 3-4 and gets all of ε;
    a fit after the last batch would predict nothing and must not take a share."""
    import numpy as np

    from renyiboost.stream.sources import InMemorySource

    fits: list[tuple[float, float, int]] = []

    class Recorder:
        def __init__(self, epsilon: float, delta: float) -> None:
            self.budget = (epsilon, delta)

        def fit(self, X, y):
            fits.append((*self.budget, len(y)))
            return self

        def predict_score(self, X):
            return np.zeros(len(X))

    monkeypatch.setattr(grid, "make_peer", lambda method, schema, task, dataset, epsilon,
                        delta, seed: Recorder(epsilon, delta))
    config = grid.GridConfig(batch_size=100, limit=400, refits=2, delta=1e-6)
    source = InMemorySource("abalone", scenario="iid", batch_size=100, limit=400, seed=0)
    cell = {"dataset": "abalone", "scenario": "iid", "epsilon": 0.5, "method": "dp_mean",
            "repeat": 0}
    history = grid._batch_peer_run(cell, config, source)
    assert len(history) == 4
    assert fits == [(0.5, 1e-6, 200)]


def test_each_refit_of_a_batch_peer_draws_its_own_noise(monkeypatch) -> None:
    """The budget is split over a peer's refits as over independent mechanisms, so a
    seeded (test-only) run must not give every refit the same seed, and two repeats must
    not share a refit's seed either."""
    import numpy as np

    from renyiboost.stream.sources import InMemorySource

    seeds: list[int] = []

    class Recorder:
        def fit(self, X, y):
            return self

        def predict_score(self, X):
            return np.zeros(len(X))

    def make_peer(method, schema, task, dataset, epsilon, delta, seed):
        seeds.append(seed)
        return Recorder()

    monkeypatch.setattr(grid, "make_peer", make_peer)
    config = grid.GridConfig(batch_size=100, limit=800, refits=4, delta=1e-6)
    for repeat in (0, 1):
        source = InMemorySource("abalone", scenario="iid", batch_size=100, limit=800, seed=0)
        cell = {"dataset": "abalone", "scenario": "iid", "epsilon": 0.5, "method": "dp_mean",
                "repeat": repeat}
        grid._batch_peer_run(cell, config, source)
    assert len(seeds) == 6 and len(set(seeds)) == 6, seeds


@pytest.mark.parametrize("dataset", ["elec2", "abalone"])
@pytest.mark.parametrize("method", grid.PRIVATE_METHODS)
def test_every_stream_method_of_the_learner_builds_on_the_default_policy(method,
                                                                         dataset) -> None:
    """Each private stream method of the grid (and of ``make paper``'s stream grid) must
    build on the default policy of both tasks. The static-leaf ablation on a classification
    set once kept the policy's λ that follows the leaf denominator's noise, which a static
    leaf does not have, and ``make paper`` stopped there with a validation error."""
    data = load(dataset)
    engine = grid.stream_engine(method, data.task, data.schema, 1.0, 1e-6, seed=0)
    params = engine.config.params
    assert (params.leaf_noise == "static") == (method == "sln")
    if method == "sln":
        assert params.reg_lambda_noise_stds == 0.0
