"""Calibration: choose the noise scale σ and one Rényi order α̂ for a target (ε, δ).

The individual Rényi filter (Feldman & Zrnic 2020) enforces a per-record RDP budget at one
fixed order α̂; the (ε, δ) statement is the conversion of that budget at α̂
(:func:`~renyiboost.accounting.conversion.dp_epsilon_at_orders`). A record's budget is

    B = T · charge(full sensitivity) + init charge + grid charge,

what a record of full sensitivity spends in the T nominal rounds plus the DP initial score
and, for a learner with a private split grid, the grid's histograms
(:mod:`renyiboost.accounting.grid`). Records with smaller gradients are charged less per
round and so take part in more rounds.

The search: the initial score takes ``init_share`` of the total RDP at α̂, the grid
``grid_share``, the trees the rest. ε(σ) = min over orders of the converted total is
decreasing in σ, so σ is found by bisection on a geometric grid of orders, the best order
is then refined over every integer near it, and σ is bisected once more at that single
order.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_serializer

from renyiboost.accounting.conversion import dp_epsilon_at_orders
from renyiboost.accounting.rdp import gaussian_rdp, subsampled_gaussian_rdp

#: Relative slack between a record's budget and T full charges, so that floating-point
#: sums of T charges never make the T-th round ineligible. It is *inside* the budget, so
#: the reported ε accounts for it.
BUDGET_SLACK = 1e-9


class Calibration(BaseModel):
    """Outcome of :func:`calibrate`; everything a privacy report needs to reproduce ε."""

    model_config = ConfigDict(frozen=True)

    target_epsilon: float = Field(gt=0)
    epsilon: float = Field(description="ε achieved by the per-record budget at `order`")
    delta: float = Field(gt=0, lt=1)
    order: int = Field(ge=2, description="the single Rényi order α̂ of the filter")
    sigma: float = Field(gt=0, description="noise scale of the tree leaves")
    init_sigma: float | None = Field(description="noise scale of the initial score, or None")
    rounds: int = Field(ge=1, description="nominal full-sensitivity rounds T")
    sampling_rate: float = Field(gt=0, le=1)
    count_share: float = Field(gt=0, lt=1)
    init_share: float = Field(ge=0, lt=1)
    round_charge: float = Field(description="RDP at α̂ of one round for a full-sensitivity record")
    init_charge: float = Field(description="RDP at α̂ of the initial score (worst case)")
    budget_rdp: float = Field(description="per-record RDP budget B at α̂")
    grid_share: float = Field(0.0, ge=0, lt=1)
    grid_charge: float = Field(0.0, description="RDP at α̂ of the private split grid")

    def share_charge(self, share: float) -> float:
        """The RDP at α̂ of a mechanism that takes ``share`` of the budget B without having
        been reserved in it (the split grid an unhinted stream buys at its end from what its
        records left unspent: the filter admits only the keys that can still afford it)."""
        if not 0 < share < 1:
            raise ValueError(f"share must be in (0, 1), got {share!r}")
        return share * self.budget_rdp

    @model_serializer(mode="wrap")
    def _without_an_unused_grid(self, handler: Any) -> dict[str, Any]:
        """A calibration without a grid dumps as it did before the grid existed, so the
        fingerprint of a store written then still matches."""
        dumped = handler(self)
        if self.grid_share == 0:
            dumped.pop("grid_share", None)
            dumped.pop("grid_charge", None)
        return dumped


def _round_rdp(sigma: float, sampling_rate: float, orders: np.ndarray) -> np.ndarray:
    """RDP of one round for a full-sensitivity record (s² = 1, z = σ/√2)."""
    return subsampled_gaussian_rdp(sampling_rate, sigma / math.sqrt(2.0), orders)


def _epsilon(
    sigma: float, orders: np.ndarray, rounds: int, sampling_rate: float, reserved_share: float,
    delta: float,
) -> np.ndarray:
    """ε of the budget whose trees take ``1 − reserved_share`` of it (the initial score and
    the grid the rest)."""
    total = rounds * _round_rdp(sigma, sampling_rate, orders) / (1.0 - reserved_share)
    return dp_epsilon_at_orders(orders, total * (1.0 + BUDGET_SLACK), delta)


def _bisect_sigma(
    target: float, orders: np.ndarray, rounds: int, sampling_rate: float, reserved_share: float,
    delta: float, rel_tol: float,
) -> float:
    """Smallest σ (to ``rel_tol``) whose ε, minimised over ``orders``, is ≤ ``target``."""

    def eps(sigma: float) -> float:
        return float(np.min(_epsilon(sigma, orders, rounds, sampling_rate, reserved_share,
                                     delta)))

    lo, hi = 1e-3, 1.0
    while eps(hi) > target:
        lo, hi = hi, hi * 4.0
        if hi > 1e12:
            raise ValueError(
                f"no noise scale reaches epsilon={target} at orders up to {int(orders.max())}: "
                "at a small epsilon the conversion's log(1/delta)/(order - 1) term needs "
                "larger orders (raise max_order) or a larger delta")
    while eps(lo) <= target and lo > 1e-12:
        lo /= 4.0
    while hi / lo - 1.0 > rel_tol:
        mid = math.sqrt(lo * hi)
        if eps(mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi


@functools.lru_cache(maxsize=256)
def calibrate(
    epsilon: float,
    delta: float,
    rounds: int,
    sampling_rate: float = 1.0,
    count_share: float = 0.5,
    init_share: float = 0.05,
    max_order: int = 4096,
    order: int | None = None,
    grid_share: float = 0.0,
) -> Calibration:
    """Choose σ and α̂ so that a record's budget converts to at most ``epsilon``.

    Parameters
    ----------
    epsilon, delta
        Target (ε, δ). δ is public and should be well below 1/n.
    rounds
        Nominal number T of rounds a full-sensitivity record can afford.
    sampling_rate
        Poisson sampling rate γ of a round.
    count_share
        r1: share of the leaf noise power on the count (S-GBDT Cor. 22).
    init_share
        Share of the RDP budget at α̂ spent on the DP initial score; 0 skips it.
    max_order
        Largest integer order searched (at least 4,096 by default: small ε needs it).
    order
        Use this Rényi order instead of searching one (a mechanism composed with others at
        one shared order, e.g. the candidates of a private selection, must use it).
    grid_share
        Share of the RDP budget at α̂ spent on a private split grid
        (:class:`~renyiboost.accounting.grid.SplitGridRelease`); 0 (the paper's learner):
        the trees split on the public bounds alone.

    The result is a function of these public inputs alone, so it is cached (256 entries per
    process): a refit, a restart or a grid of runs does not bisect again (a calibration took
    a quarter of an Adult fit). :class:`Calibration` is frozen, so sharing it is safe.

    Examples
    --------
    >>> cal = calibrate(epsilon=0.5, delta=1e-6, rounds=100, sampling_rate=0.1)
    >>> cal.epsilon <= 0.5 and cal.epsilon > 0.5 * 0.995
    True
    """
    # a bool is no number of these (calibrate(True, 1e-6, 5) once calibrated ε = 1, and
    # rounds=True one round: review Q #6)
    if (given := next((name for name, value in (("epsilon", epsilon), ("delta", delta),
                       ("rounds", rounds), ("sampling_rate", sampling_rate))
                       if isinstance(value, bool | np.bool_)), None)) is not None:
        raise ValueError(f"{given} must be a number, not a bool")
    if not epsilon > 0 or not math.isfinite(epsilon):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    if not (isinstance(rounds, int | np.integer) and rounds >= 1):
        raise ValueError(f"rounds must be an integer >= 1, got {rounds!r}")
    if not 0 < sampling_rate <= 1:
        raise ValueError(f"sampling_rate must be in (0, 1], got {sampling_rate!r}")
    if not 0 < count_share < 1:
        raise ValueError(f"count_share must be in (0, 1), got {count_share!r}")
    if not 0 <= init_share < 1:
        raise ValueError(f"init_share must be in [0, 1), got {init_share!r}")
    if not 0 <= grid_share < 1 or not init_share + grid_share < 1:
        raise ValueError(f"grid_share must be in [0, 1 - init_share), got {grid_share!r} "
                         f"with init_share {init_share!r}")
    if not max_order >= 2:
        raise ValueError(f"max_order must be >= 2, got {max_order!r}")
    rounds = int(rounds)
    if order is not None:
        if not (isinstance(order, int | np.integer) and order >= 2):
            raise ValueError(f"order must be an integer >= 2, got {order!r}")
        order = int(order)
        sigma = _bisect_sigma(epsilon, np.array([float(order)]), rounds, sampling_rate,
                              init_share + grid_share, delta, rel_tol=1e-10)
        return _calibration(epsilon, delta, rounds, sampling_rate, count_share, init_share,
                            order, sigma, grid_share)

    # 1. σ on a geometric grid of orders (ratio ~1.15): cheap, and an upper bound on ε.
    coarse = np.unique(np.round(np.geomspace(2, max_order, 60)))
    args = (rounds, sampling_rate, init_share + grid_share, delta)
    sigma = _bisect_sigma(epsilon, coarse, *args, rel_tol=1e-4)
    # 2. The best integer order near the best grid order, at that σ (ternary search: ε is
    #    unimodal in the order there; any order gives a valid bound, this one the least).
    best = float(coarse[np.argmin(_epsilon(sigma, coarse, *args))])
    lo, hi = max(2, math.floor(best / 1.2)), min(max_order, math.ceil(best * 1.2))

    def eps_at(order: int) -> float:
        return float(_epsilon(sigma, np.array([float(order)]), *args)[0])

    while hi - lo > 2:
        m1, m2 = lo + (hi - lo) // 3, hi - (hi - lo) // 3
        if eps_at(m1) <= eps_at(m2):
            hi = m2
        else:
            lo = m1
    order = min(range(lo, hi + 1), key=eps_at)
    # 3. σ once more at that single order, to full precision.
    sigma = _bisect_sigma(epsilon, np.array([float(order)]), *args, rel_tol=1e-10)
    return _calibration(epsilon, delta, rounds, sampling_rate, count_share, init_share, order,
                        sigma, grid_share)


def _calibration(
    epsilon: float, delta: float, rounds: int, sampling_rate: float, count_share: float,
    init_share: float, order: int, sigma: float, grid_share: float = 0.0,
) -> Calibration:
    """The budget and charges of noise scale ``sigma`` at ``order``."""
    round_charge = float(_round_rdp(sigma, sampling_rate, np.array([float(order)]))[0])
    trees_rdp = rounds * round_charge
    trees_share = 1.0 - init_share - grid_share
    init_charge = trees_rdp * init_share / trees_share
    grid_charge = trees_rdp * grid_share / trees_share
    init_sigma = None
    if init_share > 0:
        # Init leaf: q = 1 Gaussian with s² ≤ 1, ρ = α/σ_init² (see renyiboost.accounting.leaf).
        init_sigma = math.sqrt(order / init_charge)
        init_charge = float(gaussian_rdp(init_sigma / math.sqrt(2.0), order)[0])
    budget = (trees_rdp + init_charge + grid_charge) * (1.0 + BUDGET_SLACK)
    achieved = float(dp_epsilon_at_orders(order, budget, delta)[0])
    if epsilon < achieved <= epsilon * (1.0 + 1e-9):
        # the bisection's ε and this one round apart only: a hair more noise, so that the
        # reported ε never passes the target (review Q #6; it once could by 1e-9)
        return _calibration(epsilon, delta, rounds, sampling_rate, count_share, init_share,
                            order, sigma * (1.0 + 1e-9), grid_share)
    if achieved > epsilon:
        raise RuntimeError(f"calibration reached epsilon={achieved!r} for a target of "
                           f"{epsilon!r} (sigma={sigma!r}, order={order}): refusing a noise "
                           "scale that does not meet the target")
    return Calibration(
        target_epsilon=epsilon,
        epsilon=achieved,
        delta=delta,
        order=order,
        sigma=sigma,
        init_sigma=init_sigma,
        rounds=rounds,
        sampling_rate=sampling_rate,
        count_share=count_share,
        init_share=init_share,
        round_charge=round_charge,
        init_charge=init_charge,
        budget_rdp=budget,
        grid_share=grid_share,
        grid_charge=grid_charge,
    )


def stage_calibrations(main: Calibration, stage_rounds: tuple[int, ...]) -> list[Calibration]:
    """The noise scales of a stream's earlier stages, each for ``stage_rounds[k]`` nominal
    rounds, at the order of ``main``.

    A stream without a size hint does not know how long it will be. Its rounds are split
    into stages by public positions; the rounds of stage k use the σ that a stream of
    ``stage_rounds[k]`` nominal rounds would get, so a short stream gets trees as precise as
    its length allows, and a long one ends at ``main``'s σ. The individual Rényi filter
    (Feldman & Zrnic 2020, Thm. 3.3: the budget holds for any sequence of mechanisms chosen
    from public information before each round) charges every record the RDP of the σ of the
    round it takes part in, at the single order α̂ = ``main.order``, against ``main``'s
    budget B. Each stage's σ is calibrated at that same order (an order chosen for ``main``,
    not for the stage), so its own budget converts to the same ε: a full-sensitivity record
    present from the start of stage k affords about ``stage_rounds[k]`` of its rounds, and
    what it does not spend there it keeps for later ones.

    >>> main = calibrate(epsilon=1.0, delta=1e-6, rounds=200, sampling_rate=1.0)
    >>> early, = stage_calibrations(main, (40,))
    >>> early.order == main.order and early.sigma < main.sigma
    True
    """
    return [calibrate(epsilon=main.target_epsilon, delta=main.delta, rounds=int(rounds),
                      sampling_rate=main.sampling_rate, count_share=main.count_share,
                      init_share=main.init_share, order=main.order,
                      grid_share=main.grid_share)
            for rounds in stage_rounds]
