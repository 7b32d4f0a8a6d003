"""The accounting math against published reference numbers and dp_accounting."""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant as dpa
from hypothesis import given, settings
from hypothesis import strategies as st

from renyiboost.accounting import (
    BUDGET_SLACK,
    ChargeTable,
    GaussianEvent,
    IndividualRenyiFilter,
    LaplaceEvent,
    LeafRelease,
    PoissonSampledEvent,
    RdpAccountant,
    calibrate,
    dp_epsilon_at_orders,
    gaussian_rdp,
    laplace_rdp,
    rdp_to_dp,
    subsampled_gaussian_rdp,
)
from renyiboost.accounting.rdp import randomized_response_rdp

ORDERS_2000 = np.arange(2, 2001, dtype=float)


# --------------------------------------------------------------------- reference numbers
# shared/reference/accounting.md: S-BDT's published result rows, integer orders 2..2000,
# Balle et al. 2020 conversion.


def test_sbdt_row_q01_reproduces_rho_and_epsilon() -> None:
    z = 89.1515 / math.sqrt(2)
    rho = 50 * subsampled_gaussian_rdp(0.1, z, ORDERS_2000)
    assert rho[410 - 2] == pytest.approx(0.02603719, abs=5e-9)
    eps, order = rdp_to_dp(ORDERS_2000, rho, 5e-8)
    assert eps == pytest.approx(0.0499888, abs=1e-7)
    assert order == 411


def test_sbdt_row_q001_reproduces_epsilon() -> None:
    rho = 100 * subsampled_gaussian_rdp(0.01, 58.157 / math.sqrt(2), ORDERS_2000)
    eps, order = rdp_to_dp(ORDERS_2000, rho, 5e-8)
    assert eps == pytest.approx(0.00999999, abs=1e-8)
    assert order == 1760


@pytest.mark.parametrize(
    ("q", "z", "rounds", "delta", "eps", "order"),
    [
        (0.01, 1.0, 1000, 1e-5, 2.1078, 8),
        (0.1, 5.0, 150, 1e-6, 1.1713, 19),
        (0.005, 10.0, 1000, 1e-6, 0.061095, 254),
    ],
)
def test_further_sbdt_rows(q, z, rounds, delta, eps, order) -> None:
    rho = rounds * subsampled_gaussian_rdp(q, z, ORDERS_2000)
    got, got_order = rdp_to_dp(ORDERS_2000, rho, delta)
    assert got == pytest.approx(eps, rel=5e-5)
    assert got_order == order


def test_accountant_composes_events_to_the_reference() -> None:
    step = PoissonSampledEvent(0.1, GaussianEvent(89.1515 / math.sqrt(2)))
    eps, order = RdpAccountant(ORDERS_2000).compose(step, 50).get_epsilon_and_optimal_order(5e-8)
    assert eps == pytest.approx(0.0499888, abs=1e-7) and order == 411


def test_small_order_grid_overstates_small_epsilon() -> None:
    """Why the grid goes to 4096: stopping at 1024 gives 0.01173 instead of 0.0100."""
    orders = np.arange(2, 1025, dtype=float)
    rho = 100 * subsampled_gaussian_rdp(0.01, 58.157 / math.sqrt(2), orders)
    assert rdp_to_dp(orders, rho, 5e-8)[0] == pytest.approx(0.01173, abs=1e-5)


# --------------------------------------------------------------------- dp_accounting


@settings(max_examples=60, deadline=None)
@given(
    q=st.floats(0.001, 0.999),
    z=st.floats(0.3, 200.0),
    order=st.integers(2, 1500),
)
def test_subsampled_gaussian_matches_dp_accounting(q: float, z: float, order: int) -> None:
    ours = float(subsampled_gaussian_rdp(q, z, order)[0])
    ref = float(dpa._compute_rdp_poisson_subsampled_gaussian(q, z, [order])[0])
    # dp_accounting sums log A in log space, so its own absolute error on log A is ~1e-16
    # per term; relative 1e-9 holds wherever (α−1)·ρ is not down at that rounding level.
    assert abs(ours - ref) <= 1e-9 * ref + 64 * order * 2.3e-16 / (order - 1)


