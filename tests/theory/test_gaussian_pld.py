"""The vectorised PLDs of the subsampled Gaussian (dpaudit.theory._gaussian_pld) against dp-accounting's own loops,
bit for bit."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.pld import common, pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_module

from dpaudit.theory import _gaussian_pld
from dpaudit.theory._gaussian_pld import (
    _convolve_bounds,
    _exact_logs,
    _prefix_to_truncate,
    compose,
    delta_for_epsilons,
    epsilon_for_delta,
    gaussian_pld,
    self_compose,
)
from dpaudit.theory.tradeoff import sgm_delta, sgm_epsilon


def _masses(pmf: pld_pmf.PLDPmf) -> tuple[dict[int, float], float]:
    """A PMF's masses by grid index (zeros dropped) and its mass at +∞."""
    if isinstance(pmf, pld_pmf.DensePLDPmf):
        indices = range(pmf._lower_loss, pmf._lower_loss + pmf._probs.size)
        masses = {index: float(mass) for index, mass in zip(indices, pmf._probs) if mass != 0}
    else:
        masses = {index: mass for index, mass in pmf._loss_probs.items() if mass != 0}
    return masses, pmf._infinity_mass


def _reference(z: float, q: float, discretization: float, upper: bool = False) -> pld_module.PrivacyLossDistribution:
    return pld_module.from_gaussian_mechanism(
        standard_deviation=z,
        sensitivity=1.0,
        sampling_prob=q,
        value_discretization_interval=discretization,
        pessimistic_estimate=upper,
        use_connect_dots=upper,
    )


@pytest.mark.parametrize(
    ("z", "q", "discretization"),
    [
        (0.98, 0.0345, 1e-3),  # an Opacus run on digits with 2·10⁵ record canaries; dense PMFs
        (0.5, 0.2, 1e-3),
        (3.0, 0.7, 1e-3),
        (10.0, 0.001, 1e-2),  # a handful of grid points: sparse PMFs
        (1.7, 1.0, 1e-3),  # no subsampling: one PMF
        pytest.param(0.98, 0.0345, 1e-5, marks=pytest.mark.slow),  # the finest grid of the family bound's reported ε
    ],
)
@pytest.mark.parametrize("upper", [False, True])
def test_gaussian_pld_equals_dp_accounting_bit_for_bit(z: float, q: float, discretization: float, upper: bool) -> None:
    mine = gaussian_pld(z=z, q=q, discretization=discretization, upper=upper)
    reference = _reference(z, q, discretization, upper)
    assert _masses(mine._pmf_remove) == _masses(reference._pmf_remove)
    assert _masses(mine._pmf_add) == _masses(reference._pmf_add)
    assert type(mine._pmf_remove) is type(reference._pmf_remove) and type(mine._pmf_add) is type(reference._pmf_add)
    assert (mine._pmf_add is mine._pmf_remove) == (reference._pmf_add is reference._pmf_remove)


def test_the_epsilons_of_a_ledger_are_dp_accounting_s() -> None:
    """sgm_epsilon composes the vectorised PMFs as dp-accounting composes its own (groups in ascending z)."""
    z, q, steps, discretization = [1.1] * 30 + [0.8] * 20, [0.05] * 30 + [0.1] * 20, 50, 1e-3
    epsilons = {}
    for estimate in ("lower", "upper"):
        reference = _reference(0.8, 0.1, discretization, estimate == "upper").self_compose(20)
        reference = reference.compose(_reference(1.1, 0.05, discretization, estimate == "upper").self_compose(30))
        epsilons[estimate] = sgm_epsilon(
            noise_multipliers=z, sample_rates=q, delta=1e-5, discretization=discretization, estimate=estimate
        )
        assert epsilons[estimate] == reference.get_epsilon_for_delta(1e-5)
    # each step's loss is rounded by less than d, down by the buckets and up by connect-the-dots at most
    assert 0 < epsilons["lower"] < epsilons["upper"] < epsilons["lower"] + steps * discretization


