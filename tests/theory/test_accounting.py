"""Accounting over heterogeneous subsampled-Gaussian steps: known answers from the papers, reference tables and
first principles, agreement with Opacus's own accountants, calibration round trips, per-epoch ε from ledgers."""

from __future__ import annotations

import contextlib
import json
import math
import signal
import subprocess
import sys
import warnings

import numpy as np
import pytest

from dpaudit._validation import DPAuditError
from dpaudit.ledger import PrivacyLedger
from dpaudit.theory import (
    DEFAULT_ORDERS,
    accounting,
    calibrate_noise,
    epsilon,
    ledger_epsilons,
    rdp_subsampled_gaussian,
)
from dpaudit.theory._dpaccounting_adapter import step_rdp
from dpaudit.theory.accounting import (
    OPACUS_ORDERS,
    PRV_MEMORY_BUDGET,
    AccountingFallbackWarning,
    prv_grid,
    rdp_epsilon_floor,
    rdp_to_epsilon,
)


def test_rdp_of_full_batch_gaussian_is_alpha_over_two_sigma_squared():
    orders = np.array([1.5, 2.0, 7.25, 32.0])
    assert rdp_subsampled_gaussian(noise_multiplier=2.0, sample_rate=1.0, orders=orders) == pytest.approx(orders / 8)


@pytest.mark.parametrize("q, sigma", [(0.01, 1.0), (0.3, 0.7), (0.5, 4.0)])
def test_rdp_order_two_matches_closed_form(q, sigma):
    # A_2 = (1−q)² + 2q(1−q) + q² e^{1/σ²}  (binomial expansion of the Poisson mixture)
    expected = math.log((1 - q) ** 2 + 2 * q * (1 - q) + q * q * math.exp(1 / sigma**2))
    assert rdp_subsampled_gaussian(noise_multiplier=sigma, sample_rate=q, orders=[2])[0] == pytest.approx(expected)


def test_fractional_orders_interpolate_the_integer_ones():
    # RDP is non-decreasing in α: fractional orders must sit between their integer neighbours
    orders = np.array([3.0, 3.5, 4.0])
    values = rdp_subsampled_gaussian(noise_multiplier=1.1, sample_rate=0.05, orders=orders)
    assert values[0] <= values[1] <= values[2]


# DP-PSAC reference values: ε at (q, σ, T) with the improved and the classic conversion
@pytest.mark.parametrize(
    "q, sigma, steps, improved, classic",
    [
        (512 / 60000, 1.23, 4687, 2.5808, 2.9946),
        (2048 / 60000, 2.15, 1171, 2.6043, 3.0171),
        (256 / 60000, 1.1, 14062, 2.5966, 3.0083),
        (0.01, 1.0, 1000, 2.1014, 2.5380),
    ],
)
def test_rdp_epsilon_matches_psac_spec_values(q, sigma, steps, improved, classic):
    common = dict(noise_multiplier=sigma, sample_rate=q, steps=steps, delta=1e-5)
    assert epsilon(**common) == pytest.approx(improved, abs=1e-4)
    assert epsilon(**common, conversion="classic") == pytest.approx(classic, abs=1e-4)


# DP-PSAC reference values: σ for a target ε (q, T, δ, ε) → σ improved, σ classic
@pytest.mark.parametrize(
    "q, steps, delta, target, improved, classic",
    [
        (512 / 60000, 4687, 1e-5, 3, 1.1234, 1.2285),
        (2048 / 60000, 1171, 1e-5, 3, 1.9280, 2.1601),
        (0.02048, 4882, 1e-5, 2, 3.1811, 3.6758),
        (0.003072, 3255, 5e-6, 8, 0.5360, 0.5557),
    ],
)
def test_calibration_matches_psac_spec_values(q, steps, delta, target, improved, classic):
    for conversion, expected in (("improved", improved), ("classic", classic)):
        sigma = calibrate_noise(target_epsilon=target, delta=delta, sample_rate=q, steps=steps, conversion=conversion)
        assert sigma == pytest.approx(expected, abs=2e-4)


# The AdaDPIGU paper's Table 3 (Section 6.1; δ = 1e-5), classic conversion, orders 2..32 step 0.1, 0.01 grid;
# MNIST q = 1/60, T = 12000; CIFAR-10 q = 0.01, T = 20000 (inferred: the paper does not state them)
@pytest.mark.parametrize(
    "q, steps, column",
    [
        (1 / 60, 12000, [4.64, 2.49, 1.79, 1.45, 1.25, 1.12]),
        pytest.param(0.01, 20000, [3.62, 1.98, 1.45, 1.2, 1.05, 0.95], marks=pytest.mark.slow),
    ],  # ~15 s each
)
def test_adadpigu_table3_is_reproduced_exactly(q, steps, column):
    orders = np.arange(2, 32, 0.1)
    sigmas = [
        calibrate_noise(
            target_epsilon=eps, delta=1e-5, sample_rate=q, steps=steps, orders=orders, conversion="classic", grid=0.01
        )
        for eps in (2, 4, 6, 8, 10, 12)
    ]
    assert sigmas == pytest.approx(column, abs=1e-9)


