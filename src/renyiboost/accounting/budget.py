"""A privacy budget that several models trained on the same data draw from (issue 16,
item 5).

Each renyiboost model reports its own (ε, δ); fitted on the same records, k of them together
spend more. :class:`PrivacyAccountant` holds the total and charges each model **before** it
reads any record: its planned (ε, δ), which its parameters fix (a batch S-GBDT's target ε,
including the count it may buy; a stream's per-key guarantee for its whole lifetime; the
pure-DP learners' ε; the additive learner's GDP-converted (ε, δ)). A model that would
overspend is refused with :class:`~renyiboost.exceptions.BudgetExceeded` and charged
nothing, and so is every later fit of a batch model once the budget is gone (a refit reads
the records again).

Composition is sequential composition of (ε, δ)-DP (Dwork & Roth 2014, Thm. 3.16): the ε
and the δ add up. It holds for any mix of mechanisms and any adaptivity between the models,
which is what a model-selection loop does; it is not tight (an RDP composition of several
S-GBDT models at one order would be), and it is stated so.

FedXGBoost-LDP cannot draw from it: its guarantee is local DP of the labels only, and its
feature holder sees the features, so it does not bound a record's privacy loss.

Examples
--------
>>> from renyiboost.accounting.budget import PrivacyAccountant
>>> budget = PrivacyAccountant(epsilon=3.0, delta=1e-6)
>>> budget.charge("first", 1.0, 2e-7); budget.charge("second", 1.5, 2e-7)
>>> round(budget.remaining_epsilon, 6)
0.5
>>> budget.charge("third", 1.0, 0.0)
Traceback (most recent call last):
...
renyiboost.exceptions.BudgetExceeded: 'third' would spend ε = 1 of a budget with ε = 0.5 left (of 3; charged so far: first 1, second 1.5)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from renyiboost.accounting.inputs import check_delta, check_epsilon
from renyiboost.exceptions import BudgetExceeded, LedgerConflict

#: Relative slack for floating-point sums: a model planned at exactly what is left fits.
SLACK = 1e-9


def _left(remaining: float, total: float) -> float:
    """What a refusal says is left: 0 within the slack of the sums (a budget spent to the
    last charge read "1.07e-10 left", which no model can be planned at)."""
    return remaining if remaining > SLACK * total else 0.0


@dataclass(frozen=True)
class Charge:
    """One model's draw from the budget."""

    name: str
    epsilon: float
    delta: float


class PrivacyAccountant:
    """A total (ε, δ) for all models trained on the same data (see the module docstring).

    Parameters
    ----------
    epsilon, delta
        The total guarantee the data owner allows, over every model charged here.
    """

    def __init__(self, epsilon: float, delta: float) -> None:
        self.epsilon = check_epsilon(epsilon, allow_none=False)
        self.delta = check_delta(delta, allow_zero=True)
        self.charges: list[Charge] = []

    @property
    def spent_epsilon(self) -> float:
        return math.fsum(c.epsilon for c in self.charges)

    @property
    def spent_delta(self) -> float:
        return math.fsum(c.delta for c in self.charges)

    @property
    def remaining_epsilon(self) -> float:
        return self.epsilon - self.spent_epsilon

    @property
    def remaining_delta(self) -> float:
        return self.delta - self.spent_delta

    def charge(self, name: str, epsilon: float | None, delta: float | None) -> None:
        """Record a model's (ε, δ), or refuse it (nothing recorded) if the totals would pass
        the budget. ``epsilon=None`` is a model without privacy: refused, since it would
        spend the records without bound."""
        if epsilon is None:
            raise BudgetExceeded(f"{name!r} trains without privacy (epsilon=None): it cannot "
                                 "draw from a privacy budget")
        delta = 0.0 if delta is None else float(delta)
        if not (epsilon >= 0 and math.isfinite(epsilon)) or not 0 <= delta < 1:
            raise ValueError(f"a charge needs epsilon >= 0 and delta in [0, 1), got "
                             f"({epsilon!r}, {delta!r})")
        so_far = ", ".join(f"{c.name} {c.epsilon:.4g}" for c in self.charges) or "none"
        if epsilon > self.remaining_epsilon + SLACK * self.epsilon:
            raise BudgetExceeded(
                f"{name!r} would spend ε = {epsilon:.4g} of a budget with ε = "
                f"{_left(self.remaining_epsilon, self.epsilon):.4g} left (of "
                f"{self.epsilon:.4g}; charged so far: {so_far})")
        if delta > self.remaining_delta + SLACK * max(self.delta, 1e-300):
            raise BudgetExceeded(
                f"{name!r} would spend δ = {delta:.3g} of a budget with δ = "
                f"{_left(self.remaining_delta, self.delta):.3g} left (of {self.delta:.3g}; "
                f"charged so far: {so_far})")
        self.charges.append(Charge(name, float(epsilon), delta))

    def __copy__(self) -> PrivacyAccountant:
        """A copy of a model that draws from this budget draws from the same budget: the
        accountant is shared, never duplicated, since a duplicate would be a second budget
        for the same data (``copy.deepcopy`` and scikit-learn's ``clone`` of a model's
        parameters keep this very accountant)."""
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> PrivacyAccountant:
        return self

    def __reduce__(self) -> Any:
        raise LedgerConflict(
            f"{self!r} cannot be pickled: unpickled in another process it would be a second "
            "budget for the same data. Keep one accountant, in the process that trains the "
            "models drawing from it.")

    def __repr__(self) -> str:
        return (f"PrivacyAccountant(epsilon={self.epsilon:g}, delta={self.delta:g}, "
                f"spent=({self.spent_epsilon:.4g}, {self.spent_delta:.3g}), "
                f"models={len(self.charges)})")
