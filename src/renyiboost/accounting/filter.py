"""The individual Rényi filter (Feldman & Zrnic 2020, Alg. 3; S-GBDT Alg. 8).

Every record carries its own spent RDP at the fixed order α̂. Before a round, each record's
charge is computed from *its own* current squared sensitivity s² (a function of its clipped
gradient, see :mod:`renyiboost.accounting.leaf`): the subsampled-Gaussian RDP of a
Gaussian with noise multiplier σ/√(2 s²) at rate γ. A record is *eligible* when its spent
RDP plus that charge stays within the budget B; every eligible record is charged, whether
or not the Poisson draw picked it (the filter must not depend on the draw). A record whose
remaining budget is below the smallest possible charge can never be eligible again and is
retired for good. Feldman & Zrnic's Thm. 3.3 then gives every record (α̂, B)-RDP under
adaptive composition, however many rounds run.

Charges for whole arrays come from a table over s² ∈ [0, 1] that rounds s² *up* to the
next grid point; the charge is increasing in s², so the table never under-charges.

The rules exist twice, side by side in this module: vectorised in numpy (the classes, the
reference) and as compiled scalar functions (:func:`charge_code`, :func:`admitted`,
:func:`exhausted`) that the compiled training round
(:func:`renyiboost.models.kernels.round_pass`) calls record by record. Tests run both on the
same pool and require the same codes and spent budgets.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numba
import numpy as np

from renyiboost.accounting.rdp import subsampled_gaussian_rdp, subsampled_gaussian_rdp_many

#: Charge code of a record the filter did not admit to a round (charged nothing).
NOT_ELIGIBLE = np.uint16(65535)


@numba.njit(cache=True, nogil=True, inline="always")
def charge_code(sensitivity2: float, min_sensitivity2: float,
                resolution: int) -> int:  # pragma: no cover - compiled
    """Compiled twin of :meth:`ChargeTable.indices` after the floor of
    :meth:`IndividualRenyiFilter.step`: ``min(ceil(clip(max(s², floor), 0, 1)·res), res)``,
    the grid point at or *above* s² (rounding up never under-charges)."""
    s2 = min(max(max(sensitivity2, min_sensitivity2), 0.0), 1.0)
    return min(math.ceil(s2 * resolution), resolution)


@numba.njit(cache=True, nogil=True, inline="always")
def admitted(spent: float, charge: float, budget: float) -> bool:  # pragma: no cover
    """Compiled twin of the filter's eligibility: the charge fits in what is left."""
    return spent + charge <= budget


@numba.njit(cache=True, nogil=True, inline="always")
def exhausted(spent: float, budget: float, min_charge: float) -> bool:  # pragma: no cover
    """Compiled twin of :meth:`IndividualRenyiFilter.retired`."""
    return budget - spent < min_charge


class ChargeTable:
    """Per-round RDP charge at order α̂ as a function of s², rounded up on a grid.

    Examples
    --------
    >>> table = ChargeTable(sigma=20.0, sampling_rate=0.1, order=64, resolution=256)
    >>> bool(table.charges(np.array([1.0]))[0] >= table.exact(1.0))
    True
    """

    def __init__(
        self, sigma: float, sampling_rate: float, order: int, resolution: int = 1024
    ) -> None:
        if not 1 <= resolution < int(NOT_ELIGIBLE):
            raise ValueError(f"resolution must be in [1, {int(NOT_ELIGIBLE) - 1}], got {resolution}")
        self.sigma = float(sigma)
        self.sampling_rate = float(sampling_rate)
        self.order = int(order)
        self.resolution = int(resolution)
        grid = np.linspace(0.0, 1.0, self.resolution + 1)
        with np.errstate(divide="ignore"):
            z = self.sigma / np.sqrt(2.0 * grid)
        self.grid_charges = subsampled_gaussian_rdp_many(self.sampling_rate, z, self.order)
        # Floating-point noise must not break monotonicity (the rounding-up argument).
        self.grid_charges = np.maximum.accumulate(self.grid_charges)
        self.grid_charges.flags.writeable = False  # shared by every filter of these inputs

    @staticmethod
    @functools.lru_cache(maxsize=64)
    def cached(sigma: float, sampling_rate: float, order: int,
               resolution: int = 1024) -> ChargeTable:
        """The table of these public inputs, built once per process (at a large order a
        table took 0.3 s, as long as a whole fit; its grid is read-only, so it is shared)."""
        return ChargeTable(sigma, sampling_rate, order, resolution)

    def exact(self, sensitivity2: float) -> float:
        """Exact charge for squared sensitivity ``sensitivity2`` (no table)."""
        if sensitivity2 <= 0:
            return 0.0
        z = self.sigma / math.sqrt(2.0 * sensitivity2)
        return float(subsampled_gaussian_rdp(self.sampling_rate, z, self.order)[0])

    def indices(self, sensitivity2: np.ndarray) -> np.ndarray:
        """Grid index of each s² value, rounded up (the charge code the filter records)."""
        s2 = np.clip(np.asarray(sensitivity2, dtype=float), 0.0, 1.0)
        return np.minimum(np.ceil(s2 * self.resolution), self.resolution).astype(np.uint16)

    def charges(self, sensitivity2: np.ndarray) -> np.ndarray:
        """Charges for an array of s² values, each rounded up to the next grid point."""
        return self.grid_charges[self.indices(sensitivity2)]


