"""The private split grid (``grid_share``): its price, its noise, the trees it shapes, and a
release that keeps it."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from renyiboost import SGBDTClassifier
from renyiboost.accounting import SplitGridRelease, calibrate, gaussian_rdp
from renyiboost.accounting.calibration import BUDGET_SLACK
from renyiboost.accounting.filter import charged_many
from renyiboost.exceptions import TestingOnlyWarning
from renyiboost.models.batch import SGBDT
from renyiboost.models.booster import RecordPool, SGBDTBooster, SGBDTParams
from renyiboost.models.defaults import FINISH_GRID_SHARE
from renyiboost.models.grid import GRID_BINS, GRID_UNIFORM_SHARE, QuantileMap
from renyiboost.models.trees import RandomTreeGrower
from renyiboost.randomness import noise_source
from renyiboost.schema import PublicSchema
from renyiboost.stream.engine import EngineConfig, StreamEngine, end_grid_charge
from renyiboost.stream.store import GridEvent, SQLiteStore

warnings.simplefilter("ignore", TestingOnlyWarning)

#: Two numeric features whose records fill the first twentieth of a wide public range (as
#: a documented bound far above the usual values), and a category.
SCHEMA = PublicSchema(features={"a": (0.0, 1000.0), "b": (0.0, 1000.0), "c": ["x", "y"]})


def _skewed(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Values in [0, 50) of [0, 1000]; the label a step at a = 25 and a smaller one in b."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.uniform(0, 50, n), rng.uniform(0, 50, n),
                         rng.integers(0, 2, n).astype(float)])
    logit = 3.0 * (X[:, 0] > 25) - 1.5 + 1.0 * (X[:, 1] > 10)
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-logit))).astype(float)
    return X, y


def test_the_grid_takes_its_share_of_the_budget_and_the_trees_the_rest() -> None:
    kwargs = {"epsilon": 1.0, "delta": 1e-6, "rounds": 50, "sampling_rate": 1.0,
              "count_share": 0.1, "init_share": 0.05, "order": 30}
    plain = calibrate(**kwargs)
    gridded = calibrate(**kwargs, grid_share=0.1)
    # the same ε at the same order: the same budget, split three ways
    assert gridded.budget_rdp == pytest.approx(plain.budget_rdp, rel=1e-8)
    budget = gridded.budget_rdp / (1 + BUDGET_SLACK)
    assert gridded.grid_charge == pytest.approx(0.10 * budget, rel=1e-9)
    assert gridded.init_charge == pytest.approx(0.05 * budget, rel=1e-9)
    assert gridded.rounds * gridded.round_charge == pytest.approx(0.85 * budget, rel=1e-9)
    assert gridded.sigma > plain.sigma  # the trees pay for the grid with noise
    assert gridded.epsilon <= 1.0
    # a calibration without a grid dumps as before (stores pin its fingerprint)
    assert "grid_share" not in plain.model_dump() and "grid_charge" not in plain.model_dump()
    assert gridded.model_dump()["grid_charge"] == gridded.grid_charge
    with pytest.raises(ValueError, match="grid_share must be in"):
        calibrate(epsilon=1.0, delta=1e-6, rounds=5, init_share=0.5, grid_share=0.5)


def test_the_histograms_noise_is_the_gaussian_their_charge_pays_for() -> None:
    """Four histograms move by √4 = 2 in L2 when a record comes or goes: σ = 2·z, z the
    noise multiplier whose Gaussian RDP at α̂ is the charge (Mironov 2017, Prop. 7)."""
    release = SplitGridRelease(charge=0.02, order=25, n_histograms=4)
    assert release.count_noise_std == pytest.approx(2 * math.sqrt(25 / 0.04))
    assert gaussian_rdp(release.count_noise_std / 2, [25])[0] == pytest.approx(0.02)
    # twice the histograms at the same charge: √2 times the noise
    wider = SplitGridRelease(charge=0.02, order=25, n_histograms=8)
    assert wider.count_noise_std == pytest.approx(math.sqrt(2) * release.count_noise_std)


class _RecordingNoise:
    """A seeded source that records the size and std of every Gaussian release."""

    def __init__(self) -> None:
        self.inner = noise_source(0)
        self.normal_stds: list[tuple[int, float]] = []

    def add_gaussian(self, values: np.ndarray, std: float = 1.0) -> np.ndarray:
        self.normal_stds.append((np.size(values), float(std)))
        return self.inner.add_gaussian(values, std)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def test_every_record_pays_the_grid_and_every_count_gets_its_noise() -> None:
    """Would fail if a record were under-charged for the histograms, if their noise were
    smaller than the charge pays for, or if a categorical feature got a histogram."""
    X, y = _skewed(2000, 0)
    params = SGBDTParams(task="classification", epsilon=1.0, rounds=20, depth=3,
                         sampling_rate=1.0, hess_clip=0.1, init_share=0.0, grid_share=0.1)
    noise = _RecordingNoise()
    booster = SGBDTBooster(params, SCHEMA, seed=0, noise=noise)
    pool = RecordPool.from_arrays(X, booster.loss.scale(y))
    spent = booster.release_split_grid(pool)
    cal = booster.calibration
    assert cal.grid_charge > 0
    np.testing.assert_array_equal(spent, np.full(2000, cal.grid_charge))
    expected = SplitGridRelease(cal.grid_charge, cal.order, 2).count_noise_std
    assert noise.normal_stds == [(2 * GRID_BINS, pytest.approx(expected))]
    grid = booster.grower.quantile_map
    assert grid is not None and grid.mapped.tolist() == [True, True, False]


def test_a_fit_with_a_grid_never_spends_past_the_budget() -> None:
    X, y = _skewed(3000, 1)
    model = SGBDT(SCHEMA, seed=0, task="classification", epsilon=1.0, expected_records=3000,
                  grid_share=0.05).fit(X, y)
    cal = model.booster.calibration
    assert cal.grid_share == 0.05 and cal.grid_charge > 0
    assert model.privacy_guarantee().epsilon <= 1.0
    assert model.booster.filter.budget_rdp == cal.budget_rdp


def test_thresholds_follow_the_data_and_categories_keep_their_codes() -> None:
    X, _ = _skewed(5000, 2)
    grid = QuantileMap.release(SCHEMA, X, 0.0, noise_source(0))
    public = RandomTreeGrower(SCHEMA, depth=4, feature_selection="random",
                              split_candidates=32)
    gridded = RandomTreeGrower(SCHEMA, depth=4, feature_selection="random",
                               split_candidates=32, quantile_map=grid)
    inside = {}
    for name, grower in (("public", public), ("grid", gridded)):
        rng = noise_source(1)
        found = []
        for t in range(200):
            features, thresholds = grower.grow(t, rng)
            numeric = features < 2
            found.append(thresholds[numeric] < 50)
            codes = thresholds[~numeric]
            assert set(codes.tolist()) <= {0.0, 1.0}
        inside[name] = float(np.concatenate(found).mean())
    # 1/20 of the public candidates lie among the data; with the grid, all but the
    # uniform share's (a fifth) and the ones that the ancestors narrowed outside
    assert inside["public"] < 0.1
    assert inside["grid"] > 1 - GRID_UNIFORM_SHARE - 0.1


def test_the_grid_learns_where_the_public_range_is_mostly_empty() -> None:
    """The steps at a = 25 and b = 10 lie where 1 in 20 public candidates fall: with the
    grid the held-out AUC is higher on every seed."""
    X, y = _skewed(6000, 3)
    gains = []
    for seed in range(3):
        scores = []
        for grid_share in (0.0, 0.05):
            model = SGBDT(SCHEMA, seed=seed, task="classification", epsilon=1.0,
                          expected_records=4000, grid_share=grid_share).fit(X[:4000], y[:4000])
            scores.append(roc_auc_score(y[4000:], model.predict_proba(X[4000:])[:, 1]))
        gains.append(scores[1] - scores[0])
    assert min(gains) > 0.01, gains


def test_a_release_keeps_the_grids_smoothing_and_answers_the_same() -> None:
    X, y = _skewed(3000, 4)
    model = SGBDT(SCHEMA, seed=0, task="classification", epsilon=1.0, expected_records=3000,
                  grid_share=0.05).fit(X, y)
    spans = model.smoothing_spans_
    assert spans is not None and spans[0] < 100 and spans[1] < 100  # the data fill 50
    text = model.to_json()
    assert json.loads(text)["smoothing_spans"] == spans
    loaded = SGBDT.from_json(text)
    np.testing.assert_allclose(loaded.predict_proba(X[:500]), model.predict_proba(X[:500]))
    plain = SGBDT(SCHEMA, seed=0, task="classification", epsilon=1.0,
                  expected_records=3000, grid_share=0.0).fit(X, y)
    assert "smoothing_spans" not in json.loads(plain.to_json())  # as before the grid


def test_options_that_cannot_hold_a_grid_are_refused() -> None:
    with pytest.raises(ValueError, match="init_share \\+ grid_share must be < 1"):
        SGBDTParams(init_share=0.5, grid_share=0.5)
    categories = PublicSchema(features={"c": ["x", "y"]})
    with pytest.raises(ValueError, match="has none, so leave grid_share at 0"):
        SGBDTBooster(SGBDTParams(task="classification", grid_share=0.05), categories)
    with pytest.raises(ValueError, match="without a hint leave grid_share at 0"):
        EngineConfig.from_defaults(SCHEMA, "classification", 1.0, grid_share=0.05)
    with pytest.raises(ValueError, match="without a hint leave grid_share at 0"):
        SGBDTClassifier(dict(SCHEMA.features), epsilon=1.0, grid_share=0.05).learn_one(
            {"a": 1.0, "b": 2.0, "c": "x"}, True)


def test_a_missing_value_counts_in_no_bin_and_few_values_keep_the_public_grid() -> None:
    X, _ = _skewed(2000, 5)
    holes = X.copy()
    holes[:500, 0] = np.nan
    exact = QuantileMap.release(SCHEMA, X[500:], 0.0, noise_source(0))
    with_holes = QuantileMap.release(SCHEMA, holes, 0.0, noise_source(0))
    # feature a's histogram is that of the 1,500 rows that have it
    np.testing.assert_allclose(with_holes.cdf[0], exact.cdf[0])
    # three distinct values, each alone in its bin: the public grid
    three = np.column_stack([np.tile([0.0, 500.0, 1000.0], 700)[:2000], X[:, 1], X[:, 2]])
    grid = QuantileMap.release(SCHEMA, three, 0.0, noise_source(0))
    assert grid.mapped.tolist() == [False, True, False]
    # an unmapped feature's thresholds are not moved (the grower draws them on its bounds)
    np.testing.assert_allclose(grid.values(np.array([0, 0]), np.array([250.0, 500.0])),
                               [250.0, 500.0])


def test_the_policy_buys_a_grid_for_batch_fits_over_numeric_features_only() -> None:
    X, y = _skewed(2000, 6)
    assert SGBDT(SCHEMA, task="classification", epsilon=1.0,
                 expected_records=2000).params.grid_share == 0.05
    assert EngineConfig.from_defaults(SCHEMA, "classification", 1.0).params.grid_share == 0.0
    assert EngineConfig.from_defaults(SCHEMA, "classification", 1.0,
                                      expected_records=2000).params.grid_share == 0.05
    categories = PublicSchema(features={"c": ["x", "y"]})
    model = SGBDT(categories, seed=0, task="classification", epsilon=1.0,
                  expected_records=2000).fit(X[:, 2:], y)
    assert model.params.grid_share == 0.0 and model.smoothing_spans_ is None


def _hinted_stream(store=None, seed: int = 0, n: int = 2000) -> StreamEngine:
    config = EngineConfig.from_defaults(SCHEMA, "classification", 1.0, expected_records=n)
    return StreamEngine(config, store=store, seed=seed)


def test_a_hinted_stream_releases_its_grid_at_its_end_from_the_records_that_afford_it(
) -> None:
    """Before the hinted end the trees split on the public grid; at it, the records whose
    spent budget affords the charge pay it (and only they), the grid is installed and the
    end burst's trees split on it. Would fail if a record were charged without affording
    it, or one that affords it went uncharged."""
    X, y = _skewed(2000, 7)
    engine = _hinted_stream()
    engine.add(X[:1999], y[:1999], [str(i) for i in range(1999)])
    assert engine.booster.grower.quantile_map is None
    before = engine.active_pool()
    budget, charge = engine.booster.filter.budget_rdp, engine.booster.calibration.grid_charge
    event = GridEvent(charge, np.zeros((3, GRID_BINS + 1)), np.zeros(3, dtype=bool))
    charged = engine._grid_state(event).spent[~engine.pool.retired]
    paid = charged_many(before.spent, charge)  # the sum rounded up, as every charge is
    affords = paid <= budget
    np.testing.assert_array_equal(charged, np.where(affords, paid, before.spent))
    rounds_before = engine.rounds_done
    engine.add(X[1999:], y[1999:], ["1999"])  # the hinted end: the grid, then the burst
    assert engine.booster.grower.quantile_map is not None
    assert engine.rounds_done > rounds_before + engine.config.final_trees // 2
    payers = charged_many(before.spent, charge) <= budget
    assert payers.any() and (~payers).any()  # early records spent theirs on the trees
    assert engine.release().smoothing_spans is not None
    # the burst's trees cut inside the data's first twentieth of the public range
    last = engine.ensemble.thresholds[-engine.config.final_trees:]
    numeric = engine.ensemble.features[-engine.config.final_trees:] < 2
    assert (last[numeric] < 50).mean() > 0.6


@pytest.mark.parametrize("grouped", [False, True], ids=["commits", "group_commit"])
@pytest.mark.parametrize("snapshot_ratio", [0.0, 1e9], ids=["every", "never"])
def test_a_restart_after_the_grid_restores_it_and_its_charges(tmp_path, snapshot_ratio: float,
                                                            grouped: bool) -> None:
    """The grid survives a crash both ways: replayed from its event (charging the same
    records again from the stored pool) or read from the state after a snapshot dropped
    the event; the restored run then trains exactly as the one that never stopped. Also
    when the grid and its rounds commit as one group (as the Kafka trainer commits a
    batch): the group once wrote only its last change's meta, the grid's entry was lost,
    and the restored stream released, and charged, a second grid."""
    X, y = _skewed(2400, 8)
    keys = [str(i) for i in range(2400)]
    path = tmp_path / "state.db"
    first = _hinted_stream(SQLiteStore(path, create=True, snapshot_ratio=snapshot_ratio))
    if grouped:
        with first.group_commit():
            first.add(X[:2000], y[:2000], keys[:2000])
        first.close()  # a clean close: its snapshot drops the grid's event
    else:
        first.add(X[:2000], y[:2000], keys[:2000])
    assert first.booster.grower.quantile_map is not None
    if not grouped:
        first.store.close()  # a crash
    straight = _hinted_stream()
    straight.add(X[:2000], y[:2000], keys[:2000])
    again = _hinted_stream(SQLiteStore(path, snapshot_ratio=snapshot_ratio))
    grid, expected = again.booster.grower.quantile_map, straight.booster.grower.quantile_map
    assert grid is not None
    np.testing.assert_array_equal(grid.cdf, expected.cdf)
    np.testing.assert_array_equal(again.active_pool().spent, straight.active_pool().spent)
    np.testing.assert_array_equal(again.ensemble.shifts, straight.ensemble.shifts)
    for engine in (again, straight):
        engine.add(X[2000:], y[2000:], keys[2000:])  # later trees split on the grid
    np.testing.assert_array_equal(again.ensemble.thresholds, straight.ensemble.thresholds)
    np.testing.assert_array_equal(again.predict_margin(X[:100]), straight.predict_margin(X[:100]))


def test_a_follower_takes_up_the_grids_smoothing_when_it_arrives() -> None:
    """A model follower built from a release before the grid answers as the engine does
    after the grid's release too (its smoothing spans arrive with the later versions)."""
    from renyiboost.connectors.kafka import ModelFollower

    X, y = _skewed(2000, 9)
    engine = _hinted_stream()
    engine.add(X[:1500], y[:1500], [str(i) for i in range(1500)])
    follower = ModelFollower.without_consumer()  # no broker: the releases are applied directly
    early = engine.release()
    follower._apply(early)
    assert early.smoothing_spans is None
    engine.add(X[1500:], y[1500:], [str(i) for i in range(1500, 2000)])
    follower._apply(engine.release())
    assert follower._spans is not None
    np.testing.assert_allclose(follower.ensemble.predict_margin(X[:200]),
                               engine.predict_margin(X[:200]), rtol=1e-12)


