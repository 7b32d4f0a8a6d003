"""The privacy inputs, checked once at every boundary: a target ε and a target δ.

Learners, services, the CLI and :class:`~renyiboost.accounting.budget.PrivacyAccountant`
all read them through these two functions, so a value one of them refuses is refused by
every one, with the same message (scikit-learn style: the parameter is named and the value
shown). A bool or a string is never read as a number: ``True`` is not ε = 1 and ``"nan"``
is not a float.
"""

from __future__ import annotations

import math
import numbers
from typing import Annotated, Any, Literal, overload

from pydantic import BeforeValidator, Field

#: The largest δ a learner or an accountant accepts. δ is the probability with which the
#: guarantee may fail outright (a mechanism that publishes one random key's records verbatim
#: satisfies (ε, δ)-DP with δ = 1/n), so it must be far below 1/n: README uses 10⁻⁶. A δ
#: above 1 % is not even below 1/n for a hundred records, and no DP use is served by it, so
#: it is refused; a smaller one that is not below 1/n of the expected size is warned about
#: (:func:`~renyiboost.models.defaults.check_privacy_inputs`).
MAX_DELTA = 0.01


def _as_real(value: Any) -> float:
    """``value`` as a float if it is a real number (not a bool, a string or a complex);
    NaN otherwise, so that every range check fails on it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return math.nan
    try:
        return float(value)
    except OverflowError:  # an int beyond the float range
        return math.inf if value > 0 else -math.inf


@overload
def check_epsilon(epsilon: Any, *, allow_none: Literal[False]) -> float: ...
@overload
def check_epsilon(epsilon: Any, *, allow_none: bool = True) -> float | None: ...
def check_epsilon(epsilon: Any, *, allow_none: bool = True) -> float | None:
    """ε as a float: a real number, finite and > 0, or ``None`` (no privacy) where
    ``allow_none``.

    >>> check_epsilon(1)
    1.0
    >>> check_epsilon(float("nan"))
    Traceback (most recent call last):
    ...
    ValueError: epsilon must be a finite number > 0 (or None: no privacy), got nan
    """
    if epsilon is None and allow_none:
        return None
    value = _as_real(epsilon)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"epsilon must be a finite number > 0"
                         f"{' (or None: no privacy)' if allow_none else ''}, got {epsilon!r}")
    return value


def check_delta(delta: Any, *, allow_zero: bool = False) -> float:
    """δ as a float: a real number with 0 < δ ≤ :data:`MAX_DELTA`; δ = 0 too where
    ``allow_zero`` (an accountant's total for pure-DP mechanisms only).

    >>> check_delta(1e-6)
    1e-06
    >>> check_delta(float("inf"))
    Traceback (most recent call last):
    ...
    ValueError: delta must be a finite number with 0 < delta < 1, got inf
    """
    value = _as_real(delta)
    if not (math.isfinite(value) and (0 <= value if allow_zero else 0 < value) and value < 1):
        raise ValueError(f"delta must be a finite number with {'0 <=' if allow_zero else '0 <'}"
                         f" delta < 1, got {delta!r}")
    if value > MAX_DELTA:
        raise ValueError(f"delta must be at most {MAX_DELTA:g}, got {delta!r}: δ is the "
                         "probability that the guarantee fails and should be far below 1/n "
                         "for n records (e.g. 1e-6); no DP use is served by a larger one")
    return value


def _check_private_epsilon(epsilon: Any) -> float:
    return check_epsilon(epsilon, allow_none=False)


#: The ranges again as plain constraints, after the checks, so that a config's JSON schema
#: states them (``exclusiveMinimum``, ``maximum``); the checks above refuse first.
_PositiveFinite = Annotated[float, Field(gt=0, allow_inf_nan=False)]
_DeltaRange = Annotated[float, Field(gt=0, le=MAX_DELTA)]

#: A pydantic field for ε of a model or config that may also train without privacy
#: (``None``), read through :func:`check_epsilon` before pydantic would convert it (a bool
#: or a string is refused, not read as a number).
OptionalEpsilon = Annotated[_PositiveFinite | None, BeforeValidator(check_epsilon)]
#: A pydantic field for ε of a learner that is always private (the peers' learners).
Epsilon = Annotated[_PositiveFinite, BeforeValidator(_check_private_epsilon)]
#: A pydantic field for a target δ, read through :func:`check_delta`.
Delta = Annotated[_DeltaRange, BeforeValidator(check_delta)]


__all__ = ["MAX_DELTA", "Delta", "Epsilon", "OptionalEpsilon", "check_delta", "check_epsilon"]
