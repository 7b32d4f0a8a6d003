"""Bundled data sets: the protocol's row counts, public schemas, and agreement with shared/."""

from __future__ import annotations

import csv
import gzip
import hashlib
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from renyiboost.datasets import load

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.mark.parametrize(
    ("name", "rows", "cols", "task"),
    [
        ("abalone", 4177, 8, "regression"),
        ("adult", 30162, 14, "classification"),
        ("adult-test", 15060, 14, "classification"),
        ("elec2", 45312, 6, "classification"),
        ("california", 20640, 8, "regression"),
    ],
)
def test_row_counts_and_tasks(name: str, rows: int, cols: int, task: str) -> None:
    data = load(name)
    assert data.X.shape == (rows, cols) and data.y.shape == (rows,)
    assert data.task == task
    assert not np.isnan(data.X).any()
    if task == "classification":
        assert set(np.unique(data.y)) == {0.0, 1.0}


def test_adult_positive_rates_match_the_uci_description() -> None:
    # UCI: 24.78 % of the cleaned training rows and 24.57 % of the test rows are >50K.
    assert load("adult").y.mean() == pytest.approx(7508 / 30162)
    assert load("adult-test").y.mean() == pytest.approx(3700 / 15060)


@pytest.mark.parametrize("name", ["abalone", "adult", "elec2", "california"])
def test_encoded_values_respect_the_public_schema(name: str) -> None:
    data = load(name)
    schema = data.schema
    num, cat = ~schema.is_categorical, schema.is_categorical
    assert np.all(data.X[:, num] >= schema.lower[num])
    assert np.all(data.X[:, num] <= schema.upper[num])
    # every category value of the bundled rows is in its published domain (no "other")
    assert np.all(data.X[:, cat] < schema.n_categories[cat])


def test_bundled_files_are_the_shared_ones() -> None:
    """The package's copies are byte-identical to shared/data (checksums in SOURCES.md)."""
    if not SHARED.is_dir():
        pytest.fail(f"shared/data is expected beside the repository at {SHARED}")
    folder = resources.files("renyiboost.datasets").joinpath("data")
    for name in ("abalone.csv.gz", "adult.data.gz", "adult.test.gz", "elec2.csv.gz"):
        ours = hashlib.sha256(folder.joinpath(name).read_bytes()).hexdigest()
        theirs = hashlib.sha256((SHARED / name).read_bytes()).hexdigest()
        assert ours == theirs, name


def test_abalone_first_row_decodes_to_the_csv_row() -> None:
    data = load("abalone")
    x, y = next(iter(data.records()))
    with gzip.open(SHARED / "abalone.csv.gz", "rt") as fh:
        first = next(iter(list(csv.DictReader(fh))[:1]))
    assert x["sex"] == first["sex"] and x["length"] == float(first["length"])
    assert y == float(first["rings"])


def test_unknown_data_set_names_the_choices() -> None:
    with pytest.raises(ValueError, match="abalone"):
        load("iris")


def test_covertype_loads_from_a_given_path_only(monkeypatch) -> None:
    from renyiboost.datasets import COVERTYPE_ENV, load_covertype

    monkeypatch.delenv(COVERTYPE_ENV, raising=False)
    with pytest.raises(ValueError, match=COVERTYPE_ENV):
        load_covertype()
    data = load_covertype(str(SHARED / "covtype.csv.gz"))
    assert data.X.shape == (581_012, 12) and data.task == "classification"
    assert int(data.y.sum()) == 283_301  # UCI's Lodgepole Pine count (SOURCES.md)
    schema = data.schema
    num = ~schema.is_categorical
    # the codebook bounds almost never clip (only 51 azimuths of exactly 360° sit on an upper
    # bound), and the one-hot groups decode into their domains
    assert int((data.X[:, num] == schema.upper[num]).sum()) == 51
    assert np.all(data.X[:, ~num] < schema.n_categories[~num])


@pytest.mark.parametrize(("change", "why"), [
    (lambda row: row[:14] + ["0"] * 40 + row[54:], "exactly one 1 among its soil columns"),
    (lambda row: row[:10] + ["1", "1", "0", "0"] + row[14:], "among its wilderness columns"),
    (lambda row: row[:54] + ["9"], "has class 9, not one of"),
    (lambda row: row[:54], "Covertype, RENYIBOOST_COVTYPE.*number of columns changed"),
])
def test_covertype_rows_that_break_its_codebook_are_refused(tmp_path, change, why) -> None:
    """A row without its soil type was read as soil type 1, and a class 9 as class 0 (the
    label set is public): such a file is refused, naming the row."""
    import gzip

    from renyiboost.datasets import load_covertype

    with gzip.open(SHARED / "covtype.csv.gz", "rt") as source:
        lines = [next(source) for _ in range(4)]
    rows = [line.strip().split(",") for line in lines[1:]]
    rows[1] = change(rows[1])
    bad = tmp_path / "covtype.csv.gz"
    with gzip.open(bad, "wt") as out:
        out.write(lines[0] + "".join(",".join(row) + "\n" for row in rows))
    with pytest.raises(ValueError, match=why):
        load_covertype(str(bad))


def test_covertype_without_a_header_line_keeps_its_first_record(tmp_path) -> None:
    """The first line was always skipped as a header: UCI's ``covtype.data.gz`` has none,
    and its first record was dropped without a word (review L #12)."""
    import gzip

    from renyiboost.datasets import load_covertype

    with gzip.open(SHARED / "covtype.csv.gz", "rt") as source:
        lines = [next(source) for _ in range(4)]
    for name, text in (("with.csv.gz", "".join(lines)), ("without.csv.gz", "".join(lines[1:]))):
        with gzip.open(tmp_path / name, "wt") as out:
            out.write(text)
        assert load_covertype(str(tmp_path / name)).X.shape == (3, 12), name