def _unhinted_stream(store=None, seed: int = 0, schema: PublicSchema = SCHEMA) -> StreamEngine:
    config = EngineConfig.from_defaults(schema, "classification", 1.0)
    return StreamEngine(config, store=store, seed=seed)


def test_an_unhinted_streams_end_buys_a_grid_from_the_budget_its_records_left() -> None:
    """Nothing is reserved (the calibration has no grid), so a stream that is never
    finished spends as before; ``finish()`` charges a twentieth of B to exactly the keys
    that can still afford it, draws the noise that charge pays for, and the end burst's
    trees split on the grid. Would fail if the charge were smaller than its share of B, if
    a key that cannot afford it paid, or if the histograms' noise were smaller."""
    X, y = _skewed(3000, 10)
    engine = _unhinted_stream()
    assert engine.booster.calibration.grid_charge == 0.0
    engine.add(X, y, [str(i) for i in range(3000)])
    budget = engine.booster.filter.budget_rdp
    charge = FINISH_GRID_SHARE * budget
    assert charge == pytest.approx(0.05 * budget)
    # a quarter of the keys spent nearly all of their budget (as the early keys of a long
    # stream do): they cannot afford the grid
    spent_out = np.arange(engine.pool.spent.size) % 4 == 0
    engine.pool.spent[spent_out] = budget - 0.5 * charge
    before = engine.active_pool()
    noise = _RecordingNoise()
    engine.booster.noise = noise
    engine._release_split_grid(end_grid_charge(engine.config, engine.booster, None, 1))
    after = engine.active_pool()
    affords = charged_many(before.spent, charge) <= budget
    assert affords.any() and (~affords).any()
    np.testing.assert_allclose(after.spent, np.where(affords, before.spent + charge,
                                                     before.spent), rtol=1e-12)
    expected = SplitGridRelease(charge, engine.booster.calibration.order, 2).count_noise_std
    assert noise.normal_stds == [(2 * GRID_BINS, pytest.approx(expected))]
    assert engine.booster.grower.quantile_map is not None
    rounds = engine.rounds_done
    engine.finish()  # the grid is out: the burst alone
    assert noise.normal_stds[1][0] != 2 * GRID_BINS  # no second grid
    burst = engine.rounds_done - rounds
    assert burst > 0 and engine.release().smoothing_spans is not None
    last, features = engine.ensemble.thresholds[-burst:], engine.ensemble.features[-burst:]
    assert (last[features < 2] < 50).mean() > 0.6


