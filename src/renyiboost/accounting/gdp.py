"""Gaussian differential privacy (Dong, Roth & Su 2022, "Gaussian differential privacy",
JRSS-B): the exact accounting of composed Gaussian mechanisms, used by the DP-EBM-style
additive learner (:mod:`renyiboost.models.additive`), as DP-EBM does (Nori et al. 2021).

A Gaussian mechanism with L2 sensitivity Δ and noise std σ is ``μ``-GDP with ``μ = Δ/σ``;
``μ_i``-GDP mechanisms compose (adaptively) to ``sqrt(Σ μ_i²)``-GDP (Cor. 3.3), and
``μ``-GDP is ``(ε, δ(ε))``-DP for every ε ≥ 0 with (Cor. 2.13)

    δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2).

For Gaussian mechanisms alone this is tight, where converting their RDP curve loses a little
(``tests/test_additive.py`` compares both, and GDP with dp_accounting's PLD accountant).
"""

from __future__ import annotations

import math

from scipy.special import log_ndtr, ndtr


def _check_mu(mu: float) -> None:
    """A GDP parameter is a finite number >= 0: a NaN passed ``mu <= 0`` and the bisection
    drifted to ε ≈ 6e-61, a negative one read as 0 (review Q #5)."""
    if isinstance(mu, bool) or not (mu >= 0 and math.isfinite(mu)):
        raise ValueError(f"mu must be a finite number >= 0, got {mu!r}")


def gdp_delta(mu: float, epsilon: float) -> float:
    """δ(ε) of a ``mu``-GDP mechanism (Dong, Roth & Su, Cor. 2.13).

    >>> round(gdp_delta(1.0, 1.0), 6)
    0.126937
    """
    _check_mu(mu)
    if mu == 0:
        return 0.0
    first = ndtr(-epsilon / mu + mu / 2)
    # e^ε Φ(−ε/μ − μ/2) in logs: the factor overflows long before the product does.
    second = math.exp(epsilon + log_ndtr(-epsilon / mu - mu / 2))
    return max(float(first - second), 0.0)


def gdp_epsilon(mu: float, delta: float) -> float:
    """The smallest ε with ``δ(ε) ≤ delta`` for a ``mu``-GDP mechanism (bisection)."""
    _check_mu(mu)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    if gdp_delta(mu, 0.0) <= delta:
        return 0.0
    low, high = 0.0, 1.0
    while gdp_delta(mu, high) > delta:
        high *= 2.0
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if gdp_delta(mu, mid) > delta else (low, mid)
    return high


def gdp_mu(epsilon: float, delta: float) -> float:
    """The largest ``μ`` whose μ-GDP guarantee implies ``(epsilon, delta)``-DP (δ(ε) grows
    with μ, so bisection finds it)."""
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    low, high = 0.0, 1.0
    while gdp_delta(high, epsilon) < delta:
        high *= 2.0
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if gdp_delta(mid, epsilon) <= delta else (low, mid)
    return low


def composed_mu(*mus: float) -> float:
    """``μ`` of the adaptive composition of ``μ_i``-GDP mechanisms: ``sqrt(Σ μ_i²)``."""
    return math.sqrt(sum(mu * mu for mu in mus))
