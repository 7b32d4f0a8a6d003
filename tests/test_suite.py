"""The development suite: every member loads, deterministically, with the documented shape,
and no raw value of any member lies outside its public bounds or domain.

The loaders clip to the public bounds while encoding, so checking the encoded ``X`` alone
could not catch a violated bound; the raw values are therefore counted with
``PublicSchema.encode_columns(..., outside=...)``. Reading the rows to check bounds is fine
here because the suite is public development data; the bounds themselves were written first.
"""

from __future__ import annotations

import csv
import gzip
import io
from functools import cache
from importlib import resources

import numpy as np
import pytest

from renyiboost import datasets
from renyiboost.experiments.suite import (
    COVERTYPE_SAMPLE,
    RAW_READERS,
    SUITE,
    VALIDATION,
    VALIDATION_READERS,
    SuiteSet,
    covertype_path,
    load_suite_set,
)

# name: (rows, features, task, natural_order)
EXPECTED = {
    "abalone": (4177, 8, "regression", False),
    "adult": (30162, 14, "classification", False),
    "california": (20640, 8, "regression", False),
    "elec2": (45312, 6, "classification", True),
    "covertype": (COVERTYPE_SAMPLE, 12, "classification", False),
    "phishing": (1250, 9, "classification", True),
    "bananas": (5300, 2, "classification", False),
    "trump_approval": (1001, 6, "regression", True),
    "chick_weights": (578, 2, "regression", True),
    "agrawal": (20000, 9, "classification", True),
    "friedman": (20000, 10, "regression", True),
    "sea": (20000, 3, "classification", True),
    "breast_cancer": (569, 30, "classification", False),
}


#: The validation sets (chose no constant): name: (rows, features, task).
VALIDATION_EXPECTED = {
    "hyperplane": (10_000, 10, "classification"),
    "random_rbf": (5_000, 10, "classification"),
    "mixed": (3_000, 4, "classification"),
    "planes_2d": (3_000, 10, "regression"),
    "mv": (10_000, 10, "regression"),
}


def _skip_if_unavailable(name: str) -> None:
    if name == "covertype" and not covertype_path().is_file():
        pytest.skip(f"Covertype file not found at {covertype_path()}")


@cache
def _loaded(name: str) -> tuple[SuiteSet, np.ndarray, np.ndarray]:
    return load_suite_set(name)


def _outside(schema, columns) -> dict[str, int]:
    counts = np.zeros(schema.n_features, dtype=np.int64)
    schema.encode_columns(columns, outside=counts)
    return {n: int(c) for n, c in zip(schema.names, counts, strict=True) if c}


def test_suite_members_in_order_and_described() -> None:
    assert list(SUITE) == list(EXPECTED)
    for name, member in SUITE.items():
        assert member.name == name
        assert member.task in ("classification", "regression")
        assert (member.schema.target_bounds is not None) == (member.task == "regression")
        assert len(member.bound_sources) > 100, name
        assert member.natural_order == EXPECTED[name][3]


@pytest.mark.parametrize("name", [*EXPECTED, *VALIDATION_EXPECTED])
def test_member_loads_inside_its_public_schema(name: str) -> None:
    _skip_if_unavailable(name)
    member, X, y = _loaded(name)
    rows, cols, task = {**EXPECTED, **VALIDATION_EXPECTED}[name][:3]
    schema = member.schema
    assert member.task == task
    assert X.shape == (rows, cols) == (rows, schema.n_features)
    assert y.shape == (rows,) and y.dtype == float and np.isfinite(y).all()
    assert not np.isnan(X).any()
    num, cat = ~schema.is_categorical, schema.is_categorical
    assert np.all(X[:, num] >= schema.lower[num]) and np.all(X[:, num] <= schema.upper[num])
    codes = X[:, cat]
    assert np.all(codes == np.round(codes)) and np.all(codes >= 0)
    assert np.all(codes < schema.n_categories[cat]), "a category fell into 'other'"
    if task == "classification":
        assert set(np.unique(y)) == {0.0, 1.0}
    else:
        lo, hi = schema.target_bounds
        assert np.all((y >= lo) & (y <= hi))


@pytest.mark.parametrize("name", [*RAW_READERS, *VALIDATION_READERS])
def test_raw_values_respect_the_documented_bounds(name: str) -> None:
    schema = {**SUITE, **VALIDATION}[name].schema
    columns, y = {**RAW_READERS, **VALIDATION_READERS}[name]()
    assert set(columns) == set(schema.names)
    assert _outside(schema, columns) == {}
    if schema.target_bounds is not None:
        lo, hi = schema.target_bounds
        assert np.all((y >= lo) & (y <= hi))


