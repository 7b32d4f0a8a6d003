"""ONNX export (issue 16, item 6): every export runs in onnxruntime and gives the model's own
predictions; the file carries the public release and nothing else."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from renyiboost import SGBDTClassifier, SGBDTRegressor
from renyiboost.exceptions import TestingOnlyWarning
from renyiboost.export import to_onnx
from renyiboost.models.batch import SGBDT
from renyiboost.schema import PublicSchema

ort = pytest.importorskip("onnxruntime")
warnings.simplefilter("ignore", TestingOnlyWarning)

FEATURES = {"a": (0.0, 1.0), "b": (-5.0, 5.0), "c": ["x", "y", "z"]}


def _rows(n: int, seed: int = 0) -> np.ndarray:
    """Encoded rows with categorical codes, the "other" code, values on thresholds' scale
    and missing values in every column."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.uniform(0, 1, n), rng.uniform(-5, 5, n),
                         rng.integers(0, 4, n).astype(float)])
    X[rng.uniform(size=(n, 3)) < 0.1] = np.nan
    return X


def _target(X: np.ndarray) -> np.ndarray:
    return np.nan_to_num(2 * X[:, 0] + (X[:, 2] == 1) + 0.1 * X[:, 1], nan=0.5)


def _session(release) -> object:
    return ort.InferenceSession(to_onnx(release).SerializeToString())


def test_a_regression_export_predicts_what_the_model_predicts() -> None:
    schema = PublicSchema(features=FEATURES, target_bounds=(-1.0, 4.0))
    X = _rows(3000)
    model = SGBDT(schema, seed=0, epsilon=1.0).fit(X[:2000], _target(X[:2000]))
    assert model.params.depth >= 2 and not model.params.split_candidates  # continuous cuts
    assert model.params.smoothing > 0  # the policy's answers: every tree once an offset
    assert model.smoothing_spans_ is not None  # over the split grid's spans
    (out,) = _session(model.release()).run(None, {"X": X[2000:]})
    assert out.shape == (1000, 1)
    np.testing.assert_allclose(out[:, 0], model.predict(X[2000:]), rtol=1e-6, atol=1e-5)
    unsmoothed = model.release().model_copy(
        update={"params": model.params.model_dump() | {"smoothing": 0.0}})
    plain = SGBDT.from_json(unsmoothed.model_dump_json())
    (raw,) = _session(unsmoothed).run(None, {"X": X[2000:]})
    np.testing.assert_allclose(raw[:, 0], plain.predict(X[2000:]), rtol=1e-6, atol=1e-5)
    assert np.abs(raw[:, 0] - out[:, 0]).max() > 1e-3  # the two exports differ


def test_a_regression_export_keeps_the_precision_of_targets_far_from_zero() -> None:
    """Catches: the target scaled in float32 (bounds (1.7e9, 1.7e9 + 100) were off by up
    to 64, most of the range)."""
    lo = 1.7e9
    schema = PublicSchema(features=FEATURES, target_bounds=(lo, lo + 100.0))
    X = _rows(1500)
    model = SGBDT(schema, seed=0, epsilon=1.0, rounds=5, depth=2).fit(
        X[:1000], lo + 20 * np.clip(_target(X[:1000]), 0.0, 5.0))
    (out,) = _session(model.release()).run(None, {"X": X[1000:]})
    assert out.dtype == np.float64
    np.testing.assert_allclose(out[:, 0], model.predict(X[1000:]), rtol=0, atol=1e-3)