@pytest.mark.parametrize(
    ("z", "q", "discretization", "count", "upper"),
    [
        (0.98, 0.0345, 1e-2, 290, True),  # a family-bound hypothesis of the Opacus run on digits
        (0.98, 0.0345, 1e-3, 290, False),
        (2.5, 0.3, 1e-2, 40, True),
        (0.7, 0.01, 1e-2, 3000, True),
        (1.7, 1.0, 1e-2, 12, False),
    ],
)
def test_self_compose_equals_dp_accounting_bit_for_bit(
    z: float, q: float, discretization: float, count: int, upper: bool
) -> None:
    mine = self_compose(
        gaussian_pld(z=z, q=q, discretization=discretization, upper=upper), count=count, tail_mass_truncation=1e-15
    )
    reference = _reference(z, q, discretization, upper).self_compose(count, tail_mass_truncation=1e-15)
    assert _masses(mine._pmf_remove) == _masses(reference._pmf_remove)
    assert _masses(mine._pmf_add) == _masses(reference._pmf_add)
    assert mine._pmf_remove._lower_loss == reference._pmf_remove._lower_loss


def test_convolve_bounds_are_dp_accounting_s(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Chernoff truncation bounds on PMFs of many shapes, the fallback included (a negative mass)."""
    rng = np.random.default_rng(0)
    for size in (1, 2, 7, 300, 5000):
        for count in (2, 50, 1000):
            probabilities = rng.dirichlet(np.full(size, 0.3))
            probabilities[rng.random(size) < 0.2] = 0.0
            if size > 2 and count == 50:
                probabilities[1] = -1e-18
            assert _convolve_bounds(probabilities, count, 1e-15) == common.compute_self_convolve_bounds(
                probabilities, count, 1e-15
            )
    tiny = np.full(40, 1e-305)  # products e^(i·λ)·p near the subnormals: the bounds are dp-accounting's
    monkeypatch.setattr(common, "compute_self_convolve_bounds", lambda *args: ("dp-accounting's", args[1]))
    assert _convolve_bounds(tiny, 3, 1e-15) == ("dp-accounting's", 3)


@pytest.mark.parametrize(
    ("first", "second", "upper"),
    [
        ((0.98, 0.0345, 1e-3, 137), (0.99, 0.0345, 1e-3, 11), True),  # an Opacus ledger of three groups, in part
        ((0.98, 0.0345, 1e-3, 137), (0.99, 0.0345, 1e-3, 11), False),
        ((1.5, 0.2, 1e-2, 1), (3.0, 0.5, 1e-2, 1), True),  # sparse PMFs
        ((0.98, 0.0345, 1e-2, 137), (3.0, 0.5, 1e-2, 1), True),  # dense and sparse
        ((3.0, 0.5, 1e-2, 1), (0.98, 0.0345, 1e-2, 137), False),
        ((0.8, 0.1, 1e-2, 20), (1.1, 0.05, 1e-2, 30), False),
    ],
)
def test_compose_equals_dp_accounting_bit_for_bit(
    first: tuple[float, float, float, int], second: tuple[float, float, float, int], upper: bool
) -> None:
    plds = []
    for z, q, discretization, count in (first, second):
        pld = _reference(z, q, discretization, upper)
        plds.append(pld if count == 1 else pld.self_compose(count))
    mine, reference = compose(plds[0], plds[1], tail_mass_truncation=1e-15), plds[0].compose(plds[1])
    for side in ("_pmf_remove", "_pmf_add"):
        assert _masses(getattr(mine, side)) == _masses(getattr(reference, side))
        assert type(getattr(mine, side)) is type(getattr(reference, side))


def test_prefix_to_truncate_is_dp_accounting_s() -> None:
    """The running sums cross the threshold where dp-accounting's loop finds it: inside the first chunk, across
    chunks, at the first element; never, for a threshold above the total."""
    rng = np.random.default_rng(1)
    probabilities = rng.random(20_000) * 1e-19
    for threshold in (1e-17, 5e-16, 9e-16, 1e-20):
        reference = pld_pmf._truncate_tails(probabilities.copy(), 2 * threshold, True)[0]
        assert _prefix_to_truncate(probabilities, threshold) == reference
    assert _prefix_to_truncate(probabilities, 1.0) == probabilities.size


@pytest.mark.parametrize("upper", [False, True])
def test_a_grid_not_reproduced_goes_to_dp_accounting_s_own_loop(upper: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_gaussian_pld, "_inverse_losses", lambda *args: None)
    mine = gaussian_pld(z=0.98, q=0.0345, discretization=1e-2, upper=upper)
    reference = _reference(0.98, 0.0345, 1e-2, upper)
    assert _masses(mine._pmf_remove) == _masses(reference._pmf_remove)
    assert _masses(mine._pmf_add) == _masses(reference._pmf_add)


@pytest.fixture(scope="module")
def profiles() -> list[pld_module.PrivacyLossDistribution]:
    """PLDs of every kind the family bound reads: dense and sparse PMFs, both estimates, with and without
    subsampling, composed, on coarse and fine grids (thousands of losses above ε: many chunks)."""
    plds = [
        _reference(0.98, 0.0345, 1e-2, True).self_compose(290),
        _reference(0.98, 0.0345, 1e-3, False).self_compose(20),
        _reference(1.7, 1.0, 1e-3, True).self_compose(12),  # q = 1: one PMF
        _reference(10.0, 0.001, 1e-2, True),  # sparse PMFs
        _reference(1.5, 0.2, 1e-2, False).compose(_reference(3.0, 0.5, 1e-2, False)),
    ]
    # losses so large that e^−loss is 0: the loop's early return; and a mass at +∞
    plds.append(pld_module.PrivacyLossDistribution(pld_pmf.DensePLDPmf(0.01, 74_990, np.full(20, 0.05), 0.0, True)))
    plds.append(pld_module.PrivacyLossDistribution(pld_pmf.DensePLDPmf(0.5, -3, np.full(10, 0.0999), 1e-3, True)))
    return plds


def test_delta_for_epsilons_equals_dp_accounting_bit_for_bit(profiles: list) -> None:
    for pld in profiles:
        top = pld.get_epsilon_for_delta(1e-12)
        top = top if math.isfinite(top) else 20.0  # a mass at +∞ above 1e-12
        for epsilons in (np.linspace(0.0, top + 0.1, 1000), np.array([0.0]), np.array([-1.0, 3.0, 3.0, top + 50])):
            reference = np.asarray(pld.get_delta_for_epsilon(epsilons.tolist()), dtype=float)
            # e^ε·0 is NaN above ε ≈ 709 in both
            assert np.array_equal(delta_for_epsilons(pld, epsilons), reference, equal_nan=True)
    # ε out of order, which dp-accounting refuses: each its δ in ascending order
    epsilons = np.random.default_rng(3).permutation(np.linspace(0.0, 6.0, 50))
    order = np.argsort(epsilons)
    assert np.array_equal(
        delta_for_epsilons(profiles[0], epsilons)[order], delta_for_epsilons(profiles[0], epsilons[order])
    )


@pytest.mark.parametrize("delta", [1e-300, 1e-15, 1e-12, 1e-8, 1e-5, 1e-3, 0.1, 0.5, 0.999])
def test_epsilon_for_delta_equals_dp_accounting_bit_for_bit(delta: float, profiles: list) -> None:
    for pld in profiles:
        mine, reference = epsilon_for_delta(pld, delta), pld.get_epsilon_for_delta(delta)
        assert mine == reference and type(mine) is type(reference)


def test_exact_logs_take_math_log_where_a_comparison_is_close() -> None:
    rng = np.random.default_rng(2)
    values = rng.random(1000) * 10
    near = np.log(values)
    near[::2] += 1.0  # far: numpy's log kept
    logs = _exact_logs(values, near)
    assert logs[1::2].tolist() == [math.log(value) for value in values[1::2].tolist()]
    assert np.array_equal(logs[::2], np.log(values[::2]))


def test_sgm_delta_takes_epsilons_in_any_order() -> None:
    """dp-accounting refuses ε out of order (a raw ValueError, which sgm_delta passed on); each gets its δ."""
    ledger = {"noise_multipliers": [1.1] * 30, "sample_rates": [0.05] * 30}
    backwards = sgm_delta(**ledger, epsilons=[2.0, 0.5, 1.0])
    assert backwards.tolist() == sgm_delta(**ledger, epsilons=[0.5, 1.0, 2.0])[[2, 0, 1]].tolist()