@pytest.mark.parametrize(
    "accountant, target",
    [
        ("rdp", 0.5),
        ("rdp", 2.0),
        ("rdp", 8.0),
        ("prv", 2.0),
        pytest.param("prv", 0.5, marks=pytest.mark.slow),
        pytest.param("prv", 8.0, marks=pytest.mark.slow),
    ],
)
def test_calibrate_then_account_gives_the_target(accountant, target):
    schedule = np.repeat(np.arange(1, 11) ** -0.25, 30)  # dynamic: 10 epochs × 30 steps
    z = calibrate_noise(
        target_epsilon=target, delta=1e-5, sample_rate=1 / 30, noise_schedule=schedule, accountant=accountant
    )
    achieved = epsilon(noise_multiplier=z * schedule, sample_rate=1 / 30, delta=1e-5, accountant=accountant)
    assert achieved <= target + 1e-9
    assert achieved == pytest.approx(target, abs=0.01)


def _opacus_rdp(z, q, steps, delta, orders=DEFAULT_ORDERS):
    from opacus.accountants.analysis import rdp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        total = sum(
            rdp.compute_rdp(q=qi, noise_multiplier=zi, steps=n, orders=list(orders)) for zi, qi, n in zip(z, q, steps)
        )
        return rdp.get_privacy_spent(orders=list(orders), rdp=total, delta=delta)[0]


def test_rdp_agrees_with_opacus_on_random_heterogeneous_settings():
    # Opacus's RDP (TF Privacy's, summed with the signs of the series) is an independent implementation. At integer
    # orders dp-accounting sums the same positive binomial terms: equal to 1e-9. At fractional orders the RDP is
    # dpaudit's own signed series (dp-accounting 0.6.0 overestimates there: see test_accounting_oracle.py).
    integer = [order for order in DEFAULT_ORDERS if order == round(order)]
    rng = np.random.default_rng(2026)
    for _ in range(12):
        parts = int(rng.integers(1, 4))
        z = rng.uniform(0.5, 6, parts)
        q = rng.uniform(1e-3, 0.5, parts)
        steps = rng.integers(1, 2000, parts)
        delta = float(10 ** rng.uniform(-8, -3))
        run = {"noise_multiplier": np.repeat(z, steps), "sample_rate": np.repeat(q, steps), "delta": delta}
        assert epsilon(**run, orders=integer) == pytest.approx(_opacus_rdp(z, q, steps, delta, integer), rel=1e-9)
        assert epsilon(**run) == pytest.approx(_opacus_rdp(z, q, steps, delta), rel=1e-6)


def test_prv_agrees_with_opacus_on_random_heterogeneous_settings():
    from opacus.accountants import PRVAccountant

    rng = np.random.default_rng(7)
    for _ in range(4):
        z = rng.uniform(0.8, 4, 2)
        q = rng.uniform(1e-3, 0.1, 2)
        steps = rng.integers(10, 500, 2)
        theirs = PRVAccountant()
        for zi, qi, n in zip(z, q, steps):
            for _ in range(n):
                theirs.step(noise_multiplier=float(zi), sample_rate=float(qi))
        ours = epsilon(
            noise_multiplier=np.repeat(z, steps), sample_rate=np.repeat(q, steps), delta=1e-5, accountant="prv"
        )
        assert ours == pytest.approx(theirs.get_epsilon(delta=1e-5), abs=1e-6)


def _d2p2_ledger(n: int, *, dynamic: bool, sigma: float = 3.0, batch: int = 1024, epochs: int = 40) -> PrivacyLedger:
    """Opacus conventions of the D2P2 code: q = 1/⌈n/B⌉, ⌈n/B⌉ steps per epoch, σ_e = σ·e^(−1/4)."""
    per_epoch = math.ceil(n / batch)
    ledger = PrivacyLedger()
    for epoch in range(1, epochs + 1):
        for _ in range(per_epoch):
            ledger.record(noise_multiplier=sigma * epoch**-0.25 if dynamic else sigma, sample_rate=1 / per_epoch)
        ledger.end_epoch()
    return ledger


# D2P2-SGD reference values: ε after the first step of epoch 40 (the paper's logging, from which it reports
# 2.75 on Fashion-MNIST and 2.45 on SVHN) and at the end of epoch 40
@pytest.mark.parametrize(
    "n, dynamic, first_step, end",
    [
        (60000, False, 1.0681, 1.0825),
        (60000, True, 2.7554, 2.8185),
        (73257, False, 0.9573, 0.9702),
        pytest.param(73257, True, 2.4562, 2.5125, marks=pytest.mark.slow),
    ],  # ~20 s; the FMNIST dynamic case runs by default
)
def test_d2p2_reported_privacy_loss(n, dynamic, first_step, end):
    ledger = _d2p2_ledger(n, dynamic=dynamic)
    assert ledger_epsilons(ledger, delta=1e-5, accountant="prv", epochs=[40], logging="first-step")[0] == pytest.approx(
        first_step, abs=0.01
    )
    assert ledger_epsilons(ledger, delta=1e-5, accountant="prv", epochs=[40])[0] == pytest.approx(end, abs=0.01)


