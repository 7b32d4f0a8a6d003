"""FedXGBoost-LDP (issue 15, item 4): local randomisers, the debiased first-order score and
per-user accounting across all rounds.

Privacy tests: the randomisers' likelihood ratios by enumeration (a Duchi report more
likely than e^ε times under another input, or a Laplace scale below 2g*/ε, fails), the
round ε is ε/T (a fit that spends ε per round shows too little noise), and the RDP of the
reports against Google's dp_accounting.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from renyiboost.accounting.events import RdpAccountant
from renyiboost.accounting.ldp import (
    LocalBudget,
    debiased_square,
    duchi_magnitude,
    randomise,
    report_variance_bound,
)
from renyiboost.accounting.rdp import randomized_response_rdp
from renyiboost.exceptions import TestingOnlyWarning
from renyiboost.experiments.peers import make_peer
from renyiboost.models.fedxgboost import FedXGBoostLDP
from renyiboost.randomness import noise_source
from renyiboost.schema import PublicSchema

warnings.simplefilter("ignore", TestingOnlyWarning)
SCHEMA = PublicSchema(features={"a": (0.0, 1.0), "b": (0.0, 1.0)})


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 3.0])
def test_duchi_reports_are_epsilon_ldp_and_unbiased(epsilon: float) -> None:
    """P(+C g* | g) = 1/2 + g/(2 C g*) over a grid of inputs: the largest ratio of any
    output's probabilities under two inputs is e^ε exactly (at g = ±g*)."""
    clip, magnitude = 0.7, duchi_magnitude(epsilon)
    g = np.linspace(-clip, clip, 201)
    up = 0.5 + g / (2 * magnitude * clip)
    assert ((up >= 0) & (up <= 1)).all()
    worst = max(up.max() / up.min(), (1 - up).max() / (1 - up).min())
    assert worst == pytest.approx(math.exp(epsilon), rel=1e-12)
    np.testing.assert_allclose(magnitude * clip * (2 * up - 1), g, atol=1e-12)  # unbiased
    reports = randomise(np.full(200_000, 0.3), "duchi", epsilon, clip, noise_source(1, warn=False))
    assert set(np.unique(reports).round(12)) == {round(-magnitude * clip, 12),
                                                  round(magnitude * clip, 12)}
    assert reports.mean() == pytest.approx(0.3, abs=4 * magnitude * clip / math.sqrt(2e5))
    assert reports.var() <= report_variance_bound("duchi", epsilon, clip)


def test_laplace_reports_have_the_scale_of_the_whole_input_range() -> None:
    clip, epsilon = 0.5, 0.8
    reports = randomise(np.zeros(200_000), "laplace", epsilon, clip, noise_source(2, warn=False))
    scale = 2 * clip / epsilon  # the range [−clip, clip] is 2·clip wide
    assert np.abs(reports).mean() == pytest.approx(scale, rel=0.01)  # E|Lap(b)| = b
    assert report_variance_bound("laplace", epsilon, clip) == pytest.approx(2 * scale**2)
    with pytest.raises(ValueError, match="clipped"):
        randomise(np.array([0.6]), "laplace", epsilon, clip, noise_source(2, warn=False))


def test_the_debiased_score_is_unbiased_and_the_papers_is_not() -> None:
    """Over many report draws the debiased square averages to the exact G²; the paper's
    estimator (exact parent G, noisy children) is off by n_L·v (here 60× the signal)."""
    rng = np.random.default_rng(3)
    grad = rng.uniform(-0.2, 0.4, 500)
    left = np.arange(500) < 200
    noise, epsilon = noise_source(4, warn=False), 0.5
    v = report_variance_bound("laplace", epsilon, 1.0)
    estimates, paper = [], []
    for _ in range(4000):
        reports = randomise(grad, "laplace", epsilon, 1.0, noise)
        g_left = reports[left].sum()
        estimates.append(debiased_square(g_left, 200, v))
        paper.append(g_left**2)
    exact = grad[left].sum() ** 2
    spread = np.std(estimates) / math.sqrt(len(estimates))
    assert np.mean(estimates) == pytest.approx(exact, abs=4 * spread)
    assert np.mean(paper) - exact == pytest.approx(200 * v, rel=0.05)


def test_a_user_is_charged_once_per_round_across_all_rounds() -> None:
    budget = LocalBudget(epsilon=2.0, rounds=8, randomiser="duchi")
    assert budget.round_epsilon == 0.25 and budget.spent_epsilon() == pytest.approx(2.0)
    orders = np.array([2.0, 8.0, 64.0])
    np.testing.assert_allclose(RdpAccountant(orders).compose(budget.event()).rdp,
                               8 * randomized_response_rdp(0.25, orders))
    model = FedXGBoostLDP(SCHEMA, task="classification", epsilon=2.0, rounds=8, seed=0)
    guarantee = model.privacy_guarantee()
    assert (guarantee.epsilon, guarantee.round_epsilon, guarantee.protects) == (2.0, 0.25,
                                                                                  "labels")


def test_the_rdp_of_the_reports_matches_dp_accounting() -> None:
    dp_accounting = pytest.importorskip("dp_accounting")
    orders = [2.0, 4.0, 16.0, 64.0]
    ours = RdpAccountant(orders).compose(LocalBudget(epsilon=1.5, rounds=5,
                                                     randomiser="laplace").event()).rdp
    accountant = dp_accounting.rdp.RdpAccountant(orders)
    accountant.compose(dp_accounting.LaplaceDpEvent(1.0 / 0.3), 5)  # scale / sensitivity
    np.testing.assert_allclose(ours, accountant._rdp, rtol=1e-9)
    # randomized response at ε: ρ(2) = log(p²/q + q²/p) (Mironov 2017, Prop. 5)
    p = math.exp(0.3) / (1 + math.exp(0.3))
    q = 1 - p
    assert randomized_response_rdp(0.3, [2.0])[0] == pytest.approx(math.log(p * p / q
                                                                             + q * q / p))


def test_the_rounds_report_with_epsilon_over_t(monkeypatch) -> None:
    """Every round's reports are drawn at ε/T, not ε: a fit that spent the whole ε every
    round would fail here."""
    import renyiboost.models.fedxgboost as module

    seen = []
    original = module.randomise

    def spy(values, randomiser, epsilon, clip, noise):
        seen.append(epsilon)
        return original(values, randomiser, epsilon, clip, noise)

    monkeypatch.setattr(module, "randomise", spy)
    X = np.random.default_rng(0).uniform(0, 1, (300, 2))
    FedXGBoostLDP(SCHEMA, task="classification", epsilon=3.0, rounds=6, seed=1).fit(
        X, (X[:, 0] > 0.5).astype(float))
    assert seen == [0.5] * 6


def test_a_clear_signal_is_learned_at_large_epsilon_and_the_peer_runs() -> None:
    rng = np.random.default_rng(5)
    X = rng.uniform(0, 1, (20_000, 2))
    y = (X[:, 0] > 0.5).astype(float)
    for randomiser in ("laplace", "duchi"):
        model = FedXGBoostLDP(SCHEMA, task="classification", epsilon=20.0, seed=2,
                              randomiser=randomiser).fit(X[:15_000], y[:15_000])
        assert np.mean(model.predict(X[15_000:]) == y[15_000:]) > 0.95
    peer = make_peer("fedxgb_ldp", SCHEMA, "classification", "toy", 20.0, 1e-6, 3)
    score = peer.fit(X[:15_000], y[:15_000]).predict_score(X[15_000:])
    assert np.mean((score > 0.5) == y[15_000:]) > 0.95
