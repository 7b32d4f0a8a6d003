"""Multiclass S-GBDT (issue 15, item 5): softmax loss, vector leaves, a public label set.

The privacy tests ask: would this fail if a record were charged for less than the L2 norm
of its clipped gradient vector, if a leaf's per-class noise were smaller than a scalar
sum's, or if the initial class histogram were noised less than its charge says?
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from renyiboost import SGBDTClassifier
from renyiboost.connectors.events import EventParser
from renyiboost.datasets import IMAGE_SEGMENTS_SCHEMA, load_image_segments
from renyiboost.exceptions import InvalidRecord, TestingOnlyWarning
from renyiboost.models.batch import SGBDT
from renyiboost.models.booster import RecordPool, SGBDTBooster, SGBDTParams
from renyiboost.models.losses import SoftmaxLoss, softmax
from renyiboost.randomness import snap
from renyiboost.schema import PublicSchema
from renyiboost.stream.engine import EngineConfig
from renyiboost.stream.sharded import ShardedEngine
from renyiboost.stream.store import SQLiteStore
from renyiboost.validation import RecordValidator

warnings.simplefilter("ignore", TestingOnlyWarning)

LABELS = ["red", "green", "blue"]
SCHEMA = PublicSchema(features={"a": (0.0, 1.0), "b": (0.0, 1.0)}, labels=LABELS)


def _three_bands(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Class by the band of feature a (b is noise): a known answer at large ε."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, (n, 2))
    return X, np.array(LABELS, dtype=object)[np.minimum((X[:, 0] * 3).astype(int), 2)]


def _booster(**params) -> SGBDTBooster:
    given = {"task": "classification", "epsilon": 1.0, "rounds": 20, "depth": 2,
             "sampling_rate": 1.0, "count_share": 0.2, "grad_clip": 0.8} | params
    return SGBDTBooster(SGBDTParams(**given), SCHEMA, seed=3)


# --------------------------------------------------------------------------- the loss


def test_gradient_vectors_are_clipped_in_l2_norm_and_charged_by_it() -> None:
    loss = SoftmaxLoss(3, grad_clip=0.8)
    margin = np.array([[0.0, 0.0, 0.0], [4.0, -1.0, 0.5], [0.1, 0.2, 0.3], [-9.0, 9.0, 0.0]])
    target = np.array([0, 0, 2, 0])
    stats = loss.statistics(margin, target)
    raw = softmax(margin) - np.eye(3)[target]
    norm = np.linalg.norm(raw, axis=1)
    np.testing.assert_allclose(np.linalg.norm(stats.grad, axis=1), np.minimum(norm, 0.8),
                               rtol=1e-12)
    # the direction is kept; b is the clipped norm over the clip (not a coordinate's max)
    np.testing.assert_allclose(stats.grad * norm[:, None] / np.minimum(norm, 0.8)[:, None],
                               raw, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(stats.grad_ratio, np.minimum(norm, 0.8) / 0.8, rtol=1e-12)
    assert norm[3] > 1.4  # a confident miss: ‖p − e_y‖ near √2, clipped to 0.8
    assert stats.grad_ratio[3] == 1.0 and stats.grad_ratio[1] < 0.1


def test_a_record_pays_the_whitened_norm_of_what_it_adds_to_a_vector_leaf() -> None:
    """Brute force: the record adds its clipped vector to the C noisy sums and 1 to the
    noisy count; divided by each coordinate's noise std, the squared L2 norm of that
    change is 2·s²/σ² with the s² the filter charges (LeafRelease.sensitivity2)."""
    booster = _booster()
    release = booster.release
    sum_std = release.sum_noise_std(booster.params.grad_clip)
    count_std = release.count_noise_std(1.0)
    rng = np.random.default_rng(1)
    margin = rng.normal(0, 2, (500, 3))
    target = rng.integers(0, 3, 500)
    stats = booster.loss.statistics(margin, target)
    whitened = (stats.grad**2).sum(axis=1) / sum_std**2 + 1.0 / count_std**2
    s2 = release.sensitivity2(stats.count_ratio, stats.grad_ratio)
    np.testing.assert_allclose(whitened, 2 * s2 / release.sigma**2, rtol=1e-12)


def test_a_round_charges_every_eligible_record_its_own_l2_sensitivity() -> None:
    booster = _booster(grad_clip=1.4)  # ‖g‖ ≤ √2: nobody is clipped
    X, y = _three_bands(400)
    pool = RecordPool.from_arrays(X, booster.loss.scale(SCHEMA.label_codes(y)), n_outputs=3)
    pool.margin[:] = np.random.default_rng(2).normal(0, 1, (400, 3))
    outcome = booster.plan_round(pool)
    stats = booster.loss.statistics(pool.margin, pool.target)
    norm = np.linalg.norm(stats.grad, axis=1)  # recomputed from the gradient vectors
    s2 = booster.params.count_share + (1 - booster.params.count_share) * (
        norm / booster.params.grad_clip) ** 2
    expected = booster.filter.step(pool.spent, s2)
    np.testing.assert_array_equal(outcome.spent, expected.spent)
    assert (outcome.spent > 0).all()
    # a record charged the worst case instead would pay more: the test tells them apart
    worst = booster.filter.step(pool.spent, np.ones(400)).spent
    assert (worst > outcome.spent).sum() > 300


def test_vector_leaves_carry_a_scalar_sums_noise_on_every_class() -> None:
    booster = _booster()
    release = booster.release
    draws = [booster._leaf_values(np.zeros((4, 3)), np.zeros(4), 2, release)[1]
             for _ in range(3000)]
    sums = np.concatenate(draws)  # (12000, 3): the noisy gradient sums of empty leaves
    expected = release.sum_noise_std(booster.params.grad_clip)
    np.testing.assert_allclose(sums.std(axis=0), expected, rtol=0.03)  # 12,000 draws
    assert abs(np.corrcoef(sums.T)[0, 1]) < 0.05  # independent per class


def test_the_initial_class_histogram_is_noised_at_its_charge() -> None:
    """The score is the centred log of a noisy histogram; with one record per class
    and large noise its spread shows the noise std init_sigma/√2 (sensitivity 1)."""
    booster = _booster(init_share=0.05)
    cal = booster.calibration
    X, y = _three_bands(3)
    pool = RecordPool.from_arrays(X, SCHEMA.label_codes(y).astype(float), n_outputs=3)
    expected_std = cal.init_sigma / math.sqrt(2)
    noise = []
    for _ in range(2000):
        before = booster.noise.get_state()
        draw = booster.noise.normal(3, expected_std)
        booster.noise.set_state(before)
        score, spent = booster.initial_score(pool)
        noise.append(draw)
        counts = np.maximum(snap(np.bincount(pool.target.astype(int), minlength=3) + draw,
                                 expected_std), 0.0)
        if counts.sum() > 0:
            log_p = np.log(np.maximum(counts / counts.sum(), 0.01))
            np.testing.assert_allclose(score, log_p - log_p.mean(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(spent, cal.init_charge)
    assert np.std(noise) == pytest.approx(expected_std, rel=0.03)


# --------------------------------------------------------------------------- batch


def test_batch_fit_learns_a_known_answer_and_speaks_labels() -> None:
    X, y = _three_bands(4000)
    model = SGBDT(SCHEMA, seed=1, task="classification", epsilon=4.0).fit(X[:3000], y[:3000])
    assert model.params.hess_clip is None and model.params.grad_clip == 1.0  # the policy
    accuracy = np.mean(model.predict(X[3000:]) == y[3000:])
    assert accuracy > 0.9
    proba = model.predict_proba(X[3000:])
    assert proba.shape == (1000, 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    again = SGBDT.from_json(model.to_json())
    np.testing.assert_allclose(again.predict_proba(X[:100]), model.predict_proba(X[:100]))
    assert set(model.feature_importances()) == {"a", "b"}
    with pytest.raises(ValueError, match="not in the schema's public labels"):
        model.fit(X[:10], np.array(["red"] * 9 + ["purple"], dtype=object))


def test_newton_leaves_and_sharded_engines_are_refused_for_multiclass() -> None:
    with pytest.raises(ValueError, match="hess_clip"):
        _booster(hess_clip=0.1)
    config = EngineConfig.from_defaults(SCHEMA, "classification", 1.0)
    with pytest.raises(ValueError, match="multiclass model trains on one engine"):
        ShardedEngine(config, [None, None])


def test_a_label_set_is_public_and_validated() -> None:
    with pytest.raises(ValueError, match="unique"):
        PublicSchema(features={"a": (0, 1)}, labels=[1, True])
    with pytest.raises(ValueError, match="not both"):
        PublicSchema(features={"a": (0, 1)}, labels=["x", "y"], target_bounds=(0, 1))
    check = RecordValidator(SCHEMA, "classification")
    assert check.label("blue") == 2.0
    with pytest.raises(InvalidRecord, match="not in the public label set"):
        check.label("purple")
    parser = EventParser(check)
    batch = parser.parse_batch(
        [b'{"x": {"a": 0.5}, "y": "green"}', b'{"x": {"a": 0.5}, "y": "purple"}',
         b'{"x": {"a": 0.5}, "y": 1}'], [b"k1", b"k2", b"k3"])
    assert batch.labels == [1.0]
    assert [(i, why.reason) for i, why in batch.rejected] == [(1, "label"), (2, "label")]


# --------------------------------------------------------------------------- River / engine


def _classifier(**kwargs) -> SGBDTClassifier:
    params = {"labels": LABELS, "epsilon": 2.0, "rounds": 10, "depth": 2,
              "train_every": 50, "warmup": 50, "seed": 5} | kwargs
    return SGBDTClassifier(SCHEMA.features, **params)


def test_river_multiclass_learns_and_restarts_from_sqlite_bit_for_bit(tmp_path) -> None:
    X, y = _three_bands(1200, seed=4)
    rows = [{"a": float(a), "b": float(b)} for a, b in X]
    assert set(_classifier().predict_proba_one(rows[0]).values()) == {1 / 3}  # before learning
    path = tmp_path / "state.db"
    first = _classifier(store=SQLiteStore(path, create=True, snapshot_ratio=1e9))
    for i in range(800):
        first.learn_one(rows[i], y[i], key=i % 400)
    first.engine.store.close()  # a crash: every event after the last snapshot is replayed
    again = _classifier(store=str(path))
    straight = _classifier()
    for i in range(800):
        straight.learn_one(rows[i], y[i], key=i % 400)
    assert again.engine.booster.rounds_done == straight.engine.booster.rounds_done > 3
    np.testing.assert_array_equal(again.engine.ensemble.leaves, straight.engine.ensemble.leaves)
    np.testing.assert_array_equal(again.engine.active_pool().margin,
                                  straight.engine.active_pool().margin)
    assert again.engine.active_pool().margin.shape[1] == 3
    assert again.engine.spent_rdp().tolist() == straight.engine.spent_rdp().tolist()
    for i in range(800, 1200):
        again.learn_one(rows[i], y[i], key=i % 400)
        straight.learn_one(rows[i], y[i], key=i % 400)
    probe = rows[:20]
    assert [again.predict_proba_one(x) for x in probe] == \
        [straight.predict_proba_one(x) for x in probe]
    accuracy = np.mean([straight.predict_one(rows[i]) == y[i] for i in range(1200)])
    assert accuracy > 0.6, accuracy  # the prior is 1/3
    release = straight.release()
    assert len(release.init_score) == 3 and len(release.trees[0].leaves[0]) == 3
    assert release.public_schema["labels"] == LABELS


def test_image_segments_prequential_beats_the_majority_class() -> None:
    """River's ImageSegments (7 balanced classes, the majority class 14 %) at ε = 1 with
    the defaults and the size hint."""
    from river import datasets, evaluate, metrics

    model = SGBDTClassifier(IMAGE_SEGMENTS_SCHEMA.features, labels=IMAGE_SEGMENTS_SCHEMA.labels,
                            epsilon=1.0, expected_records=2310, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        accuracy = evaluate.progressive_val_score(datasets.ImageSegments(), model,
                                                  metrics.Accuracy()).get()
    assert accuracy > 0.4, accuracy
    assert len(load_image_segments()) == 2310


def test_the_field_preset_has_multiclass_rows_for_the_multiclass_methods_only(tmp_path) -> None:
    from renyiboost.experiments.field import FieldConfig, run_field

    rows = run_field(FieldConfig(datasets=["image_segments"],
                                 methods=["renyiboost", "dpboost", "dp_mean"], epsilons=[1.0],
                                 repeats=1, out=str(tmp_path)))
    error = {row["method"]: row["error"] for row in rows}
    assert set(error) == {"renyiboost", "dp_mean"}  # DPBoost is binary: no row
    assert error["renyiboost"] < 50.0 < error["dp_mean"]  # 7 balanced classes: prior ≈ 86 %
    assert "| image_segments | renyiboost |" in (tmp_path / "summary.md").read_text()


@pytest.mark.parametrize("learner", ["DPBoost", "DiPriMe", "FedXGBoostLDP", "DPAdditiveBoost"])
def test_the_binary_learners_of_the_field_refuse_three_classes(learner) -> None:
    """The binary learners read a class code as a 0/1 label: DiPriMe took a row of class 2
    as two positives and a negative in its leaf counts, an L1 sensitivity of 3 where its
    Laplace noise is scaled for 1 (a neighbour's probability ratio of e^1.47 at a stated
    ε = 1). A label set of three classes is refused before any record is read; SGBDT, the
    multiclass learner, takes it."""
    from renyiboost.models.additive import DPAdditiveBoost
    from renyiboost.models.diprime import DiPriMe
    from renyiboost.models.dpboost import DPBoost
    from renyiboost.models.fedxgboost import FedXGBoostLDP

    cls = {"DPBoost": DPBoost, "DiPriMe": DiPriMe, "FedXGBoostLDP": FedXGBoostLDP,
           "DPAdditiveBoost": DPAdditiveBoost}[learner]
    schema = PublicSchema(features={"a": (0.0, 1.0)}, labels=["p", "q", "r"])
    X, y = np.array([[0.5], [0.2]]), np.array(["r", "p"], dtype=object)
    with pytest.raises(ValueError, match="binary classifier.*3 classes"):
        cls(schema, seed=0, task="classification", epsilon=1.0).fit(X, y)
    two = PublicSchema(features={"a": (0.0, 1.0)}, labels=["p", "r"])
    cls(two, seed=0, task="classification", epsilon=1.0).fit(X, y)
    SGBDT(schema, seed=0, task="classification", epsilon=1.0, rounds=2).fit(X, y)


def test_a_multiclass_fit_given_depth_and_rounds_buys_no_size() -> None:
    """The multiclass policy fixes the feature choice and the gradient, so a fit given depth
    and rounds reads the size for nothing; it still bought one with 5 % of ε (review W #4).
    A binary fit given the same still buys one (its feature choice needs the size)."""
    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(300, 1))
    three = PublicSchema(features={"a": (0.0, 1.0)}, labels=["x", "y", "z"])
    model = SGBDT(three, task="classification", epsilon=1.0, depth=2, rounds=5)
    model.fit(X, rng.choice(["x", "y", "z"], 300))
    assert model.size_estimate_epsilon is None
    assert model.privacy_guarantee().epsilon == pytest.approx(1.0, abs=1e-6)
    binary = SGBDT(PublicSchema(features={"a": (0.0, 1.0)}), task="classification",
                   epsilon=1.0, depth=2, rounds=5)
    binary.fit(X, rng.integers(0, 2, 300))
    assert binary.size_estimate_epsilon == pytest.approx(0.05)