D2P2_EPOCHS = [1, 2, 5, 10, 20, 30, 40]
D2P2_CURVES = {  # D2P2-SGD reference values, end of epoch, PRV, σ = 3, B = 1024
    (60000, False): [0.163, 0.228, 0.362, 0.519, 0.747, 0.928, 1.082],
    (60000, True): [0.163, 0.256, 0.498, 0.859, 1.529, 2.176, 2.819],
    (73257, False): [0.146, 0.205, 0.325, 0.465, 0.670, 0.832, 0.970],
    (73257, True): [0.146, 0.229, 0.445, 0.767, 1.365, 1.942, 2.512],
    (50000, False): [0.180, 0.253, 0.401, 0.575, 0.828, 1.028, 1.199],
    (50000, True): [0.180, 0.284, 0.553, 0.954, 1.700, 2.422, 3.139],
}


@pytest.mark.parametrize("n, dynamic", [(60000, False), (60000, True)])
def test_d2p2_per_epoch_curves_fmnist(n, dynamic):
    values = ledger_epsilons(_d2p2_ledger(n, dynamic=dynamic), delta=1e-5, accountant="prv", epochs=D2P2_EPOCHS)
    assert values == pytest.approx(D2P2_CURVES[(n, dynamic)], abs=0.01)


@pytest.mark.slow
@pytest.mark.parametrize("n, dynamic", [(73257, False), (73257, True), (50000, False), (50000, True)])
def test_d2p2_per_epoch_curves_svhn_cifar(n, dynamic):
    values = ledger_epsilons(_d2p2_ledger(n, dynamic=dynamic), delta=1e-5, accountant="prv", epochs=D2P2_EPOCHS)
    assert values == pytest.approx(D2P2_CURVES[(n, dynamic)], abs=0.01)


# D2P2-SGD reference grid: FMNIST, 40 epochs: (B, σ, static, dynamic); ~12 s per row, one runs by default
@pytest.mark.parametrize(
    "batch, sigma, static, dynamic",
    [
        (512, 2, 1.203, 3.939),
        pytest.param(256, 3, 0.510, 1.286, marks=pytest.mark.slow),
        pytest.param(1024, 8, 0.365, 0.813, marks=pytest.mark.slow),
    ],
)
def test_d2p2_final_privacy_loss_grid_spot_checks(batch, sigma, static, dynamic):
    for is_dynamic, expected in ((False, static), (True, dynamic)):
        ledger = _d2p2_ledger(60000, dynamic=is_dynamic, sigma=sigma, batch=batch)
        assert ledger_epsilons(ledger, delta=1e-5, accountant="prv", epochs=[40])[0] == pytest.approx(
            expected, abs=0.01
        )


def test_rdp_per_epoch_curve_is_increasing_and_dynamic_exceeds_static():
    static = ledger_epsilons(_d2p2_ledger(60000, dynamic=False, epochs=10), delta=1e-5)
    dynamic = ledger_epsilons(_d2p2_ledger(60000, dynamic=True, epochs=10), delta=1e-5)
    assert np.all(np.diff(static) > 0) and np.all(np.diff(dynamic) > 0)
    assert dynamic[0] == pytest.approx(static[0]) and np.all(np.array(dynamic[1:]) > np.array(static[1:]))


def test_equal_steps_give_equal_epsilon_whatever_their_order():
    z = np.array([1.0] * 50 + [2.0] * 100)
    forward = epsilon(noise_multiplier=z, sample_rate=0.05, delta=1e-6)
    assert epsilon(noise_multiplier=z[::-1], sample_rate=0.05, delta=1e-6) == pytest.approx(forward)


def test_non_private_ledger_has_infinite_epsilon():
    ledger = PrivacyLedger(dp_claim=False)
    ledger.end_epoch()
    ledger.end_epoch()
    assert ledger_epsilons(ledger, delta=1e-5) == [math.inf, math.inf]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"noise_multiplier": 0.0}, "noise_multiplier"),
        ({"noise_multiplier": -1.0}, "noise_multiplier"),
        ({"sample_rate": 0.0}, "sample_rate"),
        ({"sample_rate": 1.5}, "sample_rate"),
        ({"delta": 0.0}, "delta"),
        ({"delta": 1.0}, "delta"),
        ({"steps": None}, "steps"),
        ({"accountant": "moments"}, "accountant"),
        ({"conversion": "tight"}, "conversion"),
        ({"orders": [0.5, 2]}, "orders"),
        ({"noise_multiplier": [1.0, 1.0], "steps": 3}, "steps=3"),
    ],
)
def test_bad_input_is_a_one_line_error(kwargs, message):
    arguments = {"noise_multiplier": 1.0, "sample_rate": 0.01, "steps": 10, "delta": 1e-5, **kwargs}
    with pytest.raises(DPAuditError, match=message) as caught:
        epsilon(**arguments)
    assert "\n" not in str(caught.value)


def test_calibration_rejects_bad_targets():
    with pytest.raises(DPAuditError, match="target_epsilon"):
        calibrate_noise(target_epsilon=0, delta=1e-5, sample_rate=0.01, steps=10)
    with pytest.raises(DPAuditError, match="noise_schedule"):
        calibrate_noise(target_epsilon=1, delta=1e-5, sample_rate=0.01, noise_schedule=[1.0, -1.0])