def test_a_release_that_does_not_fit_its_schema_is_refused_whole() -> None:
    """A tree of the wrong shape or testing a feature the schema lacks, trees out of order,
    an initial score of the wrong length and an answer map on a regression model are
    refused when a release is read (a follower skips such a message as not a release)."""
    from pydantic import ValidationError

    from renyiboost.release import ModelRelease

    schema = PublicSchema(features=FEATURES, target_bounds=(-1.0, 4.0))
    X = _rows(600)
    good = json.loads(SGBDT(schema, seed=0, epsilon=1.0, rounds=3, depth=2).fit(
        X, _target(X)).to_json())
    ModelRelease.model_validate(good)
    tree = good["trees"][0]
    for change, message in (
            ({"trees": [tree | {"leaves": tree["leaves"][:-1]}]}, "not a tree of depth 2"),
            ({"trees": [tree | {"features": [3, 0, 0]}]}, "outside the schema's 3"),
            ({"trees": good["trees"][::-1]}, "order of their rounds"),
            ({"init_score": [0.0, 0.0]}, "init_score must have 1"),
            ({"answer_map": [1.0, 0.0]}, "binary classifier's release only"),
            ({"trees": [tree | {"features": [2**70, 0, 0]}]}, "outside the schema's 3"),
            ({"trees": [tree | {"leaves": [float("nan"), *tree["leaves"][1:]]}]},
             "must be finite numbers"),
            ({"version": 2}, "version 2 holds rounds 0 to 0 at most"),
            ({"version": -1, "trees": []}, "version must be >= 0"),
            # a NaN span answered as if the feature were not there; a short list, too
            ({"smoothing_spans": [float("nan"), 1.0, 1.0]}, "positive finite"),
            ({"smoothing_spans": [1.0]}, "smoothing_spans must be 3"),
            ({"smoothing_spans": [0.0, 1.0, 1.0]}, "positive finite"),
            # review P: a follower half-applied a negative cap and then served it; a depth
            # past the learners' cap; trees of one depth under params of another; a text
            # without the format; a misspelt schema field dropped without a word
            ({"max_trees": -1}, "max_trees must be None or >= 1"),
            ({"depth": 13, "params": good["params"] | {"depth": 13}}, r"depth must be in"),
            ({"params": good["params"] | {"depth": 5}}, "params.depth is 5"),
            ({"params": good["params"] | {"task": "classification"}}, "params.task is"),
            ({"format": None}, "format"),
            ({"public_schema": good["public_schema"] | {"label": ["p", "q"]}},
             "Extra inputs are not permitted")):
        with pytest.raises(ValidationError, match=message):
            ModelRelease.model_validate(good | change)
    without_format = {k: v for k, v in good.items() if k != "format"}
    with pytest.raises(ValidationError, match="format"):
        ModelRelease.model_validate(without_format)
    # whole or not is counted: a list of the rounds a version claims was as long as it
    import tracemalloc

    claims = ModelRelease.model_validate(good | {"version": 10**7})
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="it is part of the model"):
            claims.check_whole()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100_000, peak


def test_binary_and_multiclass_exports_give_the_models_labels_and_probabilities() -> None:
    X = _rows(3000, seed=1)
    signal = _target(X)
    for labels, y in ((None, (signal > 1.2).astype(float)),
                      (["no", "yes"], np.where(signal > 1.2, "yes", "no")),
                      (["low", "mid", "high"],
                       np.array(["low", "mid", "high"])[np.digitize(signal, [0.8, 1.6])])):
        schema = PublicSchema(features=FEATURES, labels=labels)
        model = SGBDT(schema, seed=2, task="classification", epsilon=2.0).fit(
            X[:2000], y[:2000])
        label, proba = _session(model.release()).run(None, {"X": X[2000:]})
        np.testing.assert_allclose(proba, model.predict_proba(X[2000:]), atol=1e-6)
        assert (np.asarray(label) == model.predict(X[2000:])).all()


