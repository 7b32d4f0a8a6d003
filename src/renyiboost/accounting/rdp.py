"""Rényi-DP curves of the mechanisms renyiboost uses.

Convention (the one of Google's dp_accounting): add/remove-one neighbours, and
``noise_multiplier`` = standard deviation of the Gaussian noise / L2 sensitivity.
Every function is vectorised over ``orders`` and returns one RDP value per order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.special import gammaln, logsumexp

Orders = float | int | Sequence[float] | np.ndarray

# Entries of the (orders x binomial terms) work matrix evaluated at once; bounds memory.
_MAX_WORK_ENTRIES = 4_000_000


def _as_orders(orders: Orders, *, integer: bool) -> np.ndarray:
    array = np.atleast_1d(np.asarray(orders, dtype=float))
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"orders must be a number or a 1-D sequence, got {orders!r}")
    if np.any(~np.isfinite(array)) or np.any(array <= 1):
        raise ValueError(f"orders must be finite and > 1, got {array.tolist()}")
    if integer and np.any(array != np.round(array)):
        raise ValueError(
            "subsampled_gaussian_rdp is exact at integer orders only; got "
            f"{array[array != np.round(array)].tolist()}"
        )
    return array


def _check_noise_multiplier(noise_multiplier: float) -> float:
    z = float(noise_multiplier)
    if not z >= 0:
        raise ValueError(f"noise_multiplier must be >= 0, got {noise_multiplier!r}")
    return z


def _rounded_up(rdp_in_logs: np.ndarray, epsilon: float, alphas: np.ndarray) -> np.ndarray:
    """An ε-DP mechanism's RDP computed as a log of a mixture near 1, made an upper bound:
    the rounding of that log is added (its terms are up to about α (1 + ε) in size, each
    rounded to 2⁻⁵³ of it, all over α − 1), and the bound every ε-DP mechanism meets,
    ``min(ε, α ε² / 2)`` (:func:`pure_dp_rdp`), caps it. At a tiny ε the terms of the
    mixture cancel: Laplace at ε = 10⁻⁸, α = 2 came out 0 against a true 10⁻¹⁶, and
    randomized response at α = 4,096 2 · 10⁻⁴ below its true value (37th session's
    review): under-counts, however small."""
    rounding = 1e-15 * (1.0 + alphas * (1.0 + epsilon)) / (alphas - 1.0)
    # the cap rounded up too: randomized response's RDP is almost exactly α ε² / 2 at a tiny
    # ε, and the cap rounded to nearest fell below it in about half the draws (review D)
    # (α ε² / 2 is two roundings, so four ulps up: one fell below it: review Q #2)
    cap = pure_dp_rdp(epsilon, alphas) * (1.0 + 4 * 2.0**-52)
    return np.minimum(np.maximum(rdp_in_logs, 0.0) + rounding, cap)


def _pure_epsilon(epsilon: float, orders: Orders) -> tuple[float, np.ndarray]:
    """A pure-DP mechanism's ε (checked ≥ 0) and the orders as floats."""
    eps = float(epsilon)
    if not eps >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    return eps, _as_orders(orders, integer=False)


def gaussian_rdp(noise_multiplier: float, orders: Orders) -> np.ndarray:
    """RDP of the Gaussian mechanism: ``α / (2 z²)`` (Mironov 2017, Prop. 7).

    Examples
    --------
    >>> gaussian_rdp(2.0, [2, 8]).tolist()
    [0.25, 1.0]
    """
    z = _check_noise_multiplier(noise_multiplier)
    alphas = _as_orders(orders, integer=False)
    if z == 0:
        return np.full_like(alphas, np.inf)
    return alphas / (2.0 * z * z)


def _log_expm1(x: np.ndarray) -> np.ndarray:
    """``log(exp(x) - 1)`` for ``x > 0``, without overflow for large ``x``."""
    with np.errstate(divide="ignore"):
        small = np.log(np.expm1(np.minimum(x, 30.0)))
    large = x + np.log1p(-np.exp(-np.maximum(x, 30.0)))
    return np.where(x > 30.0, large, small)


