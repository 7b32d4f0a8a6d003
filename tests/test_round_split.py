"""A round split over key shards (S-GBDT Sec. IX, Alg. 9): the tree and the noise once, the
charges and exact leaf sums per shard. Shards that partition the pool must charge every
record exactly as the whole pool does, and their leaf sums must add up to the pool's, so a
k-shard model is the one-shard model up to floating-point summation order.

Tolerances: leaf sums and leaves agree to 1e-12 relative (only the order of the additions
differs); charges, spent budgets, retirements and Poisson draws are per record and must be
equal to the bit.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
from test_kernels import CASES, SCHEMA, _pool

from renyiboost.exceptions import TestingOnlyWarning
from renyiboost.models.booster import (
    LeafSums,
    RecordPool,
    RoundOutcome,
    SGBDTBooster,
    SGBDTParams,
)


def _booster(case: str, compiled: bool = True, **override: object) -> SGBDTBooster:
    params = SGBDTParams(**{"epsilon": 1.0, "rounds": 15, "depth": 4, "sampling_rate": 0.3,
                            "split_candidates": 8, **CASES[case], **override})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TestingOnlyWarning)
        return SGBDTBooster(params, SCHEMA, seed=11, compiled=compiled)


def _split(pool: RecordPool, owner: np.ndarray, shard: int) -> RecordPool:
    keep = owner == shard
    return RecordPool(pool.X[keep], pool.target[keep], pool.margin[keep].copy(),
                      pool.spent[keep].copy(), pool.retired[keep].copy())


@pytest.mark.parametrize("case", list(CASES))
def test_shards_charge_like_the_pool_and_their_sums_add_up(case: str) -> None:
    """One round with the same Poisson uniforms: every record's charge, draw and leaf are
    the pool's, and the shards' leaf sums add up to the pool's (compiled pass)."""
    booster = _booster(case)
    pool = _pool(booster.params.task, 5000, 3)
    owner = np.random.default_rng(5).integers(0, 3, len(pool))
    features, thresholds = booster.grow_tree()
    uniforms = np.random.default_rng(9).uniform(size=len(pool))
    active = ~pool.retired
    stage = booster.stage()
    rate = booster.params.sampling_rate
    whole, whole_side = booster._charge_pass(pool, features, thresholds, pool.margin,
                                             uniforms[active], rate, 4, stage)
    total = LeafSums(np.zeros(16), np.zeros(16))
    eligible = sampled = 0
    for shard in range(3):
        part = _split(pool, owner, shard)
        mine = uniforms[owner == shard][~part.retired]  # the same draw for the same record
        sums, side = booster._charge_pass(part, features, thresholds, part.margin, mine, rate,
                                          4, stage)
        total = total + sums
        eligible += side["n_eligible"]
        sampled += side["n_sampled"]
        for name in ("spent", "retired", "leaf_of_record", "codes"):
            if side[name] is not None:
                np.testing.assert_array_equal(side[name], whole_side[name][owner == shard])
    assert (eligible, sampled) == (whole_side["n_eligible"], whole_side["n_sampled"])
    assert sampled > 0
    np.testing.assert_allclose(total.grad_sum, whole.grad_sum, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(total.den_sum, whole.den_sum, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("case", ["regression", "classification, Newton leaves"])
def test_three_shards_train_the_one_shard_model(case: str, compiled: bool) -> None:
    """Forty rounds, past the budget (records retire): a coordinator grows each tree and
    adds the noise once to the summed shard sums; the shards' ledgers and the model equal
    the single pool's (γ = 1 here, so no Poisson draw differs between the two runs)."""
    single, coordinator = (_booster(case, compiled, sampling_rate=1.0) for _ in range(2))
    pool = _pool(single.params.task, 3000, 4)
    owner = np.random.default_rng(6).integers(0, 3, len(pool))
    shards = [_split(pool, owner, shard) for shard in range(3)]
    retired = 0
    for r in range(40):
        levels = (4, 2, 0)[r % 3]
        one = single.plan_round(pool, levels)
        features, thresholds = coordinator.grow_tree()
        parts = [coordinator.shard_round(shard, features, thresholds, levels)
                 for shard in shards]
        summed = functools.reduce(LeafSums.__add__, (sums for sums, _ in parts))
        released = coordinator.release_round(features, thresholds, summed, levels)
        np.testing.assert_array_equal(released.features, one.features)
        np.testing.assert_allclose(released.leaves, one.leaves, rtol=1e-12, atol=1e-15)
        single.apply_round(pool, one)
        coordinator.append_tree(released)
        for shard, (_, side) in zip(shards, parts, strict=True):
            after = coordinator.advance(shard, RoundOutcome.of(released, **side))
            shard.margin, shard.spent, shard.retired = after.margin, after.spent, after.retired
        for k, shard in enumerate(shards):
            np.testing.assert_array_equal(shard.spent, pool.spent[owner == k])
            np.testing.assert_array_equal(shard.retired, pool.retired[owner == k])
            np.testing.assert_allclose(shard.margin, pool.margin[owner == k], rtol=1e-9,
                                       atol=1e-12)
        retired = int(pool.retired.sum())
    assert retired > 0  # the filter retired records along the way, on both sides alike