def test_a_stream_release_with_dropped_trees_exports_the_committed_model() -> None:
    """A River estimator's release (max_trees: the oldest trees dropped) and a multiclass
    one: the export predicts what predict_one answers."""
    rng = np.random.default_rng(3)
    rows = [{"a": float(a), "b": float(b), "c": ["x", "y", "z"][c]} for a, b, c in
            zip(rng.uniform(0, 1, 600), rng.uniform(-5, 5, 600), rng.integers(0, 3, 600),
                strict=True)]
    regressor = SGBDTRegressor(FEATURES, target_bounds=(-1.0, 4.0), epsilon=1.0, seed=4,
                               rounds=12, depth=3, train_every=40, warmup=40, max_trees=5)
    classifier = SGBDTClassifier(FEATURES, labels=["p", "q", "r"], epsilon=1.0, seed=4,
                                 rounds=12, depth=3, train_every=40, warmup=40)
    for i, x in enumerate(rows):
        regressor.learn_one(x, float(np.clip(2 * x["a"] + (x["c"] == "y"), -1, 4)), key=i)
        classifier.learn_one(x, "pqr"[int(x["a"] * 3)], key=i)
    release = regressor.release()
    assert len(release.trees) == 5 < regressor.engine.booster.rounds_done
    encoded = np.vstack([regressor.engine.validator.features(x) for x in rows[:100]])
    (out,) = _session(release).run(None, {"X": encoded})
    np.testing.assert_allclose(out[:, 0], [regressor.predict_one(x) for x in rows[:100]],
                               rtol=1e-6, atol=1e-5)
    label, proba = _session(classifier.release()).run(None, {"X": encoded})
    expected = [classifier.predict_proba_one(x) for x in rows[:100]]
    np.testing.assert_allclose(proba, [[p[c] for c in "pqr"] for p in expected], atol=1e-6)
    assert list(label) == [classifier.predict_one(x) for x in rows[:100]]
    # a model-topic message is one version's part: exported as the model it answered
    # with one tree of many under its version's name; refused, as from_json refuses it
    version = regressor.engine.release_version
    part = regressor.engine.release(after=version - 1, upto=version)
    assert part.version == version and len(part.trees) == 1
    with pytest.raises(ValueError, match="it is part of the model"):
        to_onnx(part)
    with pytest.raises(ValueError, match="it is part of the model"):
        SGBDT.from_json(part.model_dump_json())
    assert release.check_whole() is release
    # read and written again, it is the same release: its version, rounds, store and
    # name were renumbered as a batch fit's (review P #2)
    again = SGBDT.from_json(release.model_dump_json())
    assert again.release() == release and again.to_json() == release.model_dump_json()
    assert again.release("other").model == "other"
    np.testing.assert_allclose(again.predict(encoded[:20]),
                               [regressor.predict_one(x) for x in rows[:20]], atol=1e-9)
    # a seeded model says it is for testing only where a reader of the file looks first
    assert "SEEDED FOR TESTING ONLY" in to_onnx(release).doc_string
    production = SGBDT(PublicSchema(features={"a": (0.0, 1.0)}, target_bounds=(0.0, 1.0)),
                       epsilon=1.0, rounds=2).fit(np.array([[0.2], [0.7]]), [0.2, 0.7])
    assert "TESTING" not in to_onnx(production.release()).doc_string


def test_the_file_holds_the_public_release_only() -> None:
    """Metadata: the release's public fields (guarantee, schema, identity); nothing of the
    operator channel (no count of keys or records, no budget of anybody)."""
    schema = PublicSchema(features=FEATURES, target_bounds=(-1.0, 4.0))
    X = _rows(500)
    model = SGBDT(schema, seed=0, epsilon=1.0, rounds=4, depth=2).fit(X, _target(X))
    release = model.release()
    exported = to_onnx(release)
    props = {p.key: p.value for p in exported.metadata_props}
    assert set(props) == {"renyiboost.format", "model", "version", "store_id", "epoch",
                          "task", "public_schema", "privacy_guarantee"}
    assert json.loads(props["privacy_guarantee"]) == release.guarantee.model_dump(mode="json")
    assert PublicSchema.model_validate_json(props["public_schema"]) == schema
    text = exported.SerializeToString()
    assert b"eligible" not in text and b"sampled" not in text and b"spent" not in text


def test_mixed_label_types_are_refused() -> None:
    schema = PublicSchema(features=FEATURES, labels=["a", 1, "c"])
    X = _rows(300)
    model = SGBDT(schema, seed=0, task="classification", epsilon=1.0, rounds=2, depth=1).fit(
        X, np.array(["a", 1, "c"] * 100, dtype=object))
    with pytest.raises(ValueError, match="mixes them"):
        to_onnx(model.release())


def test_early_stream_releases_export_with_the_engines_labels() -> None:
    """A stream on a positive base rate: its release of the initial score alone (no tree)
    once made an operator without nodes, and its first trees, whose leaves were all
    positive, took onnxruntime's branch that labels by ``score > 0.5``: labels that
    contradicted their own probabilities on every row. Both export now, and answer as
    ``predict_one`` at every version."""
    rng = np.random.default_rng(0)
    features = {"a": (0.0, 1.0), "b": (0.0, 1.0)}
    model = SGBDTClassifier(features, epsilon=1.0, expected_records=3000, seed=0, warmup=50,
                            train_every=100, depth=2, recalibration=None)
    X = np.random.default_rng(1).uniform(0, 1, (200, 2))
    rows = [{"a": a, "b": b} for a, b in X]
    seen_all_positive = False
    for i in range(450):
        model.learn_one({"a": rng.uniform(), "b": rng.uniform()}, bool(rng.uniform() < 0.85),
                        key=i)
        if i % 50 == 49:
            release = model.release()
            leaves = np.concatenate([tree.leaves for tree in release.trees] or [[0.0]])
            seen_all_positive |= bool(release.trees) and bool((leaves > 0).all())
            label, proba = _session(release).run(None, {"X": X})
            expected = [model.predict_proba_one(x)[True] for x in rows]
            np.testing.assert_allclose(proba[:, 1], expected, atol=1e-6)
            assert list(label) == [model.predict_one(x) for x in rows]
    assert seen_all_positive  # the case that once failed was reached


