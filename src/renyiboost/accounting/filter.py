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
next grid point; the charge is increasing in s², so the table never under-charges. An s²
outside [0, 1] (NaN, or above 1 beyond rounding) means the leaf's sensitivity bound does not
hold for that record, so no charge on the table covers it: the filter fails closed. The numpy
path refuses it with an error; the compiled round, which cannot raise per record, charges
it in full (:func:`charge_code`) and does not admit a NaN or infinite one at all
(:func:`admitted_with`): charged nothing, it adds nothing to the round.

A stream's noise stages (:func:`~renyiboost.accounting.stage_calibrations`) share the order
α̂ and the budget B but not σ: an early stage is less noisy, so each of its rounds costs
more. A record that cannot afford an early stage's round may still afford the main stage's,
so "can never be eligible again" means below the smallest charge of the current *and every
later* stage (:meth:`IndividualRenyiFilter.staged`); a record between the two thresholds
stays active and is merely ineligible (charged nothing, in no sum) until a cheaper stage.

A spent budget is a sum of floats, and rounding to nearest can make it smaller than the
exact sum of the charges (by half a unit in the last place each time); admitted against
that, a record could end a hair above B. So a spent budget grows only by
:func:`charged`, the sum rounded *up* (exact, from the rounding error Knuth's TwoSum
gives): it is never below the exact sum of a record's charges, and the rule "spent plus
charge within B" is checked on that upper bound (37th session's review: a spent 0.75 and a
charge 0.25 + 2⁻⁵⁴ were admitted against B = 1).

The rules exist twice, side by side in this module: vectorised in numpy (the classes, the
reference) and as compiled scalar functions (:func:`charge_code`, :func:`charged_with`,
:func:`within`, :func:`admitted_with`, :func:`exhausted`) that the compiled training round
(:func:`renyiboost.models.kernels.round_pass`) calls record by record. Tests run both on the
same pool and require the same codes and spent budgets.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numba
import numpy as np

from renyiboost.accounting.rdp import subsampled_gaussian_rdp, subsampled_gaussian_rdp_many

#: Charge code of a record the filter did not admit to a round (charged nothing).
NOT_ELIGIBLE = np.uint16(65535)

#: How far above 1 a squared sensitivity may lie and still be charged as s² = 1: room for
#: the rounding of ``r1·a² + r2·b²`` (a few ulp), far below any escaped clip.
SENSITIVITY2_TOLERANCE = 1e-12


@numba.njit(cache=True, nogil=True, inline="always")
def charge_code(sensitivity2: float, min_sensitivity2: float,
                resolution: int) -> int:  # pragma: no cover - compiled
    """Compiled twin of :meth:`ChargeTable.indices` after the floor of
    :meth:`IndividualRenyiFilter.step`: ``min(ceil(clip(max(s², floor), 0, 1)·res), res)``,
    the grid point at or *above* s² (rounding up never under-charges).

    Any s² that is not ≤ 1 — NaN included, which a clip would let through (NaN compares
    false, and ``ceil(NaN)`` became −2⁶³, an index before the table) — gets the full charge,
    code ``resolution``: the code is always an index into the table and never below the
    charge at s² = 1. The round refuses a NaN or infinite s² outright
    (:func:`admitted_with`)."""
    if not sensitivity2 <= 1.0:
        return resolution
    s2 = max(max(sensitivity2, min_sensitivity2), 0.0)
    return min(math.ceil(s2 * resolution), resolution)


@numba.njit(cache=True, nogil=True, inline="always")
def charged(spent: float, charge: float) -> float:  # pragma: no cover - compiled
    """``spent + charge`` rounded up to the next float when rounding to nearest fell below
    the exact sum (TwoSum: Knuth, TAOCP vol. 2, 4.2.2, Thm. B): never below the exact sum
    (module docstring). NaN stays NaN. Compiled; :func:`charged_many` is its numpy twin."""
    total = spent + charge
    back = total - spent
    error = (spent - (total - back)) + (charge - back)
    return np.nextafter(total, np.inf) if error > 0.0 else total


def charged_many(spent: np.ndarray, charge: np.ndarray | float) -> np.ndarray:
    """:func:`charged` over arrays, bit for bit (silent on infinities, as ``+`` is)."""
    with np.errstate(invalid="ignore", over="ignore"):
        total = spent + charge
        back = total - spent
        error = (spent - (total - back)) + (charge - back)
        return np.where(error > 0.0, np.nextafter(total, np.inf), total)


@numba.njit(cache=True, nogil=True, inline="always")
def within(total: float, budget: float) -> bool:  # pragma: no cover - compiled
    """The budget rule on a spent budget with its charge already added (:func:`charged`):
    the compiled round adds once and keeps the sum (NaN is never within)."""
    return total <= budget