# --- Limits of the accountants: no memory bomb, no silent infinity, no floor (issue: accountants' limits) ---


def test_opacus_orders_floor_the_rdp_epsilon_at_their_conversion_term():
    # First principles: with RDP → 0 the improved conversion leaves (log(1/δ) − log α)/(α − 1) + log(1 − 1/α),
    # smallest at the largest order; at α = 63, δ = 1e-5 that is 0.10287.
    expected = (math.log(1e5) - math.log(63)) / 62 + math.log(62 / 63)
    assert rdp_epsilon_floor(delta=1e-5, orders=OPACUS_ORDERS) == pytest.approx(expected, rel=1e-12)
    largest = max(DEFAULT_ORDERS)
    assert rdp_epsilon_floor(delta=1e-5) == pytest.approx(
        (math.log(1e5) - math.log(largest)) / (largest - 1) + math.log(1 - 1 / largest), rel=1e-12
    )
    assert rdp_epsilon_floor(delta=1e-10) < 0.005  # ε ≈ 0.01 is reachable even at δ = 1e-10


def test_default_orders_lift_the_floor_of_a_small_epsilon_run():
    # z = 4.838, q = 0.0011, T = 957: Google's dp-accounting 0.6.0 PLD gives 0.0191 (a reference ε that any valid
    # upper bound must meet); Opacus's orders stop at 63 and report 0.1045.
    run = {"noise_multiplier": 4.838, "sample_rate": 0.0011, "steps": 957, "delta": 1e-5}
    assert epsilon(**run, orders=OPACUS_ORDERS) == pytest.approx(0.1045, abs=5e-4)
    assert 0.0191 <= epsilon(**run) <= 0.03


def test_calibration_names_the_order_grid_when_it_is_what_blocks_the_target():
    with pytest.raises(DPAuditError, match="orders up to 63") as caught:
        calibrate_noise(target_epsilon=0.05, delta=1e-5, sample_rate=0.0011, steps=957, orders=OPACUS_ORDERS)
    assert "\n" not in str(caught.value)
    z = calibrate_noise(target_epsilon=0.05, delta=1e-5, sample_rate=0.0011, steps=957)
    assert epsilon(noise_multiplier=z, sample_rate=0.0011, steps=957, delta=1e-5) == pytest.approx(0.05, abs=1e-4)


def test_wider_orders_keep_opacus_epsilon_where_its_best_order_is_inside_its_grid():
    for z, q, steps in [(1.0, 0.01, 1000), (0.8, 0.1, 200), (3.0, 1 / 59, 2360)]:
        run = {"noise_multiplier": z, "sample_rate": q, "steps": steps, "delta": 1e-5}
        assert epsilon(**run) == epsilon(**run, orders=OPACUS_ORDERS)


def test_prv_never_returns_infinity_silently():
    # The PRV grid would reach t ≈ 893 (e^t overflows float64 beyond 709.8); Opacus returned inf after 100 s. The
    # RDP bound (807.1, Opacus's RDP too) is valid, above dp-accounting's PLD value 783.3, and the warning says it
    # replaced PRV. (dp-accounting's own RdpAccountant gives 2231.3: at z = 0.5, q = 0.1 its fractional-order series
    # stops after 1000 terms below α = 1.7; the RDP accountant takes dpaudit's series at fractional orders.)
    run = {"noise_multiplier": 0.5, "sample_rate": 0.1, "steps": 10_000, "delta": 1e-5}
    with pytest.warns(AccountingFallbackWarning, match="RDP upper bound"):
        value = epsilon(**run, accountant="prv")
    assert value == epsilon(**run)
    assert value == pytest.approx(807.1, abs=0.05)
    assert value >= 783.3


def test_prv_numerical_failure_of_opacus_is_a_warned_rdp_bound():
    # δ = 1e-18 is below what a grid of 10⁵ points resolves in long double; Opacus raises ValueError there.
    run = {"noise_multiplier": 1.0, "sample_rate": 0.01, "steps": 100, "delta": 1e-18}
    with pytest.warns(AccountingFallbackWarning, match="Opacus failed"):
        value = epsilon(**run, accountant="prv")
    assert math.isfinite(value) and value == epsilon(**run)


def test_prv_grid_over_the_memory_budget_is_refused_before_it_is_built():
    run = {"noise_multiplier": 0.7, "sample_rate": 0.1, "steps": 10_000, "delta": 1e-5}
    grid = prv_grid(**run)
    assert grid["bytes"] > PRV_MEMORY_BUDGET and grid["domain"] < 700
    with pytest.raises(DPAuditError, match="accountant='rdp'") as caught:
        epsilon(**run, accountant="prv")
    assert "\n" not in str(caught.value) and "z = 0.7, q = 0.1, T = 10000" in str(caught.value)


def test_prv_grid_follows_opacus_mesh_and_domain():
    # Mesh from Gopi et al.: eps_error / √(T·log(12/δ_error)/2) with δ_error = δ/1000; domain ≥ ε + 3.
    grid = prv_grid(noise_multiplier=1.0, sample_rate=0.01, steps=1000, delta=1e-5)
    assert grid["mesh"] == pytest.approx(0.01 / math.sqrt(1000 * math.log(12 / 1e-8) / 2), rel=1e-12)
    assert grid["domain"] >= epsilon(noise_multiplier=1.0, sample_rate=0.01, steps=1000, delta=1e-5) + 3
    assert grid["points"] == pytest.approx(2 * grid["domain"] / grid["mesh"])