def test_an_end_without_a_grid_and_a_schema_without_numeric_features() -> None:
    """``finish(split_grid=False)`` keeps the public grid; a categorical schema has no
    histogram to buy (and is not refused); a hinted stream whose grid_share is 0 buys one
    only when asked."""
    X, y = _skewed(1500, 11)
    engine = _unhinted_stream()
    engine.add(X, y, [str(i) for i in range(1500)])
    spent = engine.active_pool().spent
    engine.finish(split_grid=False)
    assert engine.booster.grower.quantile_map is None
    assert engine.release().smoothing_spans is None
    assert engine.active_pool().spent.sum() > spent.sum()  # the burst ran
    categories = PublicSchema(features={"c": ["x", "y"]})
    only_codes = _unhinted_stream(schema=categories)
    only_codes.add(X[:, 2:], y, [str(i) for i in range(1500)])
    assert only_codes.finish() > 0 and only_codes.booster.grower.quantile_map is None
    config = EngineConfig.from_defaults(SCHEMA, "classification", 1.0,
                                        expected_records=5000, grid_share=0.0)
    for asked in (None, True):
        hinted = StreamEngine(config, seed=0)
        hinted.add(X, y, [str(i) for i in range(1500)])
        hinted.finish(split_grid=asked)
        assert (hinted.booster.grower.quantile_map is not None) == bool(asked)