@settings(max_examples=30, deadline=None)
@given(
    q=st.floats(0.001, 1.0),
    z=st.floats(0.5, 100.0),
    rounds=st.integers(1, 500),
    delta=st.sampled_from([1e-5, 1e-6, 1e-8]),
)
def test_epsilon_matches_dp_accounting_accountant(q, z, rounds, delta) -> None:
    orders = [float(a) for a in range(2, 257)]
    acc = dpa.RdpAccountant(orders=orders)
    acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z)), rounds)
    ref_eps, _ref_order = acc.get_epsilon_and_optimal_order(delta)
    eps, _order = rdp_to_dp(orders, rounds * subsampled_gaussian_rdp(q, z, orders), delta)
    assert eps == pytest.approx(ref_eps, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("eps", [0.01, 0.5, 2.0])
def test_laplace_matches_dp_accounting(eps: float) -> None:
    orders = [2.0, 5.0, 32.0, 500.0]
    ours = laplace_rdp(eps, orders)
    ref = [dpa._laplace_rdp(eps, a) for a in orders]
    np.testing.assert_allclose(ours, ref, rtol=1e-9)
    assert np.all(ours <= eps + 1e-12)  # an ε-DP mechanism is (α, ε)-RDP at every order
    acc = RdpAccountant(orders).compose(LaplaceEvent(eps))
    np.testing.assert_allclose(acc.rdp, ours)


def _exact_pure_rdp(kind: str, eps: float, alpha: int) -> Decimal:
    """Laplace's (Mironov 2017, Prop. 6) or randomized response's (Prop. 5) RDP in
    80-digit decimals."""
    from decimal import localcontext

    with localcontext() as ctx:
        ctx.prec = 80
        e, a = Decimal(eps), Decimal(alpha)
        if kind == "laplace":
            mix = (a / (2 * a - 1) * ((a - 1) * e).exp()
                   + (a - 1) / (2 * a - 1) * (-a * e).exp())
        else:
            p = e.exp() / (1 + e.exp())
            mix = p**alpha * (1 - p) ** (1 - alpha) + (1 - p) ** alpha * p ** (1 - alpha)
        return mix.ln() / (a - 1)


@pytest.mark.parametrize("kind", ["laplace", "randomized_response"])
def test_pure_mechanisms_never_under_count_at_a_tiny_epsilon(kind) -> None:
    """Against 80-digit arithmetic (compared there, not after rounding the exact value to a
    float), each RDP is an upper bound within a relative 10⁻⁶ (or 10⁻¹⁴ absolute): the
    mixture's terms cancel at a tiny ε, and Laplace at ε = 10⁻⁸, α = 2 came out 0 against
    10⁻¹⁶, randomized response at α = 4,096 2 · 10⁻⁴ below, and at ε = 3.53 · 10⁻¹² its
    cap α ε² / 2 rounded to nearest fell an ulp below."""
    rdp = laplace_rdp if kind == "laplace" else randomized_response_rdp
    for eps in (3.530585630408593e-12, 1.1644223751767899e-14, 1e-10, 1e-8, 1e-6, 1e-4, 1e-2, 1.0):
        for alpha in (2, 32, 4096):
            exact = _exact_pure_rdp(kind, eps, alpha)
            ours = Decimal(float(rdp(eps, [alpha])[0]))
            assert exact <= ours <= exact * Decimal("1.000001") + Decimal("1e-14"), (eps, alpha)


def test_limits_of_the_sampling_rate() -> None:
    orders = [2, 10, 100]
    np.testing.assert_allclose(subsampled_gaussian_rdp(1.0, 3.0, orders), gaussian_rdp(3.0, orders))
    np.testing.assert_array_equal(subsampled_gaussian_rdp(0.0, 3.0, orders), 0.0)
    # q → 1 is continuous with the Gaussian
    np.testing.assert_allclose(
        subsampled_gaussian_rdp(1 - 1e-9, 3.0, orders), gaussian_rdp(3.0, orders), rtol=1e-6
    )


def test_stable_at_order_ten_thousand() -> None:
    orders = np.array([2000.0, 5000.0, 10000.0])
    rho = subsampled_gaussian_rdp(0.01, 100.0, orders)
    assert np.all(np.isfinite(rho)) and np.all(rho > 0)
    assert np.all(np.diff(rho) > 0)  # RDP grows with the order
    assert np.all(rho <= gaussian_rdp(100.0, orders))  # subsampling never hurts


def test_non_integer_orders_are_refused() -> None:
    with pytest.raises(ValueError, match="integer"):
        subsampled_gaussian_rdp(0.1, 1.0, [2.5])


def test_conversion_formulas() -> None:
    rho, alpha, delta = 0.3, 40.0, 1e-6
    balle = rho + math.log((alpha - 1) / alpha) - (math.log(delta) + math.log(alpha)) / (alpha - 1)
    classic = rho + math.log(1 / delta) / (alpha - 1)
    assert dp_epsilon_at_orders(alpha, rho, delta)[0] == pytest.approx(balle, rel=1e-14)
    assert dp_epsilon_at_orders(alpha, rho, delta, method="classic")[0] == pytest.approx(classic)
    assert balle < classic


# --------------------------------------------------------------------- the leaf mechanism


def test_leaf_release_is_the_whitened_two_dimensional_gaussian() -> None:
    """ρ of the 2-D diagonal Gaussian, summed per coordinate, equals α/(2 z(g)²)."""
    release = LeafRelease(sigma=7.0, count_share=0.3)
    g_clip, h_clip = 0.5, 0.25
    for a, b in [(1.0, 1.0), (1.0, 0.2), (0.4, 0.0), (0.0, 0.7)]:
        alpha = 13.0
        direct = alpha / 2 * (
            (a * h_clip / release.count_noise_std(h_clip)) ** 2
            + (b * g_clip / release.sum_noise_std(g_clip)) ** 2
        )
        s2 = release.sensitivity2(a, b)
        via_z = gaussian_rdp(float(release.noise_multiplier(s2)), alpha)[0] if s2 > 0 else 0.0
        assert via_z == pytest.approx(direct, rel=1e-12)
        assert direct == pytest.approx(alpha * (0.3 * a * a + 0.7 * b * b) / 49.0, rel=1e-12)


# --------------------------------------------------------------------- calibration


@pytest.mark.parametrize(
    ("epsilon", "delta", "rounds", "q", "init_share"),
    [
        (0.15, 1e-6, 100, 0.1, 0.1),
        (0.54, 1e-6, 300, 1.0, 0.0),
        (0.01, 1e-8, 1000, 0.01, 0.05),
        (4.0, 1e-5, 20, 0.5, 0.2),
    ],
)
def test_calibration_hits_the_target(epsilon, delta, rounds, q, init_share) -> None:
    cal = calibrate(epsilon, delta, rounds, q, count_share=0.3, init_share=init_share)
    assert cal.epsilon <= epsilon
    assert cal.epsilon >= 0.995 * epsilon
    # The budget is T full rounds plus the initial score, at α̂ (with the stated slack).
    z = cal.sigma / math.sqrt(2)
    full = float(subsampled_gaussian_rdp(q, z, cal.order)[0])
    assert cal.round_charge == pytest.approx(full, rel=1e-12)
    init = 0.0 if cal.init_sigma is None else float(gaussian_rdp(cal.init_sigma / math.sqrt(2), cal.order)[0])
    assert cal.budget_rdp == pytest.approx((rounds * full + init) * (1 + BUDGET_SLACK), rel=1e-12)
    assert cal.epsilon == pytest.approx(dp_epsilon_at_orders(cal.order, cal.budget_rdp, delta)[0])
    if init_share:
        assert init / (rounds * full + init) == pytest.approx(init_share, rel=1e-9)
    # α̂ is a local optimum over integer orders for this σ.
    neighbours = [cal.order - 1, cal.order, cal.order + 1]
    rho = (rounds * subsampled_gaussian_rdp(q, z, neighbours) + init / cal.order * np.array(neighbours))
    eps = dp_epsilon_at_orders(neighbours, rho * (1 + BUDGET_SLACK), delta)
    assert eps[1] <= min(eps[0], eps[2]) + 1e-6 * epsilon


def test_calibration_reaches_large_orders_for_small_epsilon() -> None:
    cal = calibrate(0.01, 5e-8, rounds=100, sampling_rate=0.01, init_share=0.0)
    assert cal.order > 1024
    # the S-BDT row: z = 58.157/√2 gives ε = 0.01 at T = 100, q = 0.01
    assert cal.sigma == pytest.approx(58.157, rel=2e-3)


def test_calibration_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="epsilon"):
        calibrate(-1.0, 1e-6, 10)
    with pytest.raises(ValueError, match="delta"):
        calibrate(1.0, 0.0, 10)
    with pytest.raises(ValueError, match="sampling_rate"):
        calibrate(1.0, 1e-6, 10, sampling_rate=1.5)