@pytest.mark.parametrize("seed", range(5))
def test_smoothed_thresholds_test_as_the_engine_adds_its_offsets(seed: int) -> None:
    """ONNX tests ``x < v`` where the engine tests ``x + s < t`` in floating point; ``v``
    must be the first double that reaches ``t``, or inputs a step from ``t − s`` take the
    other branch (a whole leaf over the offsets apart)."""
    from renyiboost.export import shifted_thresholds

    rng = np.random.default_rng(seed)
    t = rng.uniform(-10, 10, 2000)
    s = rng.uniform(-1, 1, 2000) * 10.0 ** rng.integers(-6, 1, 2000)
    v = shifted_thresholds(t, s)
    for x in (v, np.nextafter(v, -np.inf), np.nextafter(v, np.inf), t - s,
              np.nextafter(t - s, -np.inf), np.nextafter(t - s, np.inf)):
        np.testing.assert_array_equal(x < v, x + s < t)


def test_values_outside_the_bounds_are_clipped_in_the_graph() -> None:
    """The graph once trusted its input to be clipped; with smoothing an unclipped value is
    moved by the offsets across other thresholds (0.924 against the engine's 0.868 at 1.2
    on bounds (0, 1)). Unknown category codes still take "other", NaN stays missing."""
    schema = PublicSchema(features=FEATURES, target_bounds=(-1.0, 4.0))
    X = _rows(3000, seed=5)
    model = SGBDT(schema, seed=0, epsilon=1.0).fit(X[:2000], _target(X[:2000]))
    wide = X[2000:].copy()
    wide[:, 0] = wide[:, 0] * 3.0 - 1.0  # bounds (0, 1): a third below, a third above
    wide[:, 1] = wide[:, 1] * 2.0  # bounds (−5, 5)
    wide[::7, 2] = 9.0  # not a code: Python refuses it, a graph cannot and answers "other"
    (out,) = _session(model.release()).run(None, {"X": wide})
    with pytest.raises(ValueError, match="not a code"):
        model.predict(wide)
    other = wide.copy()
    other[::7, 2] = 3.0  # the code of "other"
    np.testing.assert_allclose(out[:, 0], model.predict(other), rtol=1e-6, atol=1e-5)


def test_a_batch_release_whose_guarantee_claims_less_than_its_params_is_refused() -> None:
    """A release whose params spend ε = 50 under a stated guarantee of ε = 1 was read, and
    written again as ε = 1 (review P #3). A batch fit's guarantee follows from its params;
    a private selection's larger total is kept."""
    schema = PublicSchema(features=FEATURES, target_bounds=(-1.0, 4.0))
    X = _rows(600)
    good = json.loads(SGBDT(schema, seed=0, epsilon=1.0, rounds=3, depth=2).fit(
        X, _target(X)).to_json())
    assert SGBDT.from_json(json.dumps(good)).privacy_guarantee().epsilon == pytest.approx(1.0)
    for change in ({"params": good["params"] | {"epsilon": 50.0}},
                   {"guarantee": good["guarantee"] | {"sigma": good["guarantee"]["sigma"] / 2}},
                   {"guarantee": good["guarantee"] | {"epsilon": 0.5}},
                   {"guarantee": good["guarantee"] | {"private": False, "epsilon": None}}):
        with pytest.raises(ValueError, match="guarantee"):
            SGBDT.from_json(json.dumps(good | change))
    # and not by claiming a stream's unit, or a negative size estimate (review D6)
    for change in ({"store_id": "x", "epoch": 1, "params": good["params"] | {"epsilon": 50.0}},
                   {"guarantee": good["guarantee"] | {"size_estimate_epsilon": -4.0}}):
        with pytest.raises(ValueError, match="guarantee|greater than or equal to 0"):
            SGBDT.from_json(json.dumps(good | change))
    larger = good["guarantee"] | {"epsilon": 1.5, "budget_rdp": good["guarantee"][
        "budget_rdp"] * 2}
    assert SGBDT.from_json(json.dumps(good | {"guarantee": larger})).privacy_guarantee(
        ).epsilon == 1.5