def test_prv_domain_and_epsilon_are_opacus_bit_for_bit():
    from opacus.accountants import PRVAccountant
    from opacus.accountants.analysis.prv import PoissonSubsampledGaussianPRV, compute_safe_domain_size

    table = [(0.9, 0.05, 120), (2.5, 0.3, 7)]
    theirs = compute_safe_domain_size(
        prvs=[PoissonSubsampledGaussianPRV(q, z) for z, q, _ in table],
        max_self_compositions=[count for *_, count in table],
        eps_error=0.01,
        delta_error=1e-8,
    )
    assert (
        prv_grid(noise_multiplier=[0.9] * 120 + [2.5] * 7, sample_rate=[0.05] * 120 + [0.3] * 7, delta=1e-5)["domain"]
        == theirs
    )
    ours = accounting._prv_epsilon(table, delta=1e-5, eps_error=0.01, orders=DEFAULT_ORDERS, conversion="improved")
    accountant = PRVAccountant()
    accountant.history = list(table)
    assert ours == accountant.get_epsilon(delta=1e-5)  # the same domain, grid and composition: bit for bit


@pytest.mark.parametrize("q, z", [(0.5, 1.3), (0.1, 0.7), (0.01, 1.0), (3.8e-4, 25.0), (0.9, 2.0)])
def test_the_vectorised_series_is_opacus_rdp_up_to_rounding(q, z):
    # the PRV domain's RDP bound at every Opacus order, the same series summed at once: within a tenth of the error
    # that accounting._settled allows for
    ours = accounting._series_step_rdp.__wrapped__(q, z)
    theirs = accounting._opacus_step_rdp.__wrapped__(q, z)
    assert np.all(np.isfinite(theirs)) and np.all(
        np.abs(ours - theirs) <= 0.1 * accounting._SERIES_ERROR * np.maximum(theirs, 1)
    )


@pytest.mark.parametrize("table", [[(4.689, 0.5, 20)], [(0.9, 0.05, 120), (2.5, 0.3, 7)], [(1.1, 0.01, 3000)]])
def test_a_prv_epsilon_is_opacus_own_bit_for_bit_with_its_domain_from_the_vectorised_series(table):
    from opacus.accountants import PRVAccountant

    fast = accounting._prv_grid(table, delta=1e-5, eps_error=0.01, fast=True)
    assert accounting._settled(fast["domain"], table, delta_error=1e-8, eps_error=0.01)
    accountant = PRVAccountant()
    accountant.history = list(table)
    ours = accounting._prv_epsilon(table, delta=1e-5, eps_error=0.01, orders=DEFAULT_ORDERS, conversion="improved")
    assert ours == accountant.get_epsilon(delta=1e-5)


def test_a_domain_the_vectorised_series_cannot_settle_is_opacus_own(monkeypatch):
    table, delta_error = [(4.689, 0.5, 20)], 1e-8
    exact = accounting._prv_grid(table, delta=1e-5, eps_error=0.01)["domain"]
    mesh = 0.01 / np.sqrt(20 * np.log(12 / delta_error) / 2)
    line = np.ceil(exact / mesh) * mesh  # a grid line: an L a rounding away on either side gives another grid
    assert not accounting._settled(line, table, delta_error=delta_error, eps_error=0.01)
    assert accounting._settled(line - mesh / 2, table, delta_error=delta_error, eps_error=0.01)
    assert not accounting._settled(700.0, table, delta_error=delta_error, eps_error=0.01)  # the largest loss
    monkeypatch.setattr(accounting, "_settled", lambda *args, **kwargs: False)
    assert accounting._prv_grid(table, delta=1e-5, eps_error=0.01, fast=True)["domain"] == exact
    monkeypatch.undo()
    monkeypatch.setattr(accounting, "_series_step_rdp", lambda q, z: None)  # a series that does not end in time
    assert accounting._prv_grid(table, delta=1e-5, eps_error=0.01, fast=True)["domain"] == exact


