"""Private selection among candidate configurations (Papernot & Steinke 2022).

Tuning on private data leaks it unless the tuning itself is private. Papernot & Steinke,
"Hyperparameter Tuning with Rényi Differential Privacy" (ICLR 2022), Thm. 2: let each run
``Q`` (pick a candidate, train it, release a noisy validation score) be (λ, ε)-RDP and
(λ̂, ε̂)-RDP; run ``Q`` a random number ``K`` of times, ``K`` from a truncated negative
binomial with shape η and parameter γ, and release only the best run's output (not K:
the bound is for the output with K hidden, and the pair (K, best) is not covered). Then the
whole is (λ, ε')-RDP with

    ε' = ε + (1 + η)·((1 − 1/λ̂)·ε̂ + log(1/γ)/λ̂) + log(E[K]) / (λ − 1).

We use the geometric distribution (η = 1: ``K`` ≥ 1 with P(K = k) = γ(1 − γ)^(k−1), E[K] =
1/γ; this is also Liu & Talwar 2019's random stopping) and one order for everything,
λ = λ̂ = α̂, because our runs are Rényi-filtered at one order only (their guarantee is
(α̂, B)-RDP and nothing is known at other orders). With μ = E[K]:

    ε'(α̂) = B + 2·((1 − 1/α̂)·B + log(μ)/α̂) + log(μ)/(α̂ − 1).

With μ = 1 (γ = 1) K is 1 always and the output is one run's, so ε' = B; the theorem's
(3 − 2/α̂)·B is used only above it.

``tests/test_defaults.py`` checks this against ``dp_accounting``'s
``_compute_rdp_repeat_and_select`` (shape 1) to 1e-12.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from renyiboost.accounting.conversion import dp_epsilon_at_orders


def selection_rdp(run_rdp: float, order: int, mean_runs: float) -> float:
    """ε'(α̂) of repeat-and-select with geometric runs of mean ``mean_runs`` (module
    docstring), for runs that are (``order``, ``run_rdp``)-RDP."""
    if order <= 1 or mean_runs < 1 or run_rdp < 0:
        raise ValueError("need order > 1, mean_runs >= 1 and run_rdp >= 0")
    if mean_runs == 1:
        # γ = 1: K = 1 always, and the output is one run's, (α̂, B)-RDP by definition. The
        # theorem's bound stays loose there ((3 − 2/α̂)·B), so it is not used for it.
        return run_rdp
    log_mean = math.log(mean_runs)
    return (run_rdp + 2.0 * ((1.0 - 1.0 / order) * run_rdp + log_mean / order)
            + log_mean / (order - 1))


class SelectionBudget(BaseModel):
    """How a total (ε, δ) splits into the runs of a private selection."""

    model_config = ConfigDict(frozen=True)

    epsilon: float = Field(description="the total ε achieved (≤ the target)")
    delta: float
    order: int
    mean_runs: float
    run_rdp: float = Field(description="RDP budget B at α̂ of one run (per record)")
    run_epsilon: float = Field(description="what one run's budget converts to, alone")
    total_rdp: float

    @classmethod
    def split(cls, epsilon: float, delta: float, order: int, mean_runs: float
              ) -> SelectionBudget:
        """The largest per-run budget B whose selection converts to at most ``epsilon``.

        ε'(α̂; B) is affine in B, so B = (ρ − ε'(α̂; 0)) / (ε'(α̂; 1) − ε'(α̂; 0)), where ρ is
        the largest total RDP at α̂ that converts to ``epsilon`` (bisection on the monotone
        conversion). Too many runs for the ε leave no budget: an error says so.
        """
        if not (epsilon > 0 and math.isfinite(epsilon)):
            raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
        lo, hi = 0.0, 1.0
        while float(dp_epsilon_at_orders(order, hi, delta)[0]) <= epsilon:
            lo, hi = hi, 2.0 * hi
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if float(dp_epsilon_at_orders(order, mid, delta)[0]) <= epsilon:
                lo = mid
            else:
                hi = mid
        total = lo
        fixed = selection_rdp(0.0, order, mean_runs)
        slope = selection_rdp(1.0, order, mean_runs) - fixed
        run_rdp = (total - fixed) / slope
        if run_rdp <= 0:
            raise ValueError(
                f"epsilon={epsilon} at order {order} cannot pay for {mean_runs:g} expected "
                "runs of a selection: use fewer runs or a larger epsilon")
        def achieved_at(run: float) -> float:
            return float(dp_epsilon_at_orders(order, selection_rdp(run, order, mean_runs),
                                              delta)[0])

        achieved = achieved_at(run_rdp)
        if achieved > epsilon:  # the affine inverse rounded up (by an ulp or a few)
            low, high = 0.0, run_rdp  # bisect: an ulp at a time could take 10⁹ steps
            for _ in range(200):
                mid = 0.5 * (low + high)
                if achieved_at(mid) <= epsilon:
                    low = mid
                else:
                    high = mid
            run_rdp, achieved = low, achieved_at(low)
        return cls(epsilon=achieved, delta=delta, order=order, mean_runs=mean_runs,
                   run_rdp=run_rdp,
                   run_epsilon=float(dp_epsilon_at_orders(order, run_rdp, delta)[0]),
                   total_rdp=selection_rdp(run_rdp, order, mean_runs))


__all__ = ["SelectionBudget", "selection_rdp"]