@pytest.mark.parametrize("snapshot_ratio", [0.0, 1e9], ids=["every", "never"])
def test_a_restart_after_the_ends_grid_charges_it_once(tmp_path, snapshot_ratio: float) -> None:
    """A crash between the end's grid and its burst: the restored stream has the grid and
    its charges, and finishing again runs the burst without buying a second grid, exactly
    as a stream that never stopped."""
    X, y = _skewed(2000, 12)
    keys = [str(i) for i in range(2000)]
    path = tmp_path / "state.db"
    first = _unhinted_stream(SQLiteStore(path, create=True, snapshot_ratio=snapshot_ratio))
    first.add(X, y, keys)
    first.train(0)  # finish() merges what is pending before its grid
    first._release_split_grid(end_grid_charge(first.config, first.booster, None, 1))
    first.store.close()  # a crash before the burst
    again = _unhinted_stream(SQLiteStore(path, snapshot_ratio=snapshot_ratio))
    straight = _unhinted_stream()
    straight.add(X, y, keys)
    straight.finish()
    assert again.booster.grower.quantile_map is not None
    again.finish()
    np.testing.assert_array_equal(again.booster.grower.quantile_map.cdf,
                                  straight.booster.grower.quantile_map.cdf)
    np.testing.assert_array_equal(again.active_pool().spent, straight.active_pool().spent)
    np.testing.assert_array_equal(again.ensemble.thresholds, straight.ensemble.thresholds)


