"""DiPriMe forests: the corrected budget charges every candidate median, the DP median lands
on the median at large ε and spreads over the public range at small ε, permute-and-flip
picks the best by far and ties uniformly, every Laplace draw has its stated scale, every
row trains one tree, and held-out Elec2 beats the DP mean."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest

from renyiboost.accounting.diprime import DiPriMeBudget
from renyiboost.accounting.dpboost import gain_sensitivity
from renyiboost.accounting.events import ExponentialEvent, LaplaceEvent, PureDpEvent, event_rdp
from renyiboost.accounting.rdp import exponential_rdp, pure_dp_rdp
from renyiboost.datasets import load
from renyiboost.exceptions import TestingOnlyWarning
from renyiboost.models import diprime as diprime_module
from renyiboost.models.baselines import DPMeanBaseline
from renyiboost.models.diprime import DiPriMe
from renyiboost.randomness import SeededNoise, noise_source
from renyiboost.schema import PublicSchema

warnings.simplefilter("ignore", TestingOnlyWarning)
SCHEMA = PublicSchema(features={"a": (0, 1), "b": (0, 1)}, target_bounds=(0, 1))


def test_every_candidate_median_is_charged() -> None:
    """K = 5, ρ = 0.5: the authors' accounting (ε ρ / 2D a median, charged once a level)
    spends 2ε; ours spends ε, each of the K medians and the choice at ε ρ / (6D). With
    fewer features than K, a node draws (and pays for) one median a feature."""
    budget = DiPriMeBudget(epsilon=1.0, depth=5, candidates=5, split_share=0.5)
    assert budget.spent_epsilon() == pytest.approx(1.0, rel=1e-12)
    assert budget.median_epsilon == pytest.approx(0.5 / 30)
    theirs_median = 1.0 * 0.5 / (2 * 5)
    theirs_spent = 5 * (5 * theirs_median + theirs_median) + 0.5
    assert theirs_spent == pytest.approx(2.0)
    orders = np.array([2.0, 50.0])
    expected = 5 * (5 * event_rdp(ExponentialEvent(0.5 / 30), orders)  # the K medians
                    + event_rdp(PureDpEvent(0.5 / 30), orders)) \
        + event_rdp(LaplaceEvent(0.5), orders)  # the choice (permute-and-flip), the leaf
    six = PublicSchema(features={f"x{j}": (0, 1) for j in range(6)}, target_bounds=(0, 1))
    model = DiPriMe(six, task="regression", epsilon=1.0)
    np.testing.assert_allclose(model.rdp(orders), expected, rtol=1e-12)
    # two features: a node draws two medians and pays for two, so ε is spent, not 0.75
    narrow = DiPriMe(SCHEMA, task="regression", epsilon=1.0)
    assert narrow.budget.median_epsilon == pytest.approx(0.5 / 15)
    assert narrow.budget.spent_epsilon() == pytest.approx(1.0, rel=1e-12)


def _root_medians(epsilon: float, draws: int) -> np.ndarray:
    model = DiPriMe(SCHEMA, seed=0, task="regression", epsilon=epsilon, depth=1)
    rng = np.random.default_rng(1)
    x = rng.uniform(0.6, 0.8, 2000)  # median 0.7
    noise = noise_source(2, warn=False)
    scale = model.budget.median_epsilon / 2
    return np.array([model._median(0, x, np.zeros(2000), np.zeros(2000, np.int64), 1, scale,
                                   noise)[0][0] for _ in range(draws)])


def test_the_dp_median_finds_the_median_at_large_epsilon_and_spreads_at_small() -> None:
    sharp = _root_medians(3000.0, 200)
    assert np.all(np.abs(sharp - 0.7) < 0.01)
    flat = _root_medians(1e-6, 2000)  # weights ∝ gap length: uniform over [0, 1]
    values = np.sort(flat)
    assert np.max(np.abs(values - np.arange(1, values.size + 1) / values.size)) < 0.035


def test_a_categorical_median_counts_each_nodes_own_rows() -> None:
    """Whatever code a node's DP median picks, the left count and label sum it reports are
    those of that node's rows with that code (brute force), missing values included in no
    code: rows of one node never leak into another's counts (which would double the
    median's sensitivity)."""
    schema = PublicSchema(features={"c": ["p", "q", "r"], "b": (0, 1)}, target_bounds=(0, 1))
    model = DiPriMe(schema, seed=0, task="regression", epsilon=1.0, depth=3)
    rng = np.random.default_rng(4)
    n, n_nodes = 3000, 4
    x = rng.integers(0, 4, n).astype(float)  # codes 0–2 and "other" (3)
    x[rng.uniform(size=n) < 0.1] = np.nan
    pos = rng.integers(0, n_nodes, n)
    signed = rng.uniform(-1, 1, n)
    noise = noise_source(5, warn=False)
    for _ in range(50):
        threshold, left_s, left_n = model._median(0, x, signed, pos, n_nodes, 1e-3, noise)
        for node in range(n_nodes):
            mine = (pos == node) & (x == threshold[node])
            assert left_n[node] == mine.sum()
            assert left_s[node] == pytest.approx(signed[mine].sum(), abs=1e-9)


