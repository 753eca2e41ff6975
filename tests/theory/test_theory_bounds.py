"""The bound registry of dpaudit.theory.bounds: one record per bound, and one RDP → (ε, δ) conversion."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpaudit import theory
from dpaudit._validation import DPAuditError
from dpaudit.theory import accounting
from dpaudit.theory.bounds import BOUNDS, Bound, get_bound

KNOWN_PARAMETERS = {"alpha", "C", "sigma", "n", "b", "eta", "L", "D", "m"}
FIG1 = dict(alpha=1.1, L=1.0, C=2.0, sigma=4.0, D=1.0, n=8, b=2, m=1.0, eta=0.2)


def test_every_bound_is_one_complete_record():
    assert list(BOUNDS) == theory.available_bounds()
    assert theory.available_bounds()[:4] == ["dpsgd-gc", "dpsgd-dc", "dpsgd-gc-strong", "dpsgd-dc-strong"]
    for name, bound in BOUNDS.items():
        assert isinstance(bound, Bound) and bound.name == name and get_bound(name) is bound
        assert bound.paper and bound.formula and bound.conditions
        assert bound.parameters[0] == "alpha" and set(bound.parameters) <= KNOWN_PARAMETERS
        extras = {*bound.condition_parameters, *bound.optional_condition_parameters}
        assert extras <= KNOWN_PARAMETERS and not extras & set(bound.parameters)
        assert theory.bound_parameters(name) == bound.parameters
        assert theory.condition_parameters(name) == (
            (*bound.parameters, *bound.condition_parameters),
            bound.optional_condition_parameters,
        )


def test_rdp_bound_evaluates_the_record_and_its_variants():
    steps = np.array([0.0, 1.0, 7.0, 200.0])
    for name, bound in BOUNDS.items():
        params = {key: FIG1[key] for key in bound.parameters}
        checked = {key: (int(v) if key in ("n", "b") else float(v)) for key, v in params.items()}
        expected = bound.evaluate(steps, checked)
        assert np.array_equal(theory.rdp_bound(name, steps, check_conditions=False, **params), expected)
        for variant, evaluate in bound.variants:
            assert np.array_equal(theory.rdp_bound(name, steps, variant=variant, **params), evaluate(steps, checked))
        if not bound.variants:
            with pytest.raises(DPAuditError, match="variant"):
                theory.rdp_bound(name, steps, variant="figure", **params)


def test_rdp_to_dp_is_the_classic_conversion_of_the_accountant():
    eps_rdp = np.array([0.0, 0.3, 2.5])
    alphas = np.array([1.1, 2.0, 64.0])
    expected = accounting.rdp_to_epsilon_per_order(rdp=eps_rdp, orders=alphas, delta=1e-5, conversion="classic")
    assert np.array_equal(theory.rdp_to_dp(epsilon_rdp=eps_rdp, alpha=alphas, delta=1e-5), expected)
    # the minimum over a grid of orders is what rdp_to_epsilon returns
    eps, alpha = accounting.rdp_to_epsilon(rdp=0.01 * alphas, orders=alphas, delta=1e-5, conversion="classic")
    assert eps == pytest.approx(float(np.min(theory.rdp_to_dp(epsilon_rdp=0.01 * alphas, alpha=alphas, delta=1e-5))))
    assert alpha == 64.0


def test_linear_rdp_variant_is_the_minimum_of_the_classic_conversion():
    eps, alpha_opt = accounting.linear_rdp_to_epsilon(slope=0.01, delta=1e-5)
    assert (eps, alpha_opt) == theory.dp_from_linear_rdp(slope=0.01, delta=1e-5)
    at_opt = accounting.rdp_to_epsilon_per_order(
        rdp=0.01 * alpha_opt, orders=alpha_opt, delta=1e-5, conversion="classic"
    )
    assert float(at_opt) == pytest.approx(eps, rel=1e-12)
    assert eps == pytest.approx(0.01 + 2 * math.sqrt(0.01 * math.log(1e5)), rel=1e-15)