@pytest.mark.parametrize("sharded", [False, True], ids=["single", "sharded"])
def test_no_grid_and_no_charge_after_the_last_round(sharded: bool) -> None:
    """A grid reaches the model topic with the next version's tree, and after
    ``max_rounds`` there is none: ``finish()`` once bought one anyway, so every key paid
    for spans that changed the answers of a version the topic already held (59 of 200
    rows answered otherwise). Would fail if the end's grid ignored ``max_rounds``."""
    from renyiboost.stream.sharded import ShardedEngine

    X, y = _skewed(1500, 12)
    config = EngineConfig.from_defaults(SCHEMA, "classification", 1.0, rounds=8, max_rounds=8,
                                        train_every=50, warmup=50)
    engine = (ShardedEngine(config, [None, None], seed=0) if sharded
              else StreamEngine(config, seed=0))
    engine.add(X, y, [str(i) for i in range(1500)])
    before = engine.release()
    assert len(before.trees) == 8 and before.smoothing_spans is None
    spent = engine.operator_budget_of("1400").spent_rdp
    assert engine.finish() == 0
    after = engine.release()
    assert after == before and engine.operator_budget_of("1400").spent_rdp == spent


@pytest.mark.parametrize("sharded", [False, True], ids=["single", "sharded"])
def test_no_grid_where_the_end_runs_no_burst(sharded: bool) -> None:
    """A hinted stream without a reserved grid, told at its own end to buy one
    (``finish(split_grid=True)``): its burst already ran there, so no tree would ever split
    on the grid, yet every key paid for it and the engine answered with spans no release
    carried (140 of 200 rows answered otherwise than the release). No grid, no charge."""
    from renyiboost.stream.sharded import ShardedEngine

    X, y = _skewed(1200, 13)
    config = EngineConfig.from_defaults(SCHEMA, "classification", 1.0, expected_records=1200,
                                        grid_share=0.0)
    assert config.final_trees > 0 and config.final_at <= 1200
    engine = (ShardedEngine(config, [None, None], seed=0) if sharded
              else StreamEngine(config, seed=0))
    engine.add(X[:config.final_at], y[:config.final_at],
               [str(i) for i in range(config.final_at)])
    before = engine.release()
    spent = engine.operator_budget_of("100").spent_rdp
    assert engine.finish(split_grid=True) == 0
    assert engine.released_grid is None and engine.release() == before
    assert engine.operator_budget_of("100").spent_rdp == spent