def test_permute_and_flip_picks_the_best_by_far_and_ties_uniformly() -> None:
    model = DiPriMe(SCHEMA, seed=0, task="regression", epsilon=1.0)
    noise = noise_source(3, warn=False)
    far = np.tile([0.0, -1000.0, -1000.0], (500, 1))
    assert np.all(model._select(far, noise) == 0)
    picks = model._select(np.zeros((6000, 3)), noise)
    np.testing.assert_allclose(np.bincount(picks, minlength=3) / 6000, 1 / 3, atol=0.02)
    # One candidate 1 (in ε / 2Δ units) above two others: permute-and-flip picks it with
    # probability (1 + (1 − 1/e) + (1 − 1/e)²) / 3 = 0.6773 (it comes first, second or
    # third in the random order, each rival before it rejected with probability 1 − 1/e),
    # more often than the exponential mechanism's e / (e + 2) = 0.576.
    best = np.mean(model._select(np.tile([1.0, 0.0, 0.0], (6000, 1)), noise) == 0)
    assert best == pytest.approx(0.6773, abs=0.015)
    exponential = DiPriMe(SCHEMA, seed=0, task="regression", epsilon=1.0,
                          selection="exponential")
    best = np.mean(exponential._select(np.tile([1.0, 0.0, 0.0], (6000, 1)), noise) == 0)
    assert best == pytest.approx(np.e / (np.e + 2), abs=0.015)


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_every_laplace_draw_has_its_stated_scale(task: str, monkeypatch) -> None:
    """Regression leaves: noisy sum and noisy count at 2/ε_leaf each; classification: the two
    class counts at 1/ε_leaf. Smaller noise fails."""
    data = load("abalone" if task == "regression" else "adult")
    model = DiPriMe(data.schema, seed=0, task=task, epsilon=2.0, trees=3, depth=3)
    scales: list[float] = []
    laplace = SeededNoise.laplace

    def spy(self, size, scale):
        scales.append(float(scale))
        return laplace(self, size, scale)

    monkeypatch.setattr(SeededNoise, "laplace", spy)
    model.fit(data.X[:3000], data.y[:3000])
    expected = (2.0 if task == "regression" else 1.0) / model.budget.leaf_epsilon
    assert scales == [expected] * 6  # two draws a tree


def test_every_row_trains_one_tree(monkeypatch) -> None:
    n = 3000
    rng = np.random.default_rng(4)
    X = np.column_stack([rng.uniform(size=n), np.arange(n, dtype=float)])
    schema = PublicSchema(features={"a": (0, 1), "id": (0, n)}, target_bounds=(0, 1))
    seen: list[np.ndarray] = []
    grow = diprime_module.DiPriMe._grow

    def spy(self, X_tree, signed, noise):
        seen.append(X_tree[:, 1].astype(int))
        return grow(self, X_tree, signed, noise)

    monkeypatch.setattr(diprime_module.DiPriMe, "_grow", spy)
    DiPriMe(schema, seed=5, task="regression", epsilon=1.0, trees=7).fit(X, rng.uniform(size=n))
    ids = np.concatenate(seen)
    assert len(seen) == 7 and np.array_equal(np.sort(ids), np.arange(n))


def test_diprime_beats_the_dp_mean_on_held_out_elec2() -> None:
    """80/20 split, two seeds, ε = 1: error 0.244 here against the DP mean's 0.429."""
    data = load("elec2")
    order = np.random.default_rng(0).permutation(len(data))
    train, test = order[: int(0.8 * len(data))], order[int(0.8 * len(data)):]
    ours, floor = [], []
    for seed in range(2):
        for model, out in ((DiPriMe(data.schema, seed=seed, task="classification",
                                    epsilon=1.0), ours),
                           (DPMeanBaseline(data.schema, "classification", 1.0, 1e-6, seed),
                            floor)):
            predicted = model.fit(data.X[train], data.y[train]).predict(data.X[test])
            out.append(np.mean(predicted != data.y[test]))
    assert np.mean(ours) < np.mean(floor) - 0.1


