"""The experiment grid: cells, cache, tidy CSV, summary and plots."""

from __future__ import annotations

import csv
import math

import pytest

from renyiboost.experiments import grid


def _config(tmp_path, **kw) -> grid.GridConfig:
    base = {"datasets": ["abalone"], "scenarios": ["late"], "epsilons": [1.0],
            "methods": ["irf", "global", "sgt"], "repeats": 1, "limit": 1500,
            "out": str(tmp_path)}
    return grid.GridConfig(**(base | kw))


def test_cells_cover_the_grid_and_peers_run_once_per_epsilon_free_combination() -> None:
    config = grid.GridConfig(datasets=["abalone", "adult"], scenarios=["iid", "late"],
                             epsilons=[0.5, 1.0], methods=["irf", "sgt"], repeats=3)
    cells = grid.cells(config)
    assert len(cells) == 2 * 2 * (2 + 1) * 3
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


def test_peers_refuse_the_wrong_task(tmp_path) -> None:
    with pytest.raises(ValueError, match="regression"):
        grid.run_grid(_config(tmp_path, datasets=["elec2"], methods=["sgt"], limit=300),
                      progress=False)