def _log_a_minus_one(q: float, z: np.ndarray, alphas: np.ndarray) -> np.ndarray:
    """``log(A_α − 1)`` for integer orders, where A_α is Mironov, Talwar & Zhang's sum.

    Mironov, Talwar, Zhang (2019), "Rényi Differential Privacy of the Sampled Gaussian
    Mechanism", Sec. 3.3: for integer α,

        A_α = Σ_{k=0}^{α} C(α, k) (1−q)^{α−k} q^k exp((k² − k) / (2 z²)).

    The binomial weights sum to 1 and the k = 0, 1 terms have exponent 0, so

        A_α − 1 = Σ_{k=2}^{α} C(α, k) (1−q)^{α−k} q^k expm1((k² − k) / (2 z²)),

    a sum of positive terms. Summing it in log space keeps full relative precision even
    when ρ is tiny (where log A_α itself would cancel against 1).

    ``z`` and ``alphas`` are paired element-wise. Pairs are evaluated in blocks of orders
    within a factor of two of each other, so padding the ragged sums wastes little.
    """
    out = np.empty_like(alphas)
    order_idx = np.argsort(alphas, kind="stable")
    sorted_alphas, sorted_z = alphas[order_idx], z[order_idx]
    log_q, log_1mq = np.log(q), np.log1p(-q)
    start = 0
    while start < sorted_alphas.size:
        stop = start + 1
        while (
            stop < sorted_alphas.size
            and sorted_alphas[stop] <= 2 * sorted_alphas[start]
            and (stop - start + 1) * sorted_alphas[stop] <= _MAX_WORK_ENTRIES
        ):
            stop += 1
        block = sorted_alphas[start:stop, None]
        block_z = sorted_z[start:stop, None]
        k = np.arange(2, int(block[-1, 0]) + 1, dtype=float)[None, :]
        valid = k <= block
        log_terms = (
            gammaln(block + 1.0)
            - gammaln(k + 1.0)
            - gammaln(np.where(valid, block - k, 0.0) + 1.0)
            + k * log_q
            + (block - k) * log_1mq
            + _log_expm1(k * (k - 1.0) / (2.0 * block_z * block_z))
        )
        log_terms = np.where(valid, log_terms, -np.inf)
        out[order_idx[start:stop]] = logsumexp(log_terms, axis=1)
        start = stop
    return out


def subsampled_gaussian_rdp_many(
    sampling_rate: float, noise_multipliers: np.ndarray, order: int
) -> np.ndarray:
    """:func:`subsampled_gaussian_rdp` at one integer order for many noise multipliers.

    Used to tabulate the filter's charges; entries with ``z = inf`` cost 0 (s² = 0). A NaN
    multiplier or a rate outside [0, 1] is refused (``ValueError``): NaN was taken for
    ``inf`` and charged 0 (review A).
    """
    z = np.asarray(noise_multipliers, dtype=float)
    alpha = float(_as_orders(order, integer=True)[0])
    q = float(sampling_rate)
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"sampling_rate must be in [0, 1], got {sampling_rate!r}")
    if np.isnan(z).any() or (z == -np.inf).any():
        raise ValueError("noise_multipliers must not be NaN or -inf")
    out = np.zeros_like(z)
    live = np.isfinite(z)
    if q == 0.0 or not live.any():
        return out
    if np.any(z[live] <= 0):
        raise ValueError("noise_multipliers must be > 0")
    if q == 1.0:
        out[live] = alpha / (2.0 * z[live] ** 2)
        return out
    alphas = np.full(int(live.sum()), alpha)
    out[live] = np.logaddexp(0.0, _log_a_minus_one(q, z[live], alphas)) / (alpha - 1.0)
    return out


def subsampled_gaussian_rdp(
    sampling_rate: float, noise_multiplier: float, orders: Orders
) -> np.ndarray:
    """RDP of the Poisson-subsampled Gaussian mechanism at integer orders (exact).

    ``ρ(α) = log(A_α) / (α − 1)`` with ``A_α`` from Mironov, Talwar & Zhang (2019),
    Sec. 3.3 — the closed form dp_accounting, Opacus and S-BDT use. Computed in log space
    through ``A_α − 1`` (see :func:`_log_a_minus_one`), stable for orders up to 10,000 and
    beyond. ``sampling_rate = 1`` gives the plain Gaussian, ``0`` gives 0.

    Examples
    --------
    >>> float(subsampled_gaussian_rdp(1.0, 2.0, 8)[0])
    1.0
    >>> round(float(subsampled_gaussian_rdp(0.1, 89.1515 / 2**0.5, 410)[0]) * 50, 8)
    0.02603719
    """
    q = float(sampling_rate)
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"sampling_rate must be in [0, 1], got {sampling_rate!r}")
    z = _check_noise_multiplier(noise_multiplier)
    alphas = _as_orders(orders, integer=True)
    if q == 0.0:
        return np.zeros_like(alphas)
    if z == 0.0:
        return np.full_like(alphas, np.inf)
    if q == 1.0:
        return gaussian_rdp(z, alphas)
    log_a = np.logaddexp(0.0, _log_a_minus_one(q, np.full_like(alphas, z), alphas))
    return log_a / (alphas - 1.0)