@dataclass(frozen=True)
class FilterStep:
    """What one round of the filter decided, for arrays of records."""

    eligible: np.ndarray  # bool: may take part in this round (and is charged)
    charges: np.ndarray  # float: charge of each record this round (0 if not eligible)
    spent: np.ndarray  # float: spent RDP after the round
    retired: np.ndarray  # bool: can never be eligible again
    codes: np.ndarray  # uint16: grid index charged, or NOT_ELIGIBLE


class IndividualRenyiFilter:
    """Per-record budget enforcement at one Rényi order (vectorised over records).

    Parameters
    ----------
    budget_rdp
        B, each record's RDP budget at order α̂ (from :func:`calibrate`).
    table
        The charge table for the tree rounds.
    min_sensitivity2
        The charge floor: every admitted record is charged for at least this s² (charging
        more than a record's true sensitivity only over-counts, which is safe). The charge
        at it, ``c(min)``, is the smallest possible charge, so a key whose remaining budget
        is below it retires; a positive floor bounds every key's life to about
        ``B / c(min)`` rounds (for count leaves ``r1`` is the natural floor: a = 1 always).
    """

    def __init__(self, budget_rdp: float, table: ChargeTable, min_sensitivity2: float) -> None:
        if not 0 < min_sensitivity2 <= 1:
            raise ValueError(f"min_sensitivity2 must be in (0, 1], got {min_sensitivity2!r}: "
                             "without a positive floor a key might never retire")
        self.budget_rdp = float(budget_rdp)
        self.table = table
        self._min_sensitivity2 = float(min_sensitivity2)
        self.min_charge = float(table.charges(np.array([min_sensitivity2]))[0])

    @property
    def min_sensitivity2(self) -> float:
        """The charge floor (see the class docstring)."""
        return self._min_sensitivity2

    def retired(self, spent: np.ndarray) -> np.ndarray:
        """Records whose remaining budget is below the smallest possible charge."""
        return self.budget_rdp - spent < self.min_charge

    def affords(self, spent: np.ndarray, charge: float | np.ndarray) -> np.ndarray:
        """Records whose spent budget plus ``charge`` stays within B (the filter's rule for
        any mechanism: a round's leaves, a stream's split grid)."""
        return spent + charge <= self.budget_rdp

    def step(self, spent: np.ndarray, sensitivity2: np.ndarray) -> FilterStep:
        """Decide eligibility, charge the eligible records and flag the retired ones."""
        index = self.table.indices(np.maximum(sensitivity2, self._min_sensitivity2))
        charges = self.table.grid_charges[index]
        eligible = self.affords(spent, charges)
        codes = np.where(eligible, index, NOT_ELIGIBLE).astype(np.uint16)
        new_spent = self.charge(spent, codes)
        return FilterStep(eligible, np.where(eligible, charges, 0.0), new_spent,
                          self.retired(new_spent), codes)

    def charge(self, spent: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """Spent RDP after charging the codes of one round (the numpy path): each admitted
        record adds its grid charge, in the order the compiled round adds it, so both paths
        give the same spent budgets bit for bit."""
        eligible = codes != NOT_ELIGIBLE
        return spent + np.where(eligible, self.table.grid_charges[np.where(eligible, codes, 0)], 0.0)