# --------------------------------------------------------------------- the filter


def test_charge_table_never_undercharges_on_a_dense_grid() -> None:
    table = ChargeTable(sigma=30.0, sampling_rate=0.1, order=200, resolution=256)
    s2 = np.linspace(0.0, 1.0, 5001)
    exact = np.array([table.exact(v) for v in s2])
    charged = table.charges(s2)
    assert np.all(charged >= exact)
    # and it is tight: never more than the exact charge one grid step up
    upper = np.array([table.exact(min(1.0, v + 1 / 256)) for v in s2])
    assert np.all(charged <= upper * (1 + 1e-12))


def _filter(budget_rounds: float = 5.0) -> IndividualRenyiFilter:
    table = ChargeTable(sigma=10.0, sampling_rate=0.5, order=30, resolution=128)
    return IndividualRenyiFilter(budget_rounds * table.exact(1.0) * (1 + 1e-9), table, 0.3)


def test_full_sensitivity_records_get_exactly_the_nominal_rounds() -> None:
    flt = _filter(5.0)
    spent = np.zeros(4)
    rounds = 0
    while True:
        step = flt.step(spent, np.ones(4))
        if not step.eligible.any():
            break
        spent, rounds = step.spent, rounds + 1
    assert rounds == 5
    assert np.all(step.retired)


def test_small_gradients_buy_extra_rounds() -> None:
    flt = _filter(5.0)
    spent = np.zeros(2)
    taken = np.zeros(2, dtype=int)
    for _ in range(100):
        step = flt.step(spent, np.array([1.0, 0.3]))
        taken += step.eligible
        spent = step.spent
    assert taken[0] == 5 and taken[1] > 5


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.floats(0.3, 1.0), min_size=6, max_size=6), min_size=1, max_size=60))
def test_no_record_ever_exceeds_its_budget(s2_rounds: list[list[float]]) -> None:
    flt = _filter(3.0)
    spent = np.zeros(6)
    retired = np.zeros(6, dtype=bool)
    for s2 in s2_rounds:
        step = flt.step(spent, np.array(s2))
        assert not np.any(step.eligible & retired)  # a retired record is never charged again
        spent, retired = step.spent, retired | step.retired
        assert np.all(spent <= flt.budget_rdp)
        assert np.all(retired == (flt.budget_rdp - spent < flt.min_charge))