def test_permute_and_flip_is_charged_the_pure_dp_curve_it_needs() -> None:
    """Permute-and-flip (the default choice among the K) is ε-DP but not ε-bounded-range:
    on a pair of neighbouring nodes its exact Rényi divergence is 1.75 times the
    exponential mechanism's ε²/8 curve, which the budget once reported for it. The budget's
    curve must bound it at every order."""
    def flip_probabilities(score: np.ndarray) -> np.ndarray:  # exact, over every order
        accept, out = np.exp(score - score.max()), np.zeros(score.size)
        for order in itertools.permutations(range(score.size)):
            stay = 1.0 / math.factorial(score.size)
            for i in order:
                out[i] += stay * accept[i]
                stay *= 1.0 - accept[i]
        return out

    def gains(left_s, left_n, right_s, right_n) -> float:
        lam = diprime_module.SELECT_LAMBDA
        return left_s**2 / (left_n + lam) + right_s**2 / (right_n + lam)

    budget = DiPriMeBudget(epsilon=1.0, depth=5, candidates=5, split_share=0.5)
    scale = budget.select_epsilon / (2 * gain_sensitivity(1.0))
    # 2,000 rows of +1 and 2,000 of −1, both candidates separate them; the neighbour adds
    # one −1 row that candidate A sends with the +1 rows and B with the −1 rows.
    here = np.array([gains(2000, 2000, -2000, 2000), gains(-2000, 2000, 2000, 2000)])
    there = np.array([gains(1999, 2001, -2000, 2000), gains(-2001, 2001, 2000, 2000)])
    assert np.abs(there - here).max() <= gain_sensitivity(1.0)
    p, q = flip_probabilities(scale * here), flip_probabilities(scale * there)
    orders = np.array([2.0, 10.0, 100.0])
    divergence = np.maximum(*(np.log(np.sum(a**orders[:, None] * b**(1 - orders[:, None]),
                                            axis=1)) / (orders - 1) for a, b in ((p, q), (q, p))))
    charged = event_rdp(budget.event(), orders) - event_rdp(
        DiPriMeBudget(**budget.model_dump() | {"selection": "exponential"}).event(), orders)
    assert (divergence > exponential_rdp(budget.select_epsilon, orders)).any()  # the old curve
    assert (divergence <= pure_dp_rdp(budget.select_epsilon, orders)).all()
    np.testing.assert_allclose(charged, budget.depth * (
        pure_dp_rdp(budget.select_epsilon, orders)
        - exponential_rdp(budget.select_epsilon, orders)), rtol=1e-9)


def test_a_nodes_median_is_drawn_inside_the_range_its_ancestors_leave() -> None:
    """With ``narrow_ranges`` (the authors' code), a child's numeric median is drawn over
    its side of its parent's split (released, so free). At a tiny ε the medians are nearly
    uniform over their range: over the whole public range (the default), about half of the
    children's thresholds fall on the wrong side of their parent's."""
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(600, 1))
    schema = PublicSchema(features={"a": (0.0, 1.0)}, target_bounds=(0.0, 1.0))
    model = DiPriMe(schema, seed=3, task="regression", epsilon=0.05, depth=3, trees=40,
                    candidates=1, narrow_ranges=True).fit(X, X[:, 0])
    t = model.ensemble.thresholds
    for parent in range(3):  # the nodes of levels 0 and 1 and their children
        left, right = 2 * parent + 1, 2 * parent + 2
        assert np.all(t[:, left] <= t[:, parent]) and np.all(t[:, right] >= t[:, parent])
    # a grandchild inside both: the right child of the root's left child, and the left
    # child of its right child
    assert np.all((t[:, 1] <= t[:, 4]) & (t[:, 4] <= t[:, 0]))
    assert np.all((t[:, 0] <= t[:, 5]) & (t[:, 5] <= t[:, 2]))
    wide = DiPriMe(schema, seed=3, task="regression", epsilon=0.05, depth=3, trees=40,
                   candidates=1).fit(X, X[:, 0]).ensemble.thresholds
    assert 0.2 < np.mean(wide[:, 1] > wide[:, 0]) < 0.8