def test_prv_calibration_stays_within_memory(tmp_path):
    # Before: the bracket asked PRV for ε at z = 0.05, a grid of 1.3e8 points; one process grew to 15.5 GB. Here the
    # calibration runs with its address space capped at what the imports took plus 1.5 GiB.
    script = tmp_path / "calibrate.py"
    script.write_text(
        "import resource, json\n"
        "import opacus.accountants, dpaudit.theory\n"
        "size = int(open('/proc/self/status').read().split('VmSize:')[1].split()[0]) * 1024\n"
        "resource.setrlimit(resource.RLIMIT_AS, (size + 3 * 2**29, resource.RLIM_INFINITY))\n"
        "z = dpaudit.theory.calibrate_noise(target_epsilon=8.0, delta=1e-5, sample_rate=0.1, steps=100,\n"
        "                                   accountant='prv')\n"
        "e = dpaudit.theory.epsilon(noise_multiplier=z, sample_rate=0.1, steps=100, delta=1e-5, accountant='prv')\n"
        "print(json.dumps([z, e]))\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    z, achieved = json.loads(done.stdout.strip().splitlines()[-1])
    assert achieved <= 8.0 and achieved == pytest.approx(8.0, abs=0.01)
    assert z < calibrate_noise(target_epsilon=8.0, delta=1e-5, sample_rate=0.1, steps=100)  # PRV is tighter than RDP


def test_rdp_epsilon_is_never_silently_infinite():
    with pytest.raises(DPAuditError, match="infinite"):
        rdp_to_epsilon(rdp=np.full(3, np.inf), orders=[2.0, 4.0, 8.0], delta=1e-5)
    # σ = 1e-200: σ² underflows to 0, where the series gave NaN; the RDP of a noiseless step is +inf at every order
    assert np.all(rdp_subsampled_gaussian(noise_multiplier=1e-200, sample_rate=0.1, orders=[1.5, 2.0, 64.0]) == np.inf)
    with pytest.raises(DPAuditError, match="infinite"):
        epsilon(noise_multiplier=1e-200, sample_rate=0.1, steps=3, delta=1e-5)


# ---------------------------------------------------------------------------------------------
# shuffled batches: a valid upper bound beside the Poisson figure (privacy review, D2)
# ---------------------------------------------------------------------------------------------


def _analytic_gaussian_epsilon(mu: float, delta: float) -> float:
    """Balle & Wang (2018): the ε at which a Gaussian mechanism of μ = Δ/σ is (ε, δ)-DP, by bisection on
    δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (decreasing in ε)."""
    from scipy.stats import norm

    def delta_of(eps: float) -> float:
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)

    low, high = 0.0, 1.0
    while delta_of(high) > delta:
        high *= 2
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if delta_of(mid) > delta else (low, mid)
    return (low + high) / 2


@pytest.mark.parametrize("z, epochs, delta", [(1.0, 10, 1e-5), (2.0, 30, 1e-5), (0.8, 3, 1e-6), (5.0, 1, 1e-5)])
def test_shuffled_upper_bound_is_the_composed_gaussian_mechanism(z, epochs, delta):
    from dpaudit.theory import shuffled_upper_epsilon
    from dpaudit.theory.tradeoff import sgm_epsilon

    expected = _analytic_gaussian_epsilon(math.sqrt(epochs) / z, delta)  # E Gaussian steps of sensitivity 1
    steps_per_epoch = 7
    got = shuffled_upper_epsilon(
        noise_multipliers=[z] * (steps_per_epoch * epochs),
        epoch_ends=[steps_per_epoch * (e + 1) for e in range(epochs)],
        delta=delta,
    )
    assert got == pytest.approx(expected, rel=1e-6)
    # the same composition through the PLD accountant at q = 1, T = E (its upper estimate)
    pld = sgm_epsilon(noise_multipliers=[z] * epochs, sample_rates=[1.0] * epochs, delta=delta)
    assert expected - 1e-6 <= pld <= expected + 0.01
    # and it is not below the Poisson figure of the same run (q = 1/7): shuffling claims no amplification here
    poisson = epsilon(noise_multiplier=z, sample_rate=1 / steps_per_epoch, steps=steps_per_epoch * epochs, delta=delta)
    assert got > poisson


def test_shuffled_upper_bound_per_epoch_from_a_ledger():
    from dpaudit.theory import ledger_shuffled_epsilons

    ledger = PrivacyLedger(sampling="shuffle")
    for epoch in ([2.0, 2.0, 1.0, 2.0], [2.0] * 4):  # epoch 1's worst step (z = 1) counts for the whole epoch
        for z in epoch:
            ledger.record(noise_multiplier=z, sample_rate=0.25)
        ledger.end_epoch()
    got = ledger_shuffled_epsilons(ledger.to_dict(), delta=1e-5)
    assert got[0] == pytest.approx(_analytic_gaussian_epsilon(1.0, 1e-5), rel=1e-6)
    assert got[1] == pytest.approx(_analytic_gaussian_epsilon(math.sqrt(1 + 1 / 4), 1e-5), rel=1e-6)
    with pytest.raises(DPAuditError, match="not in the ledger"):
        ledger_shuffled_epsilons(ledger, delta=1e-5, epochs=[3])


def test_d2p2_figure_paper_privacy_constants_match_the_reproduced_values():
    """The "paper parameters" markers of D2P2-SGD Fig 5 are the values reproduced above (PRV, first-step logging)."""
    from reproduce.figures.d2p2_sgd import PAPER_PRIVACY

    reproduced = {60000: (1.0681, 2.7554), 73257: (0.9573, 2.4562)}  # test_d2p2_reported_privacy_loss's first_step
    for (_, n), drawn in PAPER_PRIVACY.items():
        assert drawn == pytest.approx(reproduced[n], abs=0.01)


# --- T identical steps cost what one step costs (issue: nothing lost, nothing mixed, nothing injected) ---