@numba.njit(cache=True, nogil=True, inline="always")
def charged_with(spent: float, charge: float,
                 sensitivity2: float) -> float:  # pragma: no cover - compiled
    """:func:`charged` for a record of squared sensitivity ``sensitivity2``: NaN, never
    :func:`within` a budget, when s² is NaN or infinite (the numpy path raises,
    :func:`check_sensitivity2`). The compiled round keeps this sum as the record's spent
    budget when it is within; :func:`admitted_with` is the same rule as a yes or no.

    A NaN s² comes from a NaN gradient or denominator, which would make the leaf sums NaN
    and so reveal that its record was sampled: no charge covers that, so the record is
    not admitted (charged nothing, in no sum). ``0·s²`` is 0 for a finite s² and NaN
    otherwise, and NaN compares false, so the test costs no branch (a range test cost 1.5 %
    of a round at 10⁶ records). A finite s² above 1 cannot come out of clipped statistics
    (a, b ∈ [0, 1], r1 + r2 = 1); :func:`charge_code` charges it in full."""
    return charged(spent + 0.0 * sensitivity2, charge)


@numba.njit(cache=True, nogil=True, inline="always")
def admitted_with(spent: float, charge: float, budget: float,
                  sensitivity2: float) -> bool:  # pragma: no cover - compiled
    """Compiled twin of the filter's eligibility for a record of squared sensitivity
    ``sensitivity2``: the charge fits in what is left, on the sum rounded up
    (:func:`charged_with`, then :func:`within`, as the round checks it)."""
    return within(charged_with(spent, charge, sensitivity2), budget)


@numba.njit(cache=True, nogil=True, inline="always")
def exhausted(spent: float, budget: float, min_charge: float) -> bool:  # pragma: no cover
    """Compiled twin of :meth:`IndividualRenyiFilter.retired` (``min_charge`` is the filter's
    :attr:`~IndividualRenyiFilter.min_charge`: the smallest charge of this stage and every
    later one)."""
    return budget - spent < min_charge


