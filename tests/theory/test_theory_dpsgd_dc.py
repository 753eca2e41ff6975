"""Known-answer tests for dpaudit.theory (DPSGD-GC/DC bounds of Liang et al.). Golden values are from the paper
(its lemmas, theorems and figures) and from first principles."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from scipy.special import logsumexp

from dpaudit._validation import DPAuditError
from dpaudit.theory import (
    DCCap,
    alpha_star,
    available_bounds,
    bound_parameters,
    check_conditions,
    dc_cap,
    dp_from_linear_rdp,
    epochs_to_steps,
    get_bound,
    one_step_check,
    rdp_bound,
    rdp_to_dp,
    sgm_conditions,
    sgm_rdp_bound,
)

REL = 1e-6

# Figure 1 parameters (App. D.1): L=1, C=2, σ_DP=4, D=1, n=8, b=2, m=1, α=1.1, η=0.2.
FIG1 = dict(alpha=1.1, L=1.0, C=2.0, sigma=4.0, D=1.0, n=8, b=2, m=1.0, eta=0.2)
# Figure 5 parameters (App. E.1): as Fig 1 but n=16, no m.
FIG5 = dict(alpha=1.1, L=1.0, C=2.0, sigma=4.0, D=1.0, n=16, b=2, eta=0.2)
# Experimental parameters (Figs 2/3).
EXP = dict(alpha=1.1, L=0.1, C=20.0, sigma=0.002, n=10000, eta=0.1)


def params_for(name, pool):
    return {k: pool[k] for k in bound_parameters(name)}


def fig1(name, T, **kw):
    return rdp_bound(name, T, **params_for(name, FIG1), **kw)


def tol_from_text(text: str) -> tuple[float, float]:
    """Value and half-unit-in-the-last-place tolerance of a number as printed in the spec."""
    mantissa = text.split("e")[0]
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    scale = 10 ** int(text.split("e")[1]) if "e" in text else 1
    return float(text), 0.5 * 10 ** (-decimals) * scale * (1 + 1e-9)


# ---------------------------------------------------------------------------------------------
# registry
# ---------------------------------------------------------------------------------------------


def test_available_bounds_and_parameters():
    assert set(available_bounds()) == {
        "dpsgd-gc",
        "dpsgd-dc",
        "dpsgd-gc-strong",
        "dpsgd-dc-strong",
        "feldman2018",
        "mironov-composition",
        "altschuler-talwar2022",
        "kong-ribero2024",
        "trivial",
    }
    assert bound_parameters("dpsgd-gc") == ("alpha", "C", "sigma", "n", "b")
    assert bound_parameters("dpsgd-dc") == ("alpha", "C", "sigma", "n", "b", "eta", "L", "D")
    assert set(bound_parameters("kong-ribero2024")) == {"alpha", "C", "sigma", "b", "eta", "D", "L", "m"}
    assert set(bound_parameters("trivial")) == {"alpha", "C", "sigma", "b", "eta", "D"}


# ---------------------------------------------------------------------------------------------
# Figure 1 (the bounds of the paper's Table 1)
# ---------------------------------------------------------------------------------------------


def test_fig1_feldman():
    assert fig1("feldman2018", 1) == pytest.approx(0.1375, rel=REL)
    assert fig1("feldman2018", 200) == pytest.approx(27.5, rel=REL)


def test_fig1_composition():
    assert fig1("mironov-composition", 1) == pytest.approx(0.034375, rel=REL)
    assert fig1("mironov-composition", 200) == pytest.approx(6.875, rel=REL)


def test_fig1_altschuler_talwar():
    assert fig1("altschuler-talwar2022", 1) == pytest.approx(0.034375, rel=REL)
    assert fig1("altschuler-talwar2022", 19) < 0.6875
    assert fig1("altschuler-talwar2022", 20) == pytest.approx(0.6875, rel=REL)
    assert fig1("altschuler-talwar2022", 21) == pytest.approx(0.6875, rel=REL)
    assert fig1("altschuler-talwar2022", 200) == pytest.approx(0.6875, rel=REL)


def test_fig1_kong_ribero():
    T = np.arange(0, 201)
    values = fig1("kong-ribero2024", T)
    assert values.shape == T.shape
    assert np.allclose(values, 3.90641, atol=5e-6, rtol=0)
    # Table-1 form without the √2 on ηC/b (the paper's Table 1).
    assert fig1("kong-ribero2024", 7, variant="table") == pytest.approx(3.4889, abs=5e-5)


def test_fig1_ours_cap():
    cap = dc_cap(**params_for("dpsgd-dc", FIG1))
    assert isinstance(cap, DCCap)
    assert cap.A == pytest.approx(0.034375, rel=REL)
    assert cap.B == pytest.approx(1.2375, rel=REL)
    assert cap.beta_star == pytest.approx(1 / 7, rel=REL)
    assert cap.cap == pytest.approx(1.684375, rel=REL)
    assert cap.t_sat == pytest.approx(49.0, rel=REL)


def test_fig1_ours_values():
    T = np.array([0, 1, 5, 10, 20, 30, 49, 50, 100, 200])
    expected = [0, 0.034375, 0.171875, 0.34375, 0.6875, 1.03125, 1.684375, 1.684375, 1.684375, 1.684375]
    values = fig1("dpsgd-dc", T)
    assert values.shape == T.shape
    np.testing.assert_allclose(values, expected, rtol=REL, atol=0)
    assert fig1("dpsgd-dc", 0) == 0.0
    # Same slope as composition here because n = 4b.
    np.testing.assert_allclose(fig1("dpsgd-dc", np.arange(49)), fig1("mironov-composition", np.arange(49)), rtol=REL)


def test_fig1_ordering_at_200():
    values = {
        name: fig1(name, 200)
        for name in ("feldman2018", "mironov-composition", "kong-ribero2024", "dpsgd-dc", "altschuler-talwar2022")
    }
    assert values["feldman2018"] == pytest.approx(27.5, rel=REL)
    assert values["mironov-composition"] == pytest.approx(6.875, rel=REL)
    assert values["kong-ribero2024"] == pytest.approx(3.906, abs=5e-4)
    assert values["dpsgd-dc"] == pytest.approx(1.684, abs=5e-4)
    assert values["altschuler-talwar2022"] == pytest.approx(0.6875, rel=REL)
    order = sorted(values, key=values.get, reverse=True)
    assert order == ["feldman2018", "mironov-composition", "kong-ribero2024", "dpsgd-dc", "altschuler-talwar2022"]


def test_fig1_condition_violations():
    comp = check_conditions("mironov-composition", **params_for("mironov-composition", FIG1), b=2)
    assert any("q ≤ 1/5" in v for v in comp)
    assert any("σ' > 4" in v for v in comp)
    at = check_conditions("altschuler-talwar2022", **params_for("altschuler-talwar2022", FIG1), b=2, L=1.0)
    assert any("q ≤ 1/5" in v for v in at)
    assert any("8√2" in v and "11.31" in v for v in at)  # σ_DP > 8√2 M/b = 11.3
    assert not any("η ≤ 2/L" in v for v in at)  # 0.2 ≤ 2
    assert check_conditions("kong-ribero2024", **params_for("kong-ribero2024", FIG1)) == []  # η = 0.2 ≤ 1/4
    assert check_conditions("dpsgd-dc", **params_for("dpsgd-dc", FIG1)) == []
    assert check_conditions("dpsgd-gc", **params_for("dpsgd-gc", FIG1)) == []
    assert check_conditions("trivial", **params_for("trivial", FIG1)) == []
    assert check_conditions("feldman2018", **params_for("feldman2018", FIG1)) == []
    assert all("\n" not in v for v in comp + at)


def test_check_conditions_step_size():
    kr = dict(params_for("kong-ribero2024", FIG1), eta=0.3)  # 1/(2(m+L)) = 0.25
    assert any("1/(2(m+L))" in v for v in check_conditions("kong-ribero2024", **kr))
    fe = check_conditions("feldman2018", **params_for("feldman2018", FIG1), eta=3.0, L=1.0)
    assert any("η ≤ 2/L" in v for v in fe)


# ---------------------------------------------------------------------------------------------
# α* and Lemma A.13 (Mironov, Talwar & Zhang 2019)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("q", "sigma", "spec_value"), [(0.01, 5, 19.81), (0.01, 10, 50.55), (0.2, 5, 4.81), (0.05, 8, 18.50)]
)
def test_alpha_star_reference(q, sigma, spec_value):
    a = alpha_star(q=q, sigma=sigma)
    # The spec's values come from a grid search (a feasible grid point just below α*): α* must lie
    # at or above them, within the grid resolution. (Exact α*(0.01, 10) is ≈ 50.596, see report.)
    assert spec_value - 0.01 <= a <= spec_value + 0.05


@pytest.mark.parametrize(("q", "sigma"), [(0.01, 5), (0.01, 10), (0.2, 5), (0.05, 8), (0.25, 2)])
def test_alpha_star_is_largest_feasible(q, sigma):
    a = alpha_star(q=q, sigma=sigma)

    def feasible(alpha):
        K = math.log(1 + 1 / (q * (alpha - 1)))
        i = alpha <= K * sigma**2 / 2 - 2 * math.log(sigma)
        ii = alpha <= (K**2 * sigma**2 / 2 - math.log(5) - 2 * math.log(sigma)) / (
            K + math.log(q * alpha) + 1 / (2 * sigma**2)
        )
        return i and ii

    assert feasible(a * (1 - 1e-9))
    assert not feasible(a * (1 + 1e-6))
    grid = np.linspace(1 + 1e-6, a, 200)
    assert all(feasible(x) for x in grid)  # interval (1, α*]


def test_sgm_bound_and_conditions():
    assert sgm_rdp_bound(alpha=2.0, q=0.01, sigma=5.0) == pytest.approx(2 * 2 * 0.01**2 / 25, rel=REL)
    assert sgm_conditions(alpha=2.0, q=0.01, sigma=5.0) == []
    violated = sgm_conditions(alpha=30.0, q=0.25, sigma=2.0)
    assert len(violated) == 3
    assert any("q ≤ 1/5" in v for v in violated)
    assert any("σ' > 4" in v for v in violated)
    assert any("α*" in v for v in violated)
    # SGM with q = b/n, σ' = bσ/(2C) reproduces the composition slope (the paper's Lemma 3.2).
    q, sigma_sgm = FIG1["b"] / FIG1["n"], FIG1["b"] * FIG1["sigma"] / (2 * FIG1["C"])
    assert sgm_rdp_bound(alpha=1.1, q=q, sigma=sigma_sgm) == pytest.approx(0.034375, rel=REL)


# ---------------------------------------------------------------------------------------------
# Figure 5 (the paper's App. E.1)
# ---------------------------------------------------------------------------------------------


def test_fig5_trivial():
    p = params_for("trivial", FIG5)
    assert rdp_bound("trivial", 0, **p) == pytest.approx(4.95, rel=REL)
    assert rdp_bound("trivial", 300, **p) == pytest.approx(4.95, rel=REL)
    assert rdp_bound("trivial", 300, variant="text", **p) == pytest.approx(0.198, rel=REL)


def test_fig5_ours():
    p = params_for("dpsgd-dc", FIG5)
    cap = dc_cap(**p)
    assert cap.A == pytest.approx(0.0171875, rel=REL)
    assert cap.B == pytest.approx(1.2375, rel=REL)
    assert cap.cap == pytest.approx(1.546369, abs=5e-7)
    assert cap.t_sat == pytest.approx(89.97, abs=5e-3)
    assert rdp_bound("dpsgd-dc", 10, **p) == pytest.approx(0.171875, rel=REL)
    assert rdp_bound("dpsgd-dc", 50, **p) == pytest.approx(0.859375, rel=REL)
    assert rdp_bound("dpsgd-dc", 89, **p) == pytest.approx(1.529688, abs=5e-7)
    values = rdp_bound("dpsgd-dc", np.arange(90, 301), **p)
    assert np.allclose(values, 1.546369, atol=5e-7, rtol=0)
    # Significant gap between 1.6 and 4.9.
    assert rdp_bound("dpsgd-dc", 300, **p) < 1.6 < 4.9 < rdp_bound("trivial", 300, **params_for("trivial", FIG5))


# ---------------------------------------------------------------------------------------------
# dc_cap against a numerical minimisation of g(β) (eq. 52)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        params_for("dpsgd-dc", FIG1),
        params_for("dpsgd-dc", FIG5),
        dict(EXP, b=100, D=20.0),
        dict(EXP, b=400, D=100.0),
        dict(alpha=3.0, C=1.0, sigma=1.0, n=60000, b=256, eta=0.5, L=2.0, D=0.3),
    ],
)
@pytest.mark.parametrize("strengthened", [False, True])
def test_dc_cap_matches_numerical_minimum(params, strengthened):
    a, C, s, n, b, eta, L, D = (params[k] for k in ("alpha", "C", "sigma", "n", "b", "eta", "L", "D"))
    A = 8 * a * C**2 / (n**2 * s**2) if strengthened else 2 * a * C**2 / (n * b * s**2)
    B = a * (1 + eta * L) ** 2 * D**2 / (2 * eta**2 * s**2)

    def g(beta):
        return A / beta + B / (1 - beta)

    res = minimize_scalar(g, bounds=(1e-12, 1 - 1e-12), method="bounded", options={"xatol": 1e-14})
    cap = dc_cap(**params, strengthened=strengthened)
    assert cap.cap == pytest.approx(res.fun, rel=1e-6)
    assert cap.cap <= res.fun * (1 + 1e-12)
    assert g(cap.beta_star) == pytest.approx(cap.cap, rel=1e-12)
    assert cap.t_sat == pytest.approx(cap.cap / A, rel=1e-12)


def test_dc_strong_uses_A_prime():
    p = dict(alpha=2.0, C=1.0, sigma=1.0, n=10000, b=1000, eta=0.1, L=1.0, D=1.0)
    A_prime = 8 * 2.0 * 1.0 / (10000**2 * 1.0)
    cap = dc_cap(**p, strengthened=True)
    T = np.array([0.0, 1.0, 1e3, 1e12])
    got = rdp_bound("dpsgd-dc-strong", T, check_conditions=False, **p)
    np.testing.assert_allclose(got, np.minimum(A_prime * T, cap.cap), rtol=REL)
    assert got[-1] == pytest.approx(cap.cap, rel=REL)


# ---------------------------------------------------------------------------------------------
# strengthened bounds: conditions
# ---------------------------------------------------------------------------------------------


def test_gc_strong_errors_at_experimental_params():
    p = params_for("dpsgd-gc-strong", dict(EXP, b=100))
    with pytest.raises(DPAuditError) as err:
        rdp_bound("dpsgd-gc-strong", 10, **p)
    message = str(err.value)
    assert "\n" not in message
    # 8C/b = 1.6 ≫ σ_DP = 0.002: Fig 1's parameters violate the bound's validity condition
    assert "8C/(b√β) = 1.6" in message
    assert "check_conditions=False" in message
    value = rdp_bound("dpsgd-gc-strong", 10, check_conditions=False, **p)
    assert value == pytest.approx(8 * 1.1 * 400 * 10 / (10000**2 * 0.002**2), rel=REL)
    assert any("σ > 8C/(b√β)" in v for v in check_conditions("dpsgd-gc-strong", **p))


def test_dc_strong_errors_at_experimental_params():
    p = params_for("dpsgd-dc-strong", dict(EXP, b=100, D=20.0))
    with pytest.raises(DPAuditError) as err:
        rdp_bound("dpsgd-dc-strong", 10, **p)
    assert "\n" not in str(err.value)
    assert "σ > 8C/(b√β)" in str(err.value)
    rdp_bound("dpsgd-dc-strong", 10, check_conditions=False, **p)


def test_strong_b_over_n_fifth():
    p = dict(alpha=1.5, C=1.0, sigma=10.0, n=100, b=50)
    violated = check_conditions("dpsgd-gc-strong", **p)
    assert any("b ≤ n/5" in v for v in violated)
    with pytest.raises(DPAuditError, match="b ≤ n/5"):
        rdp_bound("dpsgd-gc-strong", 1, **p)


def test_strong_valid_regime_no_error():
    # q = 0.01, σ' = bσ/(2C) = 10 > 4, σ = 1 > 8C/b = 0.8; α ≤ α*(0.01, 10) ≈ 50.6.
    p = dict(alpha=2.0, C=10.0, sigma=1.0, n=10000, b=100)
    assert check_conditions("dpsgd-gc-strong", **p) == []
    assert rdp_bound("dpsgd-gc-strong", 5, **p) == pytest.approx(8 * 2 * 100 * 5 / (1e8 * 1), rel=REL)


# ---------------------------------------------------------------------------------------------
# RDP → DP (the paper's Lemma 2.4)
# ---------------------------------------------------------------------------------------------


def test_rdp_to_dp_values():
    assert rdp_to_dp(epsilon_rdp=0.0, alpha=1.1, delta=1e-5) == pytest.approx(115.13, abs=5e-3)
    assert rdp_to_dp(epsilon_rdp=1.0, alpha=2.0, delta=math.exp(-3)) == pytest.approx(4.0, rel=1e-12)
    eps = np.array([[0.5, 1.0], [2.0, 3.0]])
    out = rdp_to_dp(epsilon_rdp=eps, alpha=np.array([2.0, 3.0]), delta=1e-5)
    assert out.shape == (2, 2)
    np.testing.assert_allclose(out, eps + math.log(1e5) / np.array([1.0, 2.0]))


@pytest.mark.parametrize(("slope", "delta"), [(0.034375, 1e-5), (1e-3, 1e-6), (2.0, 0.01), (22000.0, 1e-5)])
def test_dp_from_linear_rdp_matches_grid(slope, delta):
    eps, alpha_opt = dp_from_linear_rdp(slope=slope, delta=delta)
    alphas = 1 + np.logspace(-6, 6, 400_001)
    grid = rdp_to_dp(epsilon_rdp=slope * alphas, alpha=alphas, delta=delta)
    i = int(np.argmin(grid))
    assert eps == pytest.approx(grid[i], rel=1e-6)
    assert eps <= grid[i] * (1 + 1e-12)
    assert alpha_opt == pytest.approx(alphas[i], rel=1e-3)
    assert rdp_to_dp(epsilon_rdp=slope * alpha_opt, alpha=alpha_opt, delta=delta) == pytest.approx(eps, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def test_epochs_to_steps():
    assert epochs_to_steps(epochs=400, n=10000, b=300) == 34 * 400
    assert epochs_to_steps(epochs=400, n=10000, b=300, mode="exact") == pytest.approx(400 * 10000 / 300)
    out = epochs_to_steps(epochs=np.arange(4).reshape(2, 2), n=10000, b=100)
    assert out.shape == (2, 2)
    np.testing.assert_array_equal(out, np.arange(4).reshape(2, 2) * 100)
    with pytest.raises(DPAuditError, match="mode"):
        epochs_to_steps(epochs=1, n=10, b=2, mode="floor")


@pytest.mark.parametrize(
    "name",
    [
        "dpsgd-gc",
        "dpsgd-dc",
        "feldman2018",
        "mironov-composition",
        "altschuler-talwar2022",
        "kong-ribero2024",
        "trivial",
    ],
)
def test_vectorisation_shape(name):
    p = params_for(name, FIG1)
    scalar = rdp_bound(name, 7, **p)
    assert isinstance(scalar, float)
    T = np.arange(12).reshape(3, 4)
    arr = rdp_bound(name, T, **p)
    assert isinstance(arr, np.ndarray) and arr.shape == (3, 4)
    assert arr[1, 3] == pytest.approx(scalar, rel=1e-12)
    assert rdp_bound(name, [0, 7], **p).shape == (2,)


# ---------------------------------------------------------------------------------------------
# bad input: one-line DPAuditError naming the parameter
# ---------------------------------------------------------------------------------------------

GC = params_for("dpsgd-gc", FIG1)
DC = params_for("dpsgd-dc", FIG1)


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda: rdp_bound("nope", 1, **GC), "dpsgd-gc"),
        (lambda: rdp_bound("dpsgd-dc", 1, **GC), "eta"),
        (lambda: rdp_bound("dpsgd-gc", 1, **DC), "eta"),
        (lambda: rdp_bound("dpsgd-gc", 1, **dict(GC, C=0)), "C"),
        (lambda: rdp_bound("dpsgd-gc", 1, **dict(GC, sigma=-1)), "sigma"),
        (lambda: rdp_bound("dpsgd-gc", 1, **dict(GC, n=0)), "n"),
        (lambda: rdp_bound("dpsgd-gc", 1, **dict(GC, b=-2)), "b"),
        (lambda: rdp_bound("dpsgd-dc", 1, **dict(DC, eta=0)), "eta"),
        (lambda: rdp_bound("dpsgd-dc", 1, **dict(DC, D=-1.0)), "D"),
        (lambda: rdp_bound("dpsgd-dc", 1, **dict(DC, L=0)), "L"),
        (lambda: rdp_bound("dpsgd-gc", 1, **dict(GC, alpha=1.0)), "alpha"),
        (lambda: rdp_bound("dpsgd-gc", 1, **dict(GC, alpha=0.5)), "alpha"),
        (lambda: rdp_bound("dpsgd-gc", -1, **GC), "T"),
        (lambda: rdp_bound("dpsgd-gc", np.array([1.0, -3.0]), **GC), "T"),
        (lambda: rdp_bound("dpsgd-gc", 1, **dict(GC, b=9)), "b"),
        (lambda: rdp_bound("dpsgd-gc", 1, variant="text", **GC), "variant"),
        (lambda: rdp_bound("trivial", 1, variant="bogus", **params_for("trivial", FIG1)), "variant"),
        (lambda: check_conditions("mironov-composition", **params_for("mironov-composition", FIG1)), "b"),
        (lambda: check_conditions("nope"), "bound name"),
        (lambda: bound_parameters("nope"), "bound name"),
        (lambda: dc_cap(**dict(DC, sigma=0)), "sigma"),
        (lambda: dc_cap(**dict(DC, b=100)), "b"),
        (lambda: alpha_star(q=0.0, sigma=5), "q"),
        (lambda: alpha_star(q=1.5, sigma=5), "q"),
        (lambda: alpha_star(q=0.1, sigma=0), "sigma"),
        (lambda: sgm_rdp_bound(alpha=1.0, q=0.1, sigma=5), "alpha"),
        (lambda: rdp_to_dp(epsilon_rdp=1.0, alpha=1.0, delta=1e-5), "alpha"),
        (lambda: rdp_to_dp(epsilon_rdp=1.0, alpha=2.0, delta=1.0), "delta"),
        (lambda: dp_from_linear_rdp(slope=0.0, delta=1e-5), "slope"),
        (lambda: epochs_to_steps(epochs=-1, n=10, b=2), "epochs"),
        (lambda: epochs_to_steps(epochs=1, n=10, b=20), "b"),
    ],
)
def test_bad_input_one_line(call, needle):
    with pytest.raises(DPAuditError) as err:
        call()
    message = str(err.value)
    assert "\n" not in message
    assert needle in message
    assert isinstance(err.value, ValueError)


def test_unknown_bound_lists_options():
    with pytest.raises(DPAuditError) as err:
        rdp_bound("nope", 1, **GC)
    for name in available_bounds():
        assert name in str(err.value)


def test_keyword_only():
    with pytest.raises(TypeError):
        alpha_star(0.01, 5)  # type: ignore[misc]
    with pytest.raises(TypeError):
        dc_cap(1.1, 2, 4, 8, 2, 0.2, 1, 1)  # type: ignore[misc]


def test_import_does_not_load_torch():
    code = "import sys, dpaudit.theory; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------------------------------------
# D1 of the privacy review: Theorems 3.3/3.4 bound one adjacency direction only
# ---------------------------------------------------------------------------------------------


def _renyi_by_grid(log_p, log_q, alpha: float, lo: float, hi: float, step: float = 1e-3) -> float:
    """D_α(P‖Q) = log(∫ p^α q^(1−α) dx)/(α − 1) by a Riemann sum on a fine grid, in log space (the integrand
    reaches e^550 at the paper's parameters)."""
    x = np.arange(lo, hi, step)
    return float((logsumexp(alpha * log_p(x) + (1 - alpha) * log_q(x)) + math.log(step)) / (alpha - 1))


def _one_step_densities(*, C, sigma, n, b):
    """One DP-SGD step on the averaged clipped gradient, in units of σ: without the record N(0, 1); with it
    (Poisson, q = b/n) (1−q)N(0, 1) + qN(Δ/σ, 1), Δ = C/b the record's largest contribution to the average."""
    q, mu = b / n, C / (b * sigma)
    log_phi = lambda x: -0.5 * x * x - 0.5 * math.log(2 * math.pi)  # noqa: E731
    log_mix = lambda x: np.logaddexp(math.log1p(-q) + log_phi(x), math.log(q) + log_phi(x - mu))  # noqa: E731
    return log_mix, log_phi, mu


@pytest.mark.parametrize(
    "params, paper_value, exact_value, covered",
    [
        # the paper's experimental parameters (σ_DP = 0.002, C = 20, b = 100, n = 10000: z = 0.01, q = 0.01)
        (dict(alpha=1.1, C=20.0, sigma=0.002, n=10000, b=100), 220.0, 5449.3, False),
        # Fig 1's toy parameters (z = 4): there the bound does hold
        (dict(alpha=1.1, C=2.0, sigma=4.0, n=8, b=2), 0.034375, 0.0022, True),
    ],
)
def test_one_step_counterexample_from_first_principles(params, paper_value, exact_value, covered):
    log_mix, log_phi, mu = _one_step_densities(**{k: params[k] for k in ("C", "sigma", "n", "b")})
    alpha = params["alpha"]
    # the direction with the mixture first (removing the record), by numerical integration
    remove = _renyi_by_grid(log_mix, log_phi, alpha, lo=-40.0, hi=alpha * mu + 40.0)
    # the direction the paper's convexity argument covers (adding the record)
    add = _renyi_by_grid(log_phi, log_mix, alpha, lo=-40.0, hi=mu + 40.0)
    paper = 2 * alpha * params["C"] ** 2 / (params["n"] * params["b"] * params["sigma"] ** 2)  # Theorem 3.3, T = 1
    assert paper == pytest.approx(paper_value, rel=1e-12)
    assert remove == pytest.approx(exact_value, abs=0.05 if exact_value > 1 else 5e-5)
    assert add <= paper  # the convexity argument does cover this direction
    assert (remove <= paper) is covered
    # what the toolkit reports: the exact accountant, the paper's A, and the verdict
    check = one_step_check(**params)
    assert check.exact == pytest.approx(remove, rel=1e-6)
    assert check.paper == pytest.approx(paper, rel=1e-12)
    assert check.covered is covered and check.ratio == pytest.approx(remove / paper, rel=1e-6)
    assert check.lower <= check.exact * (1 + 1e-9)
    if not covered:  # keeping only the q^α·N_Δ^α term: (α/(α−1))·log q + α/(2z²), tight here
        q, z = params["b"] / params["n"], params["sigma"] * params["b"] / params["C"]
        assert check.lower == pytest.approx(alpha / (alpha - 1) * math.log(q) + alpha / (2 * z * z), rel=1e-12)
        assert check.exact > 24 * check.paper


def test_one_sided_bounds_carry_the_caveat():
    for name in ("dpsgd-gc", "dpsgd-dc"):
        assert "one direction only" in get_bound(name).caveat
    for name in ("dpsgd-gc-strong", "dpsgd-dc-strong", "feldman2018", "mironov-composition"):
        assert get_bound(name).caveat == ""