@contextlib.contextmanager
def finishes_within(seconds: int):
    """Fail, rather than hang or swap, where the old per-step arrays come back (SIGALRM; no guard elsewhere)."""
    if not hasattr(signal, "SIGALRM"):  # pragma: no cover - Windows
        yield
        return

    def expire(*_):
        raise TimeoutError(f"did not finish within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_billion_unsubsampled_steps_have_the_classic_epsilon_computed_by_hand():
    # q = 1: each step is the Gaussian mechanism, RDP α/(2z²) exactly, so T = 10⁹ steps of z = 2·10⁵ have
    # RDP(α) = 10⁹·α/(8·10¹⁰) = α/80 and the classic conversion gives ε = min_α α/80 + log(1/δ)/(α − 1): over the
    # integer orders 2 … 63 the minimum is at α = 31 (0.3875 + log(10⁵)/30 = 0.771264; α = 32 gives 0.771385).
    by_hand = 31 / 80 + math.log(1e5) / 30
    assert by_hand == pytest.approx(0.771264, abs=1e-6)
    assert by_hand == min(alpha / 80 + math.log(1e5) / (alpha - 1) for alpha in range(2, 64))
    with finishes_within(30):
        got = epsilon(
            noise_multiplier=2e5, sample_rate=1.0, steps=10**9, delta=1e-5, conversion="classic", orders=range(2, 64)
        )
    assert got == pytest.approx(by_hand, rel=1e-12)


def test_per_step_lists_are_grouped_into_the_same_composition():
    # 500 steps of z = 10 and 500 of z = 20 at q = 1: RDP(α) = 500α/200 + 500α/800 = 3.125·α; the classic ε over
    # the integer orders is smallest at α = 3: 9.375 + log(10⁵)/2 = 15.1315 (α = 2: 17.76, α = 4: 16.34).
    by_hand = 3.125 * 3 + math.log(1e5) / 2
    run = {"delta": 1e-5, "conversion": "classic", "orders": range(2, 64)}
    interleaved = [10.0, 20.0] * 500
    assert epsilon(noise_multiplier=interleaved, sample_rate=1.0, **run) == pytest.approx(by_hand, rel=1e-12)
    assert epsilon(noise_multiplier=interleaved, sample_rate=[1.0] * 1000, steps=1000, **run) == pytest.approx(by_hand)
    assert epsilon(noise_multiplier=[10.0] * 3, sample_rate=[0.01, 0.02, 0.01], delta=1e-5) == epsilon(
        noise_multiplier=[10.0, 10.0, 10.0], sample_rate=[0.01, 0.01, 0.02], delta=1e-5
    )


def test_a_trillion_subsampled_steps_are_accounted_in_no_time():
    # Before: a per-step array of T entries (26 s at T = 10⁷, 3.4 GB at 10⁸); 10¹² steps could not be accounted.
    # The RDP of T identical steps is T times one step's, per order (classic conversion, by linearity), one step's
    # being the RDP accountant's (dp-accounting's; at RDP ≈ 1e-12 a step, dpaudit's own series differs in the 5th
    # digit: floating point near 1 + 1e-12).
    orders = np.array(DEFAULT_ORDERS)
    one_step = step_rdp(100.0, 1e-4, DEFAULT_ORDERS)
    linear = float(np.min(10**12 * one_step + math.log(1e5) / (orders - 1)))
    with finishes_within(30):
        got = epsilon(noise_multiplier=100.0, sample_rate=1e-4, steps=10**12, delta=1e-5, conversion="classic")
        assert got == pytest.approx(linear, rel=1e-12) and got == pytest.approx(5.2987, abs=1e-4)
        ledger = PrivacyLedger()
        ledger.record(noise_multiplier=100.0, sample_rate=1e-4)
        ledger.runs[0].steps = 10**12
        ledger.end_epoch()
        assert ledger_epsilons(ledger, delta=1e-5, conversion="classic") == [pytest.approx(linear, rel=1e-12)]
        z = calibrate_noise(target_epsilon=got, delta=1e-5, sample_rate=1e-4, steps=10**12, conversion="classic")
        assert z == pytest.approx(100.0, rel=1e-4)
        # PRV: the grid still grows as √T; it is sized first and refused in one line, before anything is built
        with pytest.raises(DPAuditError, match="PRV_MEMORY_BUDGET") as caught:
            epsilon(noise_multiplier=100.0, sample_rate=1e-4, steps=10**12, delta=1e-5, accountant="prv")
        assert "\n" not in str(caught.value) and "T = 1000000000000" in str(caught.value)
        assert prv_grid(noise_multiplier=100.0, sample_rate=1e-4, steps=10**12, delta=1e-5)["points"] > 1e9


BAD_NUMBERS = [math.nan, math.inf, -math.inf, -1.0, 0.0, True, False, "0.5", None, [0.5, 0.5], {"x": 1}, 10**400]


@pytest.mark.parametrize("value", BAD_NUMBERS, ids=lambda value: repr(value)[:12])
@pytest.mark.parametrize("argument", ["delta", "eps_error", "steps", "noise_multiplier", "sample_rate", "orders"])
def test_every_bad_argument_of_epsilon_is_one_line(argument, value):
    if argument == "steps" and type(value) is float and value == 0:
        return  # zero steps (an integral float) are a valid count: ε = 0
    run = {"noise_multiplier": 1.0, "sample_rate": 0.01, "steps": 10, "delta": 1e-5, argument: value}
    if argument in ("noise_multiplier", "sample_rate") and isinstance(value, list):
        run["steps"] = 2  # one value per step is allowed: give it a bad one instead
        run[argument] = [0.5, value[0] * -1]
    for call in (epsilon, prv_grid):
        if call is prv_grid and argument == "orders":
            continue
        with pytest.raises(DPAuditError, match=argument.split("_")[0]) as caught:
            call(**run)
        assert "\n" not in str(caught.value)


@pytest.mark.parametrize("steps", [-3, 0, 2.5, True, "3", math.nan, 1e300, [10]], ids=lambda value: repr(value)[:12])
def test_calibration_refuses_a_bad_step_count_in_one_line(steps):
    with pytest.raises(DPAuditError, match="steps") as caught:
        calibrate_noise(target_epsilon=1.0, delta=1e-5, sample_rate=0.01, steps=steps)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("value", BAD_NUMBERS, ids=lambda value: repr(value)[:12])
@pytest.mark.parametrize("argument", ["target_epsilon", "delta", "tolerance", "grid", "eps_error", "sample_rate"])
def test_every_bad_argument_of_calibrate_noise_is_one_line(argument, value):
    run = {"target_epsilon": 1.0, "delta": 1e-5, "sample_rate": 0.01, "steps": 10, argument: value}
    if argument == "sample_rate" and isinstance(value, list):
        run[argument] = [0.5, -0.5] * 5
    if argument == "grid" and value is None:
        return  # grid=None is the default: no grid
    with pytest.raises(DPAuditError, match=argument.split("_")[0]) as caught:
        calibrate_noise(**run)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"noise_schedule": ["a", "b"]}, "noise_schedule"),
        ({"noise_schedule": [1.0, 2.0], "steps": 3}, "steps=3 but 2"),
        ({"sample_rate": [0.01, 0.02], "noise_schedule": [1.0, 1.0, 1.0]}, "differ in length"),
        ({"preceding": 3.0}, "preceding must be a pair"),
        ({"preceding": ([1.0, "x"], 0.01)}, "preceding noise multipliers"),
        ({"grid": 1e-15}, "grid must be at least 1e-12"),
        ({"accountant": ["rdp"]}, "accountant"),
    ],
)
def test_calibration_refuses_bad_schedules_in_one_line(kwargs, message):
    with pytest.raises(DPAuditError, match=message) as caught:
        calibrate_noise(**{"target_epsilon": 1.0, "delta": 1e-5, "sample_rate": 0.01, "steps": 10, **kwargs})
    assert "\n" not in str(caught.value)