def _bundled_rows(filename: str, *, header: bool) -> list[list[str]]:
    raw = resources.files(datasets).joinpath("data", filename).read_bytes()
    rows = [r for r in csv.reader(io.StringIO(gzip.decompress(raw).decode())) if r]
    return rows[1:] if header else rows


#: Raw values the bundled schemas (owned by renyiboost.datasets, reused unchanged) clip, as
#: stated in the sets' bound_sources: abalone's 226 mm height is a known recording error (and
#: one 0.515); California's income top-code is stored as 15.0001 and its per-household
#: averages explode in resort and group-quarters block groups. Pinned so a change is noticed.
BUNDLED_CLIPPED = {
    "abalone": {"height": 2},
    "adult": {},
    "california": {"MedInc": 49, "AveRooms": 69, "AveBedrms": 45, "AveOccup": 37},
    "elec2": {},
}


@pytest.mark.parametrize(
    ("name", "filename", "header"),
    [("abalone", "abalone.csv.gz", True), ("adult", "adult.data.gz", False),
     ("california", "california_housing.csv.gz", True), ("elec2", "elec2.csv.gz", True)],
)
def test_bundled_raw_values_outside_the_bounds_are_the_known_ones(name, filename,
                                                                  header) -> None:
    schema = SUITE[name].schema
    rows = _bundled_rows(filename, header=header)
    if name == "adult":  # the loader's rule: complete rows only
        rows = [r for r in rows if len(r) == 15 and not any(v.strip() == "?" for v in r)]
    columns = {
        n: ([r[j].strip() for r in rows] if isinstance(spec, list)
            else np.array([float(r[j]) for r in rows]))
        for j, (n, spec) in enumerate(schema.features.items())
    }
    assert _outside(schema, columns) == BUNDLED_CLIPPED[name]
    if schema.target_bounds is not None:
        y = np.array([float(r[schema.n_features]) for r in rows])
        lo, hi = schema.target_bounds
        assert np.all((y >= lo) & (y <= hi))


def test_covertype_raw_values_respect_the_codebook() -> None:
    _skip_if_unavailable("covertype")
    pd = pytest.importorskip("pandas")
    table = pd.read_csv(covertype_path()).to_numpy(dtype=float)  # all 581,012 rows
    schema = SUITE["covertype"].schema
    numeric = dict(zip(schema.names[:10], table[:, :10].T, strict=True))
    assert _outside(schema, numeric) == {}
    # exactly one wilderness area and one soil type per row, so argmax is the category
    assert np.all(table[:, 10:14].sum(axis=1) == 1) and np.all(table[:, 14:54].sum(axis=1) == 1)
    assert set(np.unique(table[:, 54])) <= set(range(1, 8))


def test_loading_is_deterministic() -> None:
    for name in ("agrawal", "bananas", "breast_cancer"):
        _, X1, y1 = load_suite_set(name)
        _, X2, y2 = _loaded(name)
        np.testing.assert_array_equal(X1, X2)
        np.testing.assert_array_equal(y1, y2)


def test_generator_keys_are_mapped_by_name() -> None:
    # river's Friedman(seed=42) starts with x[0] = 0.6394..., x[1] = 0.0250... (its docstring)
    from river.datasets import synth

    x, target = next(iter(synth.Friedman(seed=42)))
    _, X, y = _loaded("friedman")
    np.testing.assert_allclose(X[0], [x[j] for j in range(10)])
    assert y[0] == pytest.approx(target)
    x, label = next(iter(synth.SEA(variant=0, seed=42)))
    _, X, y = _loaded("sea")
    np.testing.assert_allclose(X[0], [x[0], x[1], x[2]])
    assert y[0] == float(label)


def test_validation_sets_are_described_and_apart_from_the_development_suite() -> None:
    # a validation set never chose a constant, so it must not also be a development set
    assert list(VALIDATION) == list(VALIDATION_EXPECTED)
    assert not set(VALIDATION) & set(SUITE)
    for name, member in VALIDATION.items():
        assert member.name == name and not member.natural_order
        assert (member.schema.target_bounds is not None) == (member.task == "regression")
        assert len(member.bound_sources) > 100, name
    # river's keys are mapped by name: Planes2D's first row, from the generator itself
    from river.datasets import synth

    x, target = next(iter(synth.Planes2D(seed=42)))
    _, X, y = _loaded("planes_2d")
    np.testing.assert_allclose(X[0], [x[j] for j in range(1, 11)])
    assert y[0] == pytest.approx(target)


def test_chick_identifier_is_not_a_feature() -> None:
    assert SUITE["chick_weights"].schema.names == ["time", "diet"]


def test_unknown_suite_set_names_the_choices() -> None:
    with pytest.raises(ValueError, match="abalone"):
        load_suite_set("iris")
