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
from fractions import Fraction
from typing import Any

from renyiboost.accounting.inputs import check_delta, check_epsilon
from renyiboost.exceptions import BudgetExceeded, LedgerConflict

#: What is left below this share of the total reads 0 in a refusal.
SLACK = 1e-9


def _left(remaining: float, total: float) -> float:
    """What a refusal says is left: 0 below :data:`SLACK` of the total (a budget spent to
    the last charge read "1.07e-10 left", which no model can be planned at)."""
    return remaining if remaining > SLACK * total else 0.0


def _decimal(x: float) -> Fraction:
    """``x`` as the decimal it is written as (``repr``: 0.1 is one tenth), exactly."""
    return Fraction(repr(float(x)))


def _fits(spent: list[float], charge: float, total: float) -> bool:
    """Whether ``charge`` on top of ``spent`` stays within ``total``, summed exactly as
    the decimals they are written as (``repr``: 0.1 is one tenth): a slack of 1e-9 of the
    total once let the models' sum pass the budget the data owner set (review Q #1), and
    the binary fractions the floats hold refused ten models of 0.1 under 1.0, 0.1 being a
    hair above a tenth in binary (review D6)."""
    return sum(map(_decimal, (*spent, charge)), Fraction(0)) <= _decimal(total)


def _largest_fitting(spent: list[float], total: float) -> float:
    """The largest charge that :func:`_fits`: what is left, so that a model planned at
    exactly that is accepted (``total - sum`` rounded may pass it by an ulp)."""
    exact = _decimal(total) - sum(map(_decimal, spent), Fraction(0))
    left = max(float(exact), 0.0)  # within half an ulp of it: a step or two below
    while left > 0.0 and not _fits(spent, left, total):
        left = math.nextafter(left, 0.0)
    while _fits(spent, up := math.nextafter(left, math.inf), total):
        left = up
    return left


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
        return _largest_fitting([c.epsilon for c in self.charges], self.epsilon)

    @property
    def remaining_delta(self) -> float:
        return _largest_fitting([c.delta for c in self.charges], self.delta)

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
        if not _fits([c.epsilon for c in self.charges], epsilon, self.epsilon):
            raise BudgetExceeded(
                f"{name!r} would spend ε = {epsilon:.12g} of a budget with ε = "
                f"{_left(self.remaining_epsilon, self.epsilon):.12g} left (of "
                f"{self.epsilon:.4g}; charged so far: {so_far})")
        if not _fits([c.delta for c in self.charges], delta, self.delta):
            raise BudgetExceeded(
                f"{name!r} would spend δ = {delta:.12g} of a budget with δ = "
                f"{_left(self.remaining_delta, self.delta):.12g} left (of {self.delta:.3g}; "
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
