"""Conversion from Rényi-DP to (ε, δ)-DP."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from renyiboost.accounting.rdp import Orders, _as_orders


def dp_epsilon_at_orders(
    orders: Orders,
    rdp: float | np.ndarray,
    delta: float,
    *,
    method: Literal["balle2020", "classic"] = "balle2020",
) -> np.ndarray:
    """ε implied at each order by the RDP guarantee ``rdp`` (vectorised, no minimum).

    ``balle2020``: ε = ρ + log((α−1)/α) − (log δ + log α)/(α−1)
    (Balle, Barthe, Gaboardi, Hsu, Sato 2020, "Hypothesis testing interpretations and
    Rényi differential privacy", Thm. 21; also Canonne, Kamath, Steinke 2020, Prop. 12).
    ``classic``: ε = ρ + log(1/δ)/(α−1) (Mironov 2017, Prop. 3).
    Values are clipped at 0 from below. An RDP value must be ≥ 0 (a divergence) or ``inf``
    (no guarantee at that order, e.g. the Gaussian without noise); a NaN or a negative value
    is refused: it is an accounting bug, and the minimum of :func:`rdp_to_dp` would pick a
    NaN (``argmin`` returns it) or an ε below the truth.
    """
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    alphas = _as_orders(orders, integer=False)
    rho = np.broadcast_to(np.asarray(rdp, dtype=float), alphas.shape)
    if not np.all(rho >= 0.0):  # NaN fails the comparison too
        bad = rho[~(rho >= 0.0)]
        raise ValueError(f"rdp must be >= 0 at every order (inf allowed), got "
                         f"{np.unique(bad)[:5].tolist()} at {bad.size} of {rho.size} orders")
    if method == "balle2020":
        eps = rho + np.log1p(-1.0 / alphas) - (math.log(delta) + np.log(alphas)) / (alphas - 1)
    elif method == "classic":
        eps = rho - math.log(delta) / (alphas - 1)
    else:
        raise ValueError(f"method must be 'balle2020' or 'classic', got {method!r}")
    return np.maximum(eps, 0.0)


def rdp_to_dp(
    orders: Orders,
    rdp: float | np.ndarray,
    delta: float,
    *,
    method: Literal["balle2020", "classic"] = "balle2020",
) -> tuple[float, float]:
    """Smallest ε over the orders for an RDP curve, and the order that achieves it.

    Returns ``(epsilon, order)``. See :func:`dp_epsilon_at_orders` for the formulas.

    Examples
    --------
    >>> from renyiboost.accounting.rdp import subsampled_gaussian_rdp
    >>> orders = range(2, 2001)
    >>> eps, order = rdp_to_dp(orders, 50 * subsampled_gaussian_rdp(0.1, 63.04, orders), 5e-8)
    >>> round(eps, 4), order
    (0.05, 411.0)
    """
    alphas = _as_orders(orders, integer=False)
    eps = dp_epsilon_at_orders(alphas, rdp, delta, method=method)
    best = int(np.argmin(eps))
    return float(eps[best]), float(alphas[best])
