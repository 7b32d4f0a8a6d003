"""Rényi-DP accounting: the mechanisms' RDP, conversion, calibration and the filter.

All privacy math of renyiboost lives in this package; models ask it for numbers.
"""

from renyiboost.accounting.calibration import (
    BUDGET_SLACK,
    Calibration,
    calibrate,
    stage_calibrations,
)
from renyiboost.accounting.conversion import dp_epsilon_at_orders, rdp_to_dp
from renyiboost.accounting.events import (
    DEFAULT_ORDERS,
    ComposedEvent,
    GaussianEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    RdpAccountant,
    SelfComposedEvent,
    event_rdp,
)
from renyiboost.accounting.filter import (
    NOT_ELIGIBLE,
    ChargeTable,
    FilterStep,
    IndividualRenyiFilter,
)
from renyiboost.accounting.grid import SplitGridRelease
from renyiboost.accounting.leaf import LeafRelease
from renyiboost.accounting.platt import PlattSumsRelease
from renyiboost.accounting.rdp import gaussian_rdp, laplace_rdp, subsampled_gaussian_rdp
from renyiboost.accounting.size import SIZE_ESTIMATE_SHARE, SizeEstimate

__all__ = [
    "BUDGET_SLACK",
    "DEFAULT_ORDERS",
    "NOT_ELIGIBLE",
    "SIZE_ESTIMATE_SHARE",
    "Calibration",
    "ChargeTable",
    "ComposedEvent",
    "FilterStep",
    "GaussianEvent",
    "IndividualRenyiFilter",
    "LaplaceEvent",
    "LeafRelease",
    "PlattSumsRelease",
    "PoissonSampledEvent",
    "RdpAccountant",
    "SelfComposedEvent",
    "SizeEstimate",
    "SplitGridRelease",
    "calibrate",
    "dp_epsilon_at_orders",
    "event_rdp",
    "gaussian_rdp",
    "laplace_rdp",
    "rdp_to_dp",
    "stage_calibrations",
    "subsampled_gaussian_rdp",
]