def test_an_empty_warm_up_is_no_warm_up():
    run = {"target_epsilon": 2.0, "delta": 1e-5, "sample_rate": 0.01, "steps": 100}
    assert calibrate_noise(**run, preceding=([], 0.01)) == calibrate_noise(**run)


def test_a_fine_calibration_grid_is_searched_by_bisection():
    # Before: from the search's z the grid was walked one multiple at a time, about 10⁶ evaluations at grid = 1e-11
    # (and 10¹⁰ at 1e-15, now refused: z is returned to 12 decimals).
    with finishes_within(60):
        z = calibrate_noise(target_epsilon=1.0, delta=1e-5, sample_rate=0.01, steps=1000, grid=1e-11)
    run = {"sample_rate": 0.01, "steps": 1000, "delta": 1e-5}
    assert z == round(z, 11) and epsilon(noise_multiplier=z, **run) <= 1.0 < epsilon(noise_multiplier=z - 1e-11, **run)


def test_rdp_at_the_edges_of_floating_point_is_a_bound_not_a_crash():
    orders = [1.5, 2.0, 10.5, 64.0]
    # q = 1 − 1e-16 at σ = 0.1: the fractional series cancels below the precision (its sum went negative, then NaN,
    # and it ran to 10⁷ terms: 40 s and 9.8 GB before an error). The RDP is at most the unsubsampled α/(2σ²) = 50α,
    # and at this q that is the answer.
    with finishes_within(30):
        rdp = rdp_subsampled_gaussian(noise_multiplier=0.1, sample_rate=1 - 1e-16, orders=orders)
    assert rdp == pytest.approx(np.array(orders) * 50, rel=1e-9)
    # σ = 1e200: σ² overflowed (OverflowError); the RDP is below 1e-390, 0 in floating point, never negative
    assert np.all(rdp_subsampled_gaussian(noise_multiplier=1e200, sample_rate=0.5, orders=orders) == 0)
    assert np.all(rdp_subsampled_gaussian(noise_multiplier=1e149, sample_rate=0.5, orders=orders) >= 0)
    # q = 5e-324: 1/q overflowed in the split point of the series
    rdp = rdp_subsampled_gaussian(noise_multiplier=1.0, sample_rate=5e-324, orders=orders)
    assert np.all((rdp >= 0) & (rdp < 1e-300))
    # the RDP accountant (dp-accounting's sums at integer orders, dpaudit's series at fractional ones): never above
    # the unsubsampled α/(2σ²), and its integer orders' RDP below 1e-300
    accountant = step_rdp(1.0, 5e-324, tuple(orders))
    assert np.all((accountant >= 0) & (accountant <= np.array(orders) / 2)) and np.all(accountant[[1, 3]] < 1e-300)