def laplace_rdp(epsilon: float, orders: Orders) -> np.ndarray:
    """RDP of an ε-DP Laplace mechanism (Mironov 2017, Prop. 6; S-GBDT Thm. 20).

    ``ρ(α) = 1/(α−1) · log(α/(2α−1) · e^{(α−1)ε} + (α−1)/(2α−1) · e^{−αε})``,
    evaluated with ``logaddexp`` so large orders do not overflow.

    Examples
    --------
    >>> bool(laplace_rdp(1.0, [2, 1000])[1] < 1.0)
    True
    """
    eps, alphas = _pure_epsilon(epsilon, orders)
    log_mix = np.logaddexp(
        np.log(alphas / (2 * alphas - 1)) + (alphas - 1) * eps,
        np.log((alphas - 1) / (2 * alphas - 1)) - alphas * eps,
    )
    return _rounded_up(log_mix / (alphas - 1), eps, alphas)


def exponential_rdp(epsilon: float, orders: Orders) -> np.ndarray:
    """RDP of an ε-DP exponential mechanism (scores of sensitivity Δ, weights
    ``exp(ε u / (2Δ))``): ``min(ε, α ε² / 8)``.

    The exponential mechanism is ε-bounded-range (Durfee & Rogers 2019), and ε-bounded
    range implies ε²/8-zCDP, i.e. ``(α, α ε² / 8)``-RDP (Cesar & Rogers 2021, "Bounding,
    Concentrating, and Truncating", Lemma 3.2); every ε-DP mechanism is also
    ``(α, ε)``-RDP: ε-DP is ``(∞, ε)``-RDP (Mironov 2017, the definition at order ∞),
    and the Rényi divergence does not decrease with its order (van Erven & Harremoës
    2014, Thm. 3).

    Examples
    --------
    >>> exponential_rdp(0.4, [2, 100]).round(4).tolist()
    [0.04, 0.4]
    """
    eps, alphas = _pure_epsilon(epsilon, orders)
    return np.minimum(eps, alphas * eps**2 / 8.0)


def pure_dp_rdp(epsilon: float, orders: Orders) -> np.ndarray:
    """RDP of any ε-DP mechanism: ``min(ε, α ε² / 2)``.

    ε-DP implies ε²/2-zCDP (Bun & Steinke 2016, "Concentrated Differential Privacy",
    Prop. 3.3), i.e. ``(α, α ε² / 2)``-RDP, and ``(α, ε)``-RDP (see :func:`exponential_rdp`;
    Mironov 2017's Prop. 3 is the conversion to (ε, δ), not this). For a
    mechanism that is ε-DP but not ε-bounded-range, whose privacy loss can span up to 2ε
    (permute-and-flip, McKenna & Sheldon 2020), the exponential mechanism's ε²/8 does not
    hold.

    Examples
    --------
    >>> pure_dp_rdp(0.4, [2, 100]).round(4).tolist()
    [0.16, 0.4]
    """
    eps, alphas = _pure_epsilon(epsilon, orders)
    return np.minimum(eps, alphas * eps**2 / 2.0)


def randomized_response_rdp(epsilon: float, orders: Orders) -> np.ndarray:
    """RDP of ε-DP binary randomized response (report the truth with probability
    ``p = e^ε/(1 + e^ε)``; Duchi et al.'s one-bit mechanism is one):

    ``ρ(α) = 1/(α−1) · log(p^α (1−p)^{1−α} + (1−p)^α p^{1−α})`` (Mironov 2017, Prop. 5),
    evaluated in logs so large orders do not overflow.

    Examples
    --------
    >>> bool(randomized_response_rdp(1.0, [2, 1000])[1] < 1.0)
    True
    """
    eps, alphas = _pure_epsilon(epsilon, orders)
    log_p, log_q = -np.logaddexp(0.0, -eps), -np.logaddexp(0.0, eps)
    log_mix = np.logaddexp(alphas * log_p + (1 - alphas) * log_q,
                           alphas * log_q + (1 - alphas) * log_p)
    return _rounded_up(log_mix / (alphas - 1), eps, alphas)
