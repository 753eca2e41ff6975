"""dpaudit's accounting on dp-accounting against dpaudit's own RDP series (``rdp_subsampled_gaussian``, the test
oracle), both against the defining integral, and the PLD accountant against the Gaussian mechanism's exact ε.

Stated tolerances:

* RDP at integer orders: dp-accounting equals the oracle to 1e-9 relative (both sum the same positive terms), or
  1e-15 absolute where one step's RDP is near the floating-point floor (A_α = 1 + (α − 1)·RDP is summed to a few
  ulps of 1: at z = 100, q = 1e-4 neither is exact to better than 1e-4 relative, dp-accounting being the closer).
* RDP at fractional orders: dp-accounting 0.6.0 sums the series' terms without the signs of the generalised
  binomial coefficients, an upper bound above the exact value; it is never below the oracle, and never above the
  unsubsampled α/(2z²), which stands in where its series fails.
* ε: never below the oracle's; equal to 1e-9 where the oracle's best order is an integer; above it by a relative
  excess that grows as the best order nears 1: at most 1e-4 where it is 5 or more (the default pipeline's runs up
  to ε = 4: q = 0.1, T = 200, δ = 1e-5), 2e-3 at 3.4 (ε = 8), 3e-3 at 2.3 and 3e-2 at 1.7 (ε = 32).
* calibrated z: within the calibration's tolerance (1e-5 relative) of the oracle's, plus that excess (z is never
  below the oracle's by more than the tolerance).
* PLD: within 1e-6 above the exact ε of T Gaussian steps (q = 1), below the RDP ε, and between the PRV
  accountant's upper estimate and that minus 2·eps_error.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate

from dpaudit._validation import DPAuditError
from dpaudit.ledger import PrivacyLedger
from dpaudit.theory import DEFAULT_ORDERS, calibrate_noise, dp_event, epsilon
from dpaudit.theory._dpaccounting_adapter import step_rdp
from dpaudit.theory._rdp_series import subsampled_gaussian_rdp as oracle_rdp
from dpaudit.theory.accounting import rdp_to_epsilon

ORDERS = np.array(DEFAULT_ORDERS)
INTEGER = ORDERS == np.round(ORDERS)

# (z, q) of the schedules in tests/test_accounting.py and of the default pipeline's calibrated runs (q = 0.1)
STEPS = [
    (1.0, 0.01),
    (0.7, 0.3),
    (4.0, 0.5),
    (1.1, 0.05),
    (1.23, 512 / 60000),
    (2.15, 2048 / 60000),
    (1.1, 256 / 60000),
    (1.1234, 512 / 60000),
    (3.1811, 0.02048),
    (0.536, 0.003072),
    (3.0 * 40**-0.25, 1 / 59),
    (3.0, 1 / 59),
    (4.838, 0.0011),
    (0.8, 0.1),
    (0.5, 0.1),
    (100.0, 1e-4),
    (5.8888, 0.1),
    (3.2371, 0.1),
    (1.8814, 0.1),
    (1.1951, 0.1),
    (0.6042, 0.1),
]


def _accountant_rdp(z: float, q: float, orders=DEFAULT_ORDERS) -> np.ndarray:
    """One step's RDP as the RDP accountant composes it: dp-accounting's, capped at α/(2z²)."""
    return step_rdp(z, q, tuple(float(order) for order in orders))


@pytest.mark.parametrize("z, q", STEPS)
def test_integer_orders_agree_with_the_oracle_to_1e_9(z, q):
    ours = _accountant_rdp(z, q)[INTEGER]
    oracle = oracle_rdp(noise_multiplier=z, sample_rate=q, orders=ORDERS[INTEGER])
    assert ours == pytest.approx(oracle, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("z, q", STEPS)
def test_fractional_orders_bound_the_oracle_from_above(z, q):
    ours = _accountant_rdp(z, q)[~INTEGER]
    oracle = oracle_rdp(noise_multiplier=z, sample_rate=q, orders=ORDERS[~INTEGER])
    assert np.all(ours >= oracle * (1 - 1e-9) - 1e-15)
    assert np.all(ours <= ORDERS[~INTEGER] / 2 / z / z)


def _log_a_by_quadrature(alpha: float, z: float, q: float) -> float:
    """log A_α = log E_{x~N(0,z²)}[((1−q) + q·e^{(2x−1)/(2z²)})^α] by adaptive quadrature (first principles)."""

    def integrand(x: float) -> float:
        return (
            math.exp(-(x**2) / (2 * z * z))
            / (z * math.sqrt(2 * math.pi))
            * ((1 - q) + q * math.exp((2 * x - 1) / (2 * z * z))) ** alpha
        )

    value, _ = integrate.quad(integrand, -40 * z, 40 * z, points=[0.0, 0.5], epsabs=0, epsrel=1e-13, limit=500)
    return math.log(value)


@pytest.mark.parametrize("alpha", [1.1, 2.5, 3.0, 7.25])
@pytest.mark.parametrize("z, q", [(1.0, 0.01), (0.8, 0.1)])
def test_the_oracle_is_the_defining_integral(alpha, z, q):
    exact = _log_a_by_quadrature(alpha, z, q) / (alpha - 1)
    assert oracle_rdp(noise_multiplier=z, sample_rate=q, orders=[alpha])[0] == pytest.approx(exact, rel=1e-7)
    ours = _accountant_rdp(z, q, [alpha])[0]
    if alpha == round(alpha):
        assert ours == pytest.approx(exact, rel=1e-7)
    else:
        assert ours >= exact * (1 - 1e-7)


def test_dp_accounting_overstates_the_rdp_at_fractional_orders():
    # dp-accounting 0.6.0 adds |C(α, i)| terms where the series has alternating signs: at α = 1.1, z = 1, q = 0.01
    # its RDP is 7 % above the integral's. When this fails, dp-accounting sums the signed series: tighten the
    # fractional-order test above to equality and the ε tolerances of this file to 1e-9.
    exact = _log_a_by_quadrature(1.1, 1.0, 0.01) / 0.1
    assert _accountant_rdp(1.0, 0.01, [1.1])[0] > 1.05 * exact


def _oracle_epsilon(table, delta: float, orders=ORDERS) -> tuple[float, float]:
    total = sum(count * oracle_rdp(noise_multiplier=z, sample_rate=q, orders=orders) for z, q, count in table)
    return rdp_to_epsilon(rdp=total, orders=orders, delta=delta)


SCHEDULES = {  # name: ((z, q, count), ...), δ, largest relative excess of ε over the oracle's
    "psac-mnist": ([(1.23, 512 / 60000, 4687)], 1e-5, 1e-4),
    "psac-large-batch": ([(2.15, 2048 / 60000, 1171)], 1e-5, 1e-4),
    "psac-long": ([(1.1, 256 / 60000, 14062)], 1e-5, 1e-4),
    "psac-q0.01": ([(1.0, 0.01, 1000)], 1e-5, 1e-4),
    "dynamic": ([(k**-0.25, 1 / 30, 30) for k in range(1, 11)], 1e-5, 3e-3),
    "d2p2-static": ([(3.0, 1 / 59, 59 * 40)], 1e-5, 1e-4),
    "equal-steps": ([(1.0, 0.05, 50), (2.0, 0.05, 100)], 1e-6, 1e-4),
    "small-epsilon": ([(4.838, 0.0011, 957)], 1e-5, 1e-4),
    "pipeline-1": ([(5.8888, 0.1, 200)], 1e-5, 1e-4),
    "pipeline-2": ([(3.2371, 0.1, 200)], 1e-5, 1e-4),
    "pipeline-4": ([(1.8814, 0.1, 200)], 1e-5, 1e-4),
    "pipeline-8": ([(1.1951, 0.1, 200)], 1e-5, 2e-3),
    "pipeline-32": ([(0.6042, 0.1, 200)], 1e-5, 3e-2),
}


@pytest.mark.parametrize("name", SCHEDULES)
def test_epsilon_is_the_oracles_or_a_stated_excess_above_it(name):
    table, delta, excess = SCHEDULES[name]
    z = np.repeat([z for z, _, _ in table], [count for *_, count in table]) if len(table) > 1 else table[0][0]
    q = np.repeat([q for _, q, _ in table], [count for *_, count in table]) if len(table) > 1 else table[0][1]
    steps = None if len(table) > 1 else table[0][2]
    ours = epsilon(noise_multiplier=z, sample_rate=q, steps=steps, delta=delta)
    oracle, best = _oracle_epsilon(table, delta)
    assert ours >= oracle * (1 - 1e-9)
    if best == round(best):
        assert ours == pytest.approx(oracle, rel=1e-9)
    assert ours <= oracle * (1 + excess)
    integer = ORDERS[INTEGER]  # integer orders alone: the same to 1e-9 wherever the best order is
    ours = epsilon(noise_multiplier=z, sample_rate=q, steps=steps, delta=delta, orders=integer)
    assert ours == pytest.approx(_oracle_epsilon(table, delta, integer)[0], rel=1e-9)


def test_improved_conversion_is_dp_accountings_and_classic_is_mironovs():
    from dp_accounting.rdp import compute_epsilon

    rng = np.random.default_rng(5)
    for _ in range(20):
        rdp = np.sort(rng.uniform(1e-3, 5, len(ORDERS)))
        delta = float(10 ** rng.uniform(-10, -3))
        assert rdp_to_epsilon(rdp=rdp, orders=ORDERS, delta=delta)[0] == pytest.approx(
            compute_epsilon(ORDERS, rdp, delta)[0], rel=1e-12
        )
        classic = float(np.min(rdp + math.log(1 / delta) / (ORDERS - 1)))
        assert rdp_to_epsilon(rdp=rdp, orders=ORDERS, delta=delta, conversion="classic")[0] == pytest.approx(
            classic, rel=1e-12
        )


def _oracle_calibration(target: float, table_at, delta: float) -> float:
    """Smallest z with the oracle's ε ≤ target, by bisection on log z to 1e-12."""
    low, high = math.log(0.05), math.log(50.0)
    while high - low > 1e-12:
        middle = (low + high) / 2
        if _oracle_epsilon(table_at(math.exp(middle)), delta)[0] <= target:
            high = middle
        else:
            low = middle
    return math.exp(high)