def check_sensitivity2(sensitivity2: float | np.ndarray) -> np.ndarray:
    """``sensitivity2`` as an array, refused unless every value is in [0, 1] (up to
    :data:`SENSITIVITY2_TOLERANCE` above 1).

    The charge of a round is the subsampled-Gaussian RDP at the record's s² ≤ 1, the bound
    the clipping guarantees (S-GBDT Alg. 8; Feldman & Zrnic 2020, Thm. 3.3 needs every
    charge to bound that round's loss). A NaN or an s² above 1 breaks that bound; clipping
    it to the table would charge less than the round costs (NaN was charged 0), so the
    filter fails closed with an error that names the values."""
    s2 = np.asarray(sensitivity2, dtype=float)
    bad = ~((s2 >= 0.0) & (s2 <= 1.0 + SENSITIVITY2_TOLERANCE))  # NaN fails both
    if np.any(bad):
        raise ValueError(
            f"squared sensitivities must be in [0, 1]; got {np.unique(s2[bad])[:5].tolist()} "
            f"({int(np.count_nonzero(bad))} records): the charge table does not cover them, "
            "so the filter refuses to charge (an s² above 1 or NaN means a gradient or "
            "denominator escaped its clip)")
    return s2


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
        if not 1 <= resolution < int(NOT_ELIGIBLE) or resolution & (resolution - 1):
            raise ValueError(f"resolution must be a power of two in [1, "
                             f"{int(NOT_ELIGIBLE) - 1}], got {resolution}: the grid points "
                             "k / resolution are then exact, and s² rounds up to one (at 768 "
                             "a point below s² was taken 431 times in 2·10⁶ draws: review A)")
        if not (math.isfinite(sigma) and sigma > 0):
            raise ValueError(f"sigma must be a finite number > 0, got {sigma!r} (a NaN "
                             "noise multiplier was charged 0)")
        if not 0 < sampling_rate <= 1:
            raise ValueError(f"sampling_rate must be in (0, 1], got {sampling_rate!r}")
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
        """Exact charge for squared sensitivity ``sensitivity2`` (no table; refused outside
        [0, 1] like the table, see :func:`check_sensitivity2`)."""
        sensitivity2 = min(float(check_sensitivity2(sensitivity2)), 1.0)
        if sensitivity2 <= 0:
            return 0.0
        z = self.sigma / math.sqrt(2.0 * sensitivity2)
        return float(subsampled_gaussian_rdp(self.sampling_rate, z, self.order)[0])

    def indices(self, sensitivity2: np.ndarray) -> np.ndarray:
        """Grid index of each s² value, rounded up (the charge code the filter records).
        Refuses an s² outside [0, 1] (:func:`check_sensitivity2`): no index covers it."""
        s2 = np.minimum(check_sensitivity2(sensitivity2), 1.0)
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
        at it, ``c(min)``, is the smallest charge of a round of this table; a positive floor
        bounds every key's life to about ``B / c(min)`` rounds (for count leaves ``r1`` is
        the natural floor: a = 1 always).
    later_tables
        The charge tables of the noise stages that may follow this one (same order α̂, same
        B; empty for the main stage or a model without stages). A key retires when its
        remaining budget is below the smallest charge at the floor over this table *and*
        these (:attr:`min_charge`): an earlier stage has a smaller σ, so a larger smallest
        charge, and retiring against it alone would drop, for good, a key that the later
        stages' cheaper rounds could still admit. Build a stream's filters with
        :meth:`staged`.

    Examples
    --------
    A key that cannot afford an early (less noisy) stage's round but can afford the main
    stage's is ineligible in the early stage, not retired:

    >>> early = ChargeTable(sigma=10.0, sampling_rate=1.0, order=32, resolution=64)
    >>> main = ChargeTable(sigma=30.0, sampling_rate=1.0, order=32, resolution=64)
    >>> f_early, f_main = IndividualRenyiFilter.staged(1.0, (early, main), 0.5)
    >>> spent = np.array([1.0 - 2 * f_main.stage_min_charge])
    >>> step = f_early.step(spent, np.array([0.5]))
    >>> bool(step.eligible[0]), bool(step.retired[0])
    (False, False)
    >>> bool(f_main.step(step.spent, np.array([0.5])).eligible[0])
    True
    """

    def __init__(self, budget_rdp: float, table: ChargeTable, min_sensitivity2: float,
                 later_tables: Sequence[ChargeTable] = ()) -> None:
        if not 0 < min_sensitivity2 <= 1:
            raise ValueError(f"min_sensitivity2 must be in (0, 1], got {min_sensitivity2!r}: "
                             "without a positive floor a key might never retire")
        for later in later_tables:
            if later.order != table.order:
                raise ValueError(f"a later stage's table is at order {later.order}, this "
                                 f"one at {table.order}: a filter charges at one order α̂")
        if not (math.isfinite(budget_rdp) and budget_rdp > 0):
            raise ValueError(f"budget_rdp must be a finite number > 0, got {budget_rdp!r}: "
                             "an infinite budget admits every round, the filter's guarantee "
                             "gone without a word")
        self.budget_rdp = float(budget_rdp)
        self.table = table
        self._min_sensitivity2 = float(min_sensitivity2)
        floor = np.array([min_sensitivity2])
        #: The smallest charge of a round of this table (this stage's, at the floor).
        self.stage_min_charge = float(table.charges(floor)[0])
        #: The smallest charge of any round still to come (this stage's or a later one's):
        #: below it a key can never be eligible again and retires (:meth:`retired`).
        self.min_charge = min([self.stage_min_charge,
                               *(float(later.charges(floor)[0]) for later in later_tables)])

    @classmethod
    def staged(cls, budget_rdp: float, tables: Sequence[ChargeTable],
               min_sensitivity2: float) -> tuple[IndividualRenyiFilter, ...]:
        """The filters of a stream's noise stages, earliest first (the main stage last), each
        retiring against the smallest charge of its own stage and every later one.

        Stages run in the order of the stream's public positions and never go back, so a
        key whose remaining budget is below that charge can never be eligible again; one
        above it may be ineligible in this stage's rounds (charged nothing, in no sum) and
        stays active for the next stage (Feldman & Zrnic 2020, Alg. 3: the filter's
        guarantee rests on the admission rule alone; retiring is its consequence)."""
        tables = tuple(tables)
        return tuple(cls(budget_rdp, table, min_sensitivity2, tables[k + 1:])
                     for k, table in enumerate(tables))

    @property
    def min_sensitivity2(self) -> float:
        """The charge floor (see the class docstring)."""
        return self._min_sensitivity2

    def retired(self, spent: np.ndarray) -> np.ndarray:
        """Records whose remaining budget is below the smallest charge of any round still to
        come (:attr:`min_charge`): they can never be eligible again."""
        return self.budget_rdp - spent < self.min_charge

    def affords(self, spent: np.ndarray, charge: float | np.ndarray) -> np.ndarray:
        """Records whose spent budget plus ``charge`` stays within B (the filter's rule for
        any mechanism: a round's leaves, a stream's split grid)."""
        return charged_many(spent, charge) <= self.budget_rdp

    def step(self, spent: np.ndarray, sensitivity2: np.ndarray) -> FilterStep:
        """Decide eligibility, charge the eligible records and flag the retired ones.

        Refuses an s² outside [0, 1] (:func:`check_sensitivity2`) before the floor, which
        would otherwise lift a negative value into range."""
        index = self.table.indices(np.maximum(check_sensitivity2(sensitivity2),
                                              self._min_sensitivity2))
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
        return charged_many(
            spent, np.where(eligible, self.table.grid_charges[np.where(eligible, codes, 0)], 0.0))