@pytest.mark.parametrize(
    "target, excess",
    [(1.0, 1e-5), (2.0, 1e-5), (4.0, 1e-4), (8.0, 1e-3)],  # the stated ε excess, in z
)
def test_calibration_is_the_oracles_within_its_tolerance(target, excess):
    z = calibrate_noise(target_epsilon=target, delta=1e-5, sample_rate=0.1, steps=200)
    oracle = _oracle_calibration(target, lambda scale: [(scale, 0.1, 200)], 1e-5)
    assert oracle * (1 - 1e-5) <= z <= oracle * (1 + 1e-5 + excess)


def test_calibration_with_a_warm_up_and_a_schedule_is_the_oracles_within_its_tolerance():
    # TP-TopK's split: 60 warm-up steps at z1 (calibrated to 0.3·ε alone), then 140 steps whose composition with
    # the warm-up meets ε = 3; and a schedule decaying per epoch
    z1 = calibrate_noise(target_epsilon=0.9, delta=1e-5, sample_rate=0.1, steps=60)
    assert z1 == pytest.approx(_oracle_calibration(0.9, lambda scale: [(scale, 0.1, 60)], 1e-5), rel=2e-5)
    z2 = calibrate_noise(target_epsilon=3.0, delta=1e-5, sample_rate=0.1, steps=140, preceding=([z1] * 60, 0.1))
    oracle = _oracle_calibration(3.0, lambda scale: [(z1, 0.1, 60), (scale, 0.1, 140)], 1e-5)
    assert z2 == pytest.approx(oracle, rel=2e-5)
    factors = np.arange(1, 6) ** -0.25
    schedule = np.repeat(factors, 10)
    z = calibrate_noise(target_epsilon=2.0, delta=1e-5, sample_rate=0.1, noise_schedule=schedule)
    oracle = _oracle_calibration(2.0, lambda scale: [(scale * f, 0.1, 10) for f in factors], 1e-5)
    assert oracle * (1 - 1e-5) <= z <= oracle * (1 + 1e-4)


# --- PLD through dp-accounting's PLDAccountant ---


def _gaussian_epsilon(mu: float, delta: float) -> float:
    """Balle & Wang (2018): ε of the Gaussian mechanism of μ = Δ/σ at δ, by bisection (first principles)."""
    from scipy.stats import norm

    def delta_of(eps: float) -> float:
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)

    low, high = 0.0, 1.0
    while delta_of(high) > delta:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if delta_of(middle) > delta else (low, middle)
    return high


@pytest.mark.parametrize("z, steps, delta", [(1.0, 10, 1e-5), (2.0, 30, 1e-5), (0.8, 3, 1e-6), (5.0, 1, 1e-5)])
def test_pld_is_the_exact_epsilon_of_composed_gaussian_steps(z, steps, delta):
    exact = _gaussian_epsilon(math.sqrt(steps) / z, delta)
    pld = epsilon(noise_multiplier=z, sample_rate=1.0, steps=steps, delta=delta, accountant="pld")
    assert exact - 1e-9 <= pld <= exact + 1e-6


def test_pld_lies_between_prv_and_its_error_and_below_rdp():
    rng = np.random.default_rng(7)
    for _ in range(3):
        z = rng.uniform(0.8, 4, 2)
        q = rng.uniform(1e-3, 0.1, 2)
        steps = rng.integers(10, 500, 2)
        run = {"noise_multiplier": np.repeat(z, steps), "sample_rate": np.repeat(q, steps), "delta": 1e-5}
        pld = epsilon(**run, accountant="pld")
        prv = epsilon(**run, accountant="prv")  # eps_error = 0.01
        assert prv - 0.02 <= pld <= prv
        assert pld < epsilon(**run)


def test_pld_calibration_meets_its_target_with_less_noise_than_rdp():
    z = calibrate_noise(target_epsilon=4.0, delta=1e-5, sample_rate=0.1, steps=200, accountant="pld")
    achieved = epsilon(noise_multiplier=z, sample_rate=0.1, steps=200, delta=1e-5, accountant="pld")
    assert 4.0 * (1 - 1e-4) <= achieved <= 4.0
    assert z < calibrate_noise(target_epsilon=4.0, delta=1e-5, sample_rate=0.1, steps=200)


# --- a run as DpEvents ---


def test_a_run_is_one_self_composed_event_per_distinct_step():
    import dp_accounting

    def step(z: float, q: float):
        return dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z))

    event = dp_event(noise_multiplier=[2.0, 1.0, 2.0, 2.0], sample_rate=[0.01, 0.01, 0.01, 0.02])
    assert event == dp_accounting.ComposedDpEvent(
        [
            dp_accounting.SelfComposedDpEvent(step(z, q), n)
            for z, q, n in [(1.0, 0.01, 1), (2.0, 0.01, 2), (2.0, 0.02, 1)]
        ]
    )
    ledger = PrivacyLedger()
    for z, q in [(2.0, 0.01), (1.0, 0.01), (2.0, 0.01), (2.0, 0.02)]:
        ledger.record(noise_multiplier=z, sample_rate=q)
    ledger.end_epoch()
    assert dp_event(ledger=ledger) == event == dp_event(ledger=ledger.to_dict())
    silent = PrivacyLedger(dp_claim=False)
    silent.end_epoch()
    assert dp_event(ledger=silent) == dp_accounting.NonPrivateDpEvent()


def test_dp_accountings_own_accountants_on_the_event_give_our_epsilon():
    from dp_accounting.pld import PLDAccountant
    from dp_accounting.rdp import RdpAccountant

    run = {"noise_multiplier": np.repeat([1.1, 1.6], [300, 200]), "sample_rate": 0.02}
    event = dp_event(**run)
    assert RdpAccountant(orders=DEFAULT_ORDERS).compose(event).get_epsilon(1e-5) == pytest.approx(
        epsilon(**run, delta=1e-5), rel=1e-12
    )
    assert PLDAccountant().compose(event).get_epsilon(1e-5) == epsilon(**run, delta=1e-5, accountant="pld")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({}, "noise_multiplier and sample_rate, or a ledger"),
        ({"noise_multiplier": 1.0, "sample_rate": 0.1}, "give steps"),
        ({"noise_multiplier": -1.0, "sample_rate": 0.1, "steps": 3}, "noise_multiplier"),
        ({"noise_multiplier": 1.0, "ledger": PrivacyLedger()}, "not both"),
    ],
)
def test_bad_dp_event_arguments_are_one_line(kwargs, message):
    with pytest.raises(DPAuditError, match=message) as caught:
        dp_event(**kwargs)
    assert "\n" not in str(caught.value)
