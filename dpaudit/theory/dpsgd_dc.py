"""Theoretical RDP bounds for DPSGD-GC / DPSGD-DC and the bounds they are compared with
(Liang et al., AAAI 2026, arXiv 2502.17772).

Paper: Liang, Zhang, He, Wu, Xing, "An Improved Privacy and Utility Analysis of Differentially
Private SGD with Bounded Domain and Smooth Losses" (AAAI 2026; arXiv 2502.17772).

Conventions (all functions):

* ``alpha`` (α > 1) is the Rényi order; every returned ε is an RDP ε at that order unless stated.
* ``sigma`` is σ_DP, the per-coordinate standard deviation of the Gaussian noise added to the
  *averaged* clipped gradient (not a noise multiplier; σ_DP = z·C/b for multiplier z).
* ``C`` is the per-sample ℓ2 clipping norm, ``n`` the dataset size, ``b`` the (nominal) batch size
  with sampling probability q = b/n, ``eta`` the step size η, ``L`` the smoothness constant,
  ``D`` the domain "diameter" exactly as the paper's formulas use it, ``m`` the weak-convexity
  constant (Kong & Ribero only), ``T`` the number of iterations.
* log is the natural logarithm.

Everything here is pure numpy and deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dpaudit._validation import DPAuditError, check_choice, check_positive, check_positive_int

__all__ = [
    "DCCap",
    "alpha_star",
    "available_bounds",
    "bound_parameters",
    "check_conditions",
    "condition_parameters",
    "dc_cap",
    "dp_from_linear_rdp",
    "epochs_to_steps",
    "fig2b_curves",
    "fig3b_curves",
    "normalize_global",
    "rdp_bound",
    "rdp_to_dp",
    "sgm_conditions",
    "sgm_rdp_bound",
]

# --------------------------------------------------------------------------------------------
# parameter checks
# --------------------------------------------------------------------------------------------

_POSITIVE_FLOATS = ("C", "sigma", "eta", "D", "L")
_POSITIVE_INTS = ("n", "b")


def _check_alpha(alpha: float) -> float:
    try:
        value = float(alpha)
    except (TypeError, ValueError):
        raise DPAuditError(f"alpha must be a number > 1 (Rényi order), got {alpha!r}") from None
    if not math.isfinite(value) or value <= 1:
        raise DPAuditError(f"alpha must be finite and > 1 (Rényi order), got {alpha!r}")
    return value


def _check_params(params: Mapping[str, float]) -> dict[str, float]:
    """Validate known parameters by name; also b ≤ n when both are present."""
    out: dict[str, float] = {}
    for key, value in params.items():
        if key == "alpha":
            out[key] = _check_alpha(value)
        elif key in _POSITIVE_FLOATS:
            out[key] = check_positive(key, value)
        elif key in _POSITIVE_INTS:
            out[key] = check_positive_int(key, value)
        elif key == "m":
            out[key] = check_positive(key, value, allow_zero=True)
        else:  # pragma: no cover - callers only pass known names
            raise DPAuditError(f"unknown parameter {key!r}")
    if "n" in out and "b" in out and out["b"] > out["n"]:
        raise DPAuditError(f"b must be ≤ n (batch size at most the dataset size), got b={out['b']}, n={out['n']}")
    return out


def _as_nonneg_array(name: str, value, unit: str) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise DPAuditError(f"{name} must be a number or an array of numbers ({unit}), got {value!r}") from None
    bad = ~np.isfinite(arr) | (arr < 0)
    if np.any(bad):
        first = arr[bad].flat[0]
        raise DPAuditError(f"{name} must be finite and ≥ 0 ({unit}), got {float(first)!r}")
    return arr


def _check_q(q: float) -> float:
    value = check_positive("q", q)
    if value > 1:
        raise DPAuditError(f"q must lie in (0, 1] (sampling probability), got {q!r}")
    return value


def _shape_like(values: np.ndarray, template: np.ndarray):
    return float(values) if template.ndim == 0 else values


def _fmt(x: float) -> str:
    return f"{x:.6g}"


# --------------------------------------------------------------------------------------------
# α*(q, σ) and the sampled Gaussian mechanism (Lemma A.13)
# --------------------------------------------------------------------------------------------


def _alpha_feasible(alpha: np.ndarray, q: float, sigma: float) -> np.ndarray:
    """Both conditions (i) and (ii) of eq. 33 for α > 1 (vectorised)."""
    alpha = np.asarray(alpha, dtype=float)
    K = np.log1p(1.0 / (q * (alpha - 1.0)))
    log_sigma = math.log(sigma)
    cond_i = alpha <= K * sigma**2 / 2.0 - 2.0 * log_sigma
    numerator = K**2 * sigma**2 / 2.0 - math.log(5.0) - 2.0 * log_sigma
    denominator = K + np.log(q * alpha) + 1.0 / (2.0 * sigma**2)  # > 0 for every α > 1
    cond_ii = alpha <= numerator / denominator
    return cond_i & cond_ii


def alpha_star(*, q: float, sigma: float) -> float:
    """α*(q, σ): the largest Rényi order α > 1 allowed by Lemma A.13 (paper eq. 33, Table 1 caption).

    With K(α) = log(1 + 1/(q(α − 1))), α*(q, σ) is the largest α > 1 satisfying both
    (i) α ≤ Kσ²/2 − 2 log σ and (ii) α ≤ (K²σ²/2 − log 5 − 2 log σ)/(K + log(qα) + 1/(2σ²))
    (Mironov, Talwar & Zhang 2019). Solved numerically: a fine log-spaced grid in α − 1 up to an
    analytic upper bound on any feasible α, then bisection on the feasibility predicate.

    Args:
        q: sampling probability of the sampled Gaussian mechanism, in (0, 1].
        sigma: SGM noise std σ in units of the sensitivity (for DP-SGD, σ' = bσ_DP/(2C)), > 0.

    Returns:
        α* as a float; 1.0 when no order with α − 1 ≥ 1e-10 is feasible (typical for σ ≪ 1).
    """
    q = _check_q(q)
    sigma = check_positive("sigma", sigma)
    # (i) with K ≤ 1/(q(α−1)) gives x² + (1 − c)x − σ²/(2q) ≤ 0 for x = α − 1, c = −2 log σ.
    c = -2.0 * math.log(sigma)
    x_bound = ((c - 1.0) + math.sqrt((1.0 - c) ** 2 + 2.0 * sigma**2 / q)) / 2.0
    x_max = 1.01 * x_bound + 1e-6
    grid = np.logspace(-10.0, math.log10(x_max), 200_001)
    feasible = _alpha_feasible(1.0 + grid, q, sigma)
    if not feasible[0]:
        # Feasible orders exist only within 1e-10 of 1 (e.g. σ ≪ 1): report α* = 1, so that the
        # condition α ≤ α* fails for every usable order.
        return 1.0
    last = int(np.flatnonzero(feasible)[-1])
    if last == grid.size - 1:  # pragma: no cover - the grid ends beyond the analytic bound
        return float(1.0 + grid[-1])
    lo, hi = float(grid[last]), float(grid[last + 1])
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if _alpha_feasible(np.array(1.0 + mid), q, sigma):
            lo = mid
        else:
            hi = mid
    return 1.0 + lo


def sgm_rdp_bound(*, alpha: float, q: float, sigma: float) -> float:
    """RDP ε of the sampled Gaussian mechanism from Lemma A.13: 2αq²/σ².

    Valid only when :func:`sgm_conditions` returns an empty list (q ≤ 1/5, σ > 4, α ≤ α*(q, σ)).

    Args:
        alpha: Rényi order α > 1.
        q: sampling probability in (0, 1].
        sigma: SGM noise std σ (in units of the sensitivity), > 0.

    Returns:
        ε_RDP at order α.
    """
    alpha = _check_alpha(alpha)
    q = _check_q(q)
    sigma = check_positive("sigma", sigma)
    return 2.0 * alpha * q**2 / sigma**2


def sgm_conditions(*, alpha: float, q: float, sigma: float) -> list[str]:
    """Violated conditions of Lemma A.13 (q ≤ 1/5, σ > 4, α ≤ α*(q, σ)); empty if it applies.

    Args:
        alpha: Rényi order α > 1.
        q: sampling probability in (0, 1].
        sigma: SGM noise std σ (in units of the sensitivity), > 0.

    Returns:
        One human-readable line per violated condition.
    """
    alpha = _check_alpha(alpha)
    q = _check_q(q)
    sigma = check_positive("sigma", sigma)
    return _sgm_violations(alpha, q, sigma, q_name="q", sigma_name="σ")


def _sgm_violations(alpha: float, q: float, sigma: float, *, q_name: str, sigma_name: str) -> list[str]:
    out = []
    if q > 0.2:
        out.append(f"{q_name} = {_fmt(q)} violates q ≤ 1/5")
    if not sigma > 4:
        out.append(f"{sigma_name} = {_fmt(sigma)} violates σ' > 4")
    a_star = alpha_star(q=q, sigma=sigma)
    if alpha > a_star:
        out.append(f"alpha = {_fmt(alpha)} violates α ≤ α*({_fmt(q)}, {_fmt(sigma)}) = {_fmt(a_star)}")
    return out


# --------------------------------------------------------------------------------------------
# Theorem 3.4 cap
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DCCap:
    """The DPSGD-DC plateau of eq. 53–55.

    Attributes:
        cap: (√A + √B)², the RDP ε (order α) the bound saturates at.
        beta_star: optimal noise split β* = √A/(√A + √B) (eq. 53).
        t_sat: iteration where A·T reaches the cap, (1 + √(B/A))² (real-valued).
        A: per-iteration RDP cost (2αC²/(nbσ²), or 8αC²/(n²σ²) when strengthened).
        B: last-step shift cost α(1+ηL)²D²/(2η²σ²).
    """

    cap: float
    beta_star: float
    t_sat: float
    A: float
    B: float


def _cap_from(A: float, B: float) -> DCCap:
    root_a, root_b = math.sqrt(A), math.sqrt(B)
    return DCCap(
        cap=(root_a + root_b) ** 2,
        beta_star=root_a / (root_a + root_b),
        t_sat=(1.0 + math.sqrt(B / A)) ** 2,
        A=A,
        B=B,
    )


def _dc_A(p: Mapping[str, float], strengthened: bool) -> float:
    if strengthened:
        return 8.0 * p["alpha"] * p["C"] ** 2 / (p["n"] ** 2 * p["sigma"] ** 2)
    return 2.0 * p["alpha"] * p["C"] ** 2 / (p["n"] * p["b"] * p["sigma"] ** 2)


def _dc_B(p: Mapping[str, float]) -> float:
    return p["alpha"] * (1.0 + p["eta"] * p["L"]) ** 2 * p["D"] ** 2 / (2.0 * p["eta"] ** 2 * p["sigma"] ** 2)


def dc_cap(
    *,
    alpha: float,
    C: float,
    sigma: float,
    n: int,
    b: int,
    eta: float,
    L: float,
    D: float,
    strengthened: bool = False,
) -> DCCap:
    """Plateau of the DPSGD-DC bound (Theorem 3.4, eq. 52–55).

    g(β) = A/β + B/(1 − β) with A = 2αC²/(nbσ²) and B = α(1+ηL)²D²/(2η²σ²) (eq. 52) is minimised at
    β* = √A/(√A + √B) (eq. 53) with value (√A + √B)² (eq. 54). ``strengthened=True`` uses the
    explicit analogue of eq. 48, A' = 8αC²/(n²σ²) (the validity conditions are not checked here;
    see :func:`check_conditions`).

    Args:
        alpha: Rényi order α > 1.
        C: clipping norm.
        sigma: σ_DP, noise std on the averaged clipped gradient.
        n: dataset size.
        b: batch size (q = b/n).
        eta: step size η.
        L: smoothness constant.
        D: domain diameter as used in eq. 51.
        strengthened: use the Lemma A.13-based per-step cost A'.

    Returns:
        :class:`DCCap` with cap (RDP ε), beta_star, t_sat (iterations), A and B.
    """
    p = _check_params(dict(alpha=alpha, C=C, sigma=sigma, n=n, b=b, eta=eta, L=L, D=D))
    return _cap_from(_dc_A(p, bool(strengthened)), _dc_B(p))


# --------------------------------------------------------------------------------------------
# bound registry
# --------------------------------------------------------------------------------------------

_BOUND_PARAMS: dict[str, tuple[str, ...]] = {
    "dpsgd-gc": ("alpha", "C", "sigma", "n", "b"),
    "dpsgd-dc": ("alpha", "C", "sigma", "n", "b", "eta", "L", "D"),
    "dpsgd-gc-strong": ("alpha", "C", "sigma", "n", "b"),
    "dpsgd-dc-strong": ("alpha", "C", "sigma", "n", "b", "eta", "L", "D"),
    "feldman2018": ("alpha", "C", "sigma", "b"),
    "mironov-composition": ("alpha", "C", "sigma", "n"),
    "altschuler-talwar2022": ("alpha", "C", "sigma", "n", "eta", "D"),
    "kong-ribero2024": ("alpha", "C", "sigma", "b", "eta", "D", "L", "m"),
    "trivial": ("alpha", "C", "sigma", "b", "eta", "D"),
}

# Extra parameters that only enter validity conditions (check_conditions): (required, optional).
_CONDITION_EXTRAS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "mironov-composition": (("b",), ()),
    "altschuler-talwar2022": (("b",), ("L",)),
    "feldman2018": ((), ("eta", "L")),
}

_VARIANTS: dict[str, tuple[str, ...]] = {
    "trivial": ("figure", "text"),
    "kong-ribero2024": ("figure", "table"),
}

_STRONG = ("dpsgd-gc-strong", "dpsgd-dc-strong")


def available_bounds() -> list[str]:
    """Names accepted by :func:`rdp_bound` and :func:`check_conditions`."""
    return list(_BOUND_PARAMS)


def bound_parameters(name: str) -> tuple[str, ...]:
    """The keyword parameters that :func:`rdp_bound` requires for bound ``name`` (besides T)."""
    check_choice("bound name", name, _BOUND_PARAMS)
    return _BOUND_PARAMS[name]


def condition_parameters(name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(required, optional) keyword parameters of :func:`check_conditions` for bound ``name``."""
    check_choice("bound name", name, _BOUND_PARAMS)
    required_extra, optional_extra = _CONDITION_EXTRAS.get(name, ((), ()))
    return (*_BOUND_PARAMS[name], *required_extra), optional_extra


def _collect(name: str, params: Mapping[str, float], required: Sequence[str], optional: Sequence[str] = ()):
    missing = [k for k in required if k not in params]
    extra = [k for k in params if k not in required and k not in optional]
    if missing:
        raise DPAuditError(f"{name}: missing parameter(s) {', '.join(missing)}; it takes {', '.join(required)}")
    if extra:
        raise DPAuditError(
            f"{name}: unexpected parameter(s) {', '.join(extra)}; it takes {', '.join((*required, *optional))}"
        )
    return _check_params(params)


def _strong_violations(p: Mapping[str, float], beta: float) -> list[str]:
    """Conditions of eq. 35 / 42 / 48: b ≤ n/5, σ > 8C/(b√β), α ≤ α*(b/n, b√βσ/(2C))."""
    alpha, C, sigma, n, b = p["alpha"], p["C"], p["sigma"], p["n"], p["b"]
    out = []
    if b > n / 5:
        out.append(f"b = {b} violates b ≤ n/5 = {_fmt(n / 5)}")
    threshold = 8.0 * C / (b * math.sqrt(beta))
    if not sigma > threshold:
        out.append(f"sigma = {_fmt(sigma)} violates σ > 8C/(b√β) = {_fmt(threshold)} (β = {_fmt(beta)})")
    q = b / n
    sigma_sgm = b * math.sqrt(beta) * sigma / (2.0 * C)
    a_star = alpha_star(q=q, sigma=sigma_sgm)
    if alpha > a_star:
        out.append(
            f"alpha = {_fmt(alpha)} violates α ≤ α*(b/n, b√βσ/(2C)) = α*({_fmt(q)}, {_fmt(sigma_sgm)}) = {_fmt(a_star)}"
        )
    return out


def _violations(name: str, p: Mapping[str, float]) -> list[str]:
    if name == "dpsgd-gc-strong":
        return _strong_violations(p, 1.0)
    if name == "dpsgd-dc-strong":
        beta = _cap_from(_dc_A(p, True), _dc_B(p)).beta_star
        return _strong_violations(p, beta)
    if name == "mironov-composition":
        q = p["b"] / p["n"]
        sigma_sgm = p["b"] * p["sigma"] / (2.0 * p["C"])
        return _sgm_violations(p["alpha"], q, sigma_sgm, q_name="q = b/n", sigma_name="σ' = bσ/(2C)")
    if name == "altschuler-talwar2022":
        alpha, C, sigma, n, b = p["alpha"], p["C"], p["sigma"], p["n"], p["b"]
        out = []
        q = b / n
        if q > 0.2:
            out.append(f"q = b/n = {_fmt(q)} violates q ≤ 1/5")
        threshold = 8.0 * math.sqrt(2.0) * C / b
        if not sigma > threshold:
            out.append(f"sigma = {_fmt(sigma)} violates σ > 8√2·C/b = {_fmt(threshold)} (σ' = bσ/(2√2C) > 4)")
        sigma_sgm = b * sigma / (2.0 * math.sqrt(2.0) * C)
        a_star = alpha_star(q=q, sigma=sigma_sgm)
        if alpha > a_star:
            out.append(f"alpha = {_fmt(alpha)} violates α ≤ α*(b/n, bσ/(2√2C)) = {_fmt(a_star)}")
        if "L" in p and p["eta"] > 2.0 / p["L"]:
            out.append(f"eta = {_fmt(p['eta'])} violates η ≤ 2/L = {_fmt(2.0 / p['L'])}")
        return out
    if name == "feldman2018":
        if "eta" in p and "L" in p and p["eta"] > 2.0 / p["L"]:
            return [f"eta = {_fmt(p['eta'])} violates η ≤ 2/L = {_fmt(2.0 / p['L'])}"]
        return []
    if name == "kong-ribero2024":
        limit = 1.0 / (2.0 * (p["m"] + p["L"]))
        if p["eta"] > limit:
            return [f"eta = {_fmt(p['eta'])} violates η ≤ 1/(2(m+L)) = {_fmt(limit)}"]
        return []
    return []  # dpsgd-gc, dpsgd-dc (L-smoothness only), trivial


def check_conditions(name: str, /, **params: float) -> list[str]:
    """Violated numeric validity conditions of a bound (Table 1, Lemma A.13, eqs. 35/42/48).

    Conditions checked:

    * ``dpsgd-gc-strong``: b ≤ n/5, σ > 8C/b, α ≤ α*(b/n, bσ/(2C)) (eq. 42, β → 1).
    * ``dpsgd-dc-strong``: b ≤ n/5, σ > 8C/(b√β*), α ≤ α*(b/n, b√β*σ/(2C)) at β* of the
      strengthened cap (eq. 48, explicit analogue).
    * ``mironov-composition``: Lemma A.13 with q = b/n, σ' = bσ/(2C): q ≤ 1/5, σ' > 4, α ≤ α*(q, σ').
      Needs the extra parameter ``b``.
    * ``altschuler-talwar2022``: b ≤ n/5, σ > 8√2·C/b, α ≤ α*(b/n, bσ/(2√2C)) and, if ``L`` is
      given, η ≤ 2/L. Needs the extra parameter ``b``.
    * ``feldman2018``: η ≤ 2/L if the optional ``eta`` and ``L`` are given.
    * ``kong-ribero2024``: η ≤ 1/(2(m+L)).
    * ``dpsgd-gc``, ``dpsgd-dc``, ``trivial``: none (L-smoothness is an assumption, not checkable).

    Qualitative assumptions (convexity, Lipschitzness) are not checked.

    Args:
        name: a bound from :func:`available_bounds`.
        **params: the bound's parameters (:func:`bound_parameters`) plus the extras named above.

    Returns:
        One human-readable line per violated condition; empty if none.
    """
    check_choice("bound name", name, _BOUND_PARAMS)
    p = _collect(name, params, *condition_parameters(name))
    return _violations(name, p)


def _kong_ribero_constant(p: Mapping[str, float], variant: str) -> float:
    alpha, C, sigma, b, eta, D, L, m = (p[k] for k in ("alpha", "C", "sigma", "b", "eta", "D", "L", "m"))
    growth = math.sqrt(1.0 + 2.0 * eta * m * (1.0 + m / (2.0 * (L + m))))
    if variant == "table":
        return alpha / (eta**2 * sigma**2) * (D * growth + eta * C / b) ** 2
    return alpha / (2.0 * sigma**2 * eta**2) * (math.sqrt(2.0) * D * growth + 2.0 * eta * C / b) ** 2


def _trivial_constant(p: Mapping[str, float], variant: str) -> float:
    alpha, C, sigma, b, eta, D = (p[k] for k in ("alpha", "C", "sigma", "b", "eta", "D"))
    value = 2.0 * alpha * (D + eta * C / b) ** 2 / sigma**2
    return value if variant == "text" else value / eta**2


def _evaluate(name: str, T: np.ndarray, p: Mapping[str, float], variant: str) -> np.ndarray:
    alpha, C, sigma = p["alpha"], p["C"], p["sigma"]
    if name in ("dpsgd-gc", "dpsgd-gc-strong"):
        return _dc_A(p, name.endswith("strong")) * T
    if name in ("dpsgd-dc", "dpsgd-dc-strong"):
        cap = _cap_from(_dc_A(p, name.endswith("strong")), _dc_B(p))
        return np.minimum(cap.A * T, cap.cap)
    if name == "feldman2018":
        return 2.0 * alpha * C**2 * T / (p["b"] ** 2 * sigma**2)
    if name == "mironov-composition":
        return 8.0 * alpha * C**2 * T / (p["n"] ** 2 * sigma**2)
    if name == "altschuler-talwar2022":
        n = p["n"]
        return 8.0 * alpha * C**2 / (n**2 * sigma**2) * np.minimum(T, p["D"] * n / (p["eta"] * C))
    if name == "kong-ribero2024":
        return np.full_like(T, _kong_ribero_constant(p, variant))
    if name == "trivial":
        return np.full_like(T, _trivial_constant(p, variant))
    raise AssertionError(name)  # pragma: no cover


def rdp_bound(name: str, T, /, *, check_conditions: bool = True, variant: str | None = None, **params: float):
    """RDP ε at order α after T iterations for one of the bounds of Liang et al.'s Figure 1 (vectorised over T).

    Bounds (σ = σ_DP; A = 2αC²/(nbσ²), A' = 8αC²/(n²σ²), B = α(1+ηL)²D²/(2η²σ²)):

    * ``dpsgd-gc``: A·T (Theorem 3.3, eq. 46).
    * ``dpsgd-dc``: min{A·T, (√A + √B)²}, 0 at T = 0 (Theorem 3.4, eq. 55).
    * ``dpsgd-gc-strong``: A'·T (eq. 42); valid only if b ≤ n/5, σ > 8C/b, α ≤ α*(b/n, bσ/(2C)).
    * ``dpsgd-dc-strong``: min{A'·T, (√A' + √B)²} (explicit analogue of eq. 48); conditions of eq. 48
      at β* = √A'/(√A' + √B).
    * ``feldman2018``: 2αC²T/(b²σ²) (Fig. 1; Feldman et al. 2018).
    * ``mironov-composition``: 8αC²T/(n²σ²), T-fold composition of 2αq²/σ'² (Fig. 1).
    * ``altschuler-talwar2022``: 8αC²/(n²σ²)·min{T, Dn/(ηC)} (Fig. 1).
    * ``kong-ribero2024``: α/(2σ²η²)·(√2·D·√(1+2ηm(1+m/(2(L+m)))) + 2ηC/b)², constant in T (Fig. 1);
      ``variant="table"`` gives the Table-1 form α/(η²σ²)·(D·√(…) + ηC/b)².
    * ``trivial``: 2α(D + ηC/b)²/(η²σ²), constant in T (Fig. 5, App. E.1); ``variant="text"`` gives the
      paper-text form 2α(D + ηC/b)²/σ².

    Args:
        name: bound name, one of :func:`available_bounds`.
        T: number of iterations (≥ 0), scalar or array.
        check_conditions: for the two ``*-strong`` bounds, raise :class:`DPAuditError` naming the
            violated validity condition (default); ``False`` computes anyway. Other bounds are never
            checked here; use :func:`check_conditions`.
        variant: ``"figure"`` (default) or ``"text"`` for ``trivial``; ``"figure"`` (default) or
            ``"table"`` for ``kong-ribero2024``; not accepted for other bounds.
        **params: exactly the parameters of :func:`bound_parameters` (alpha, C, sigma, n, b, eta, L,
            D, m as the bound needs).

    Returns:
        ε_RDP at order α: a float for scalar T, else an array with T's shape.
    """
    check_choice("bound name", name, _BOUND_PARAMS)
    p = _collect(name, params, _BOUND_PARAMS[name])
    if variant is None:
        variant = "figure"
    elif name in _VARIANTS:
        check_choice(f"{name} variant", variant, _VARIANTS[name])
    else:
        raise DPAuditError(f"{name}: variant is not accepted (only for {', '.join(_VARIANTS)})")
    T_arr = _as_nonneg_array("T", T, "number of iterations")
    if name in _STRONG and check_conditions:
        violated = _violations(name, p)
        if violated:
            raise DPAuditError(
                f"{name}: validity conditions violated: {'; '.join(violated)}; "
                "pass check_conditions=False to compute anyway"
            )
    values = _evaluate(name, T_arr, p, variant)
    return _shape_like(values, T_arr)


# --------------------------------------------------------------------------------------------
# RDP → (ε, δ)-DP
# --------------------------------------------------------------------------------------------


def _check_delta(delta: float) -> float:
    value = check_positive("delta", delta)
    if value >= 1:
        raise DPAuditError(f"delta must lie in (0, 1), got {delta!r}")
    return value


def rdp_to_dp(*, epsilon_rdp, alpha, delta: float):
    """Convert (α, ε_RDP)-RDP to (ε_DP, δ)-DP: ε_DP = ε_RDP + log(1/δ)/(α − 1) (Mironov 2017, Lemma 2.4).

    Args:
        epsilon_rdp: RDP ε at order α (≥ 0), scalar or array.
        alpha: Rényi order(s) α > 1, broadcast against ``epsilon_rdp``.
        delta: DP δ in (0, 1).

    Returns:
        ε_DP: a float for scalar inputs, else a broadcast array.
    """
    delta = _check_delta(delta)
    eps = _as_nonneg_array("epsilon_rdp", epsilon_rdp, "RDP ε")
    try:
        alpha_arr = np.asarray(alpha, dtype=float)
    except (TypeError, ValueError):
        raise DPAuditError(f"alpha must be a number > 1 (Rényi order), got {alpha!r}") from None
    bad = ~np.isfinite(alpha_arr) | (alpha_arr <= 1)
    if np.any(bad):
        raise DPAuditError(f"alpha must be finite and > 1 (Rényi order), got {float(alpha_arr[bad].flat[0])!r}")
    try:
        result = eps + math.log(1.0 / delta) / (alpha_arr - 1.0)
    except ValueError:
        raise DPAuditError(f"epsilon_rdp {eps.shape} and alpha {alpha_arr.shape} do not broadcast") from None
    return float(result) if result.ndim == 0 else result


def dp_from_linear_rdp(*, slope: float, delta: float) -> tuple[float, float]:
    """Best (ε, δ)-DP for a bound linear in the order, ε_RDP(α) = α·slope (all bounds here).

    Minimising α·c + log(1/δ)/(α − 1) over α > 1 gives α_opt = 1 + √(log(1/δ)/c) and
    ε_DP = c + 2√(c·log(1/δ)) (Mironov 2017; the paper's Lemma 2.4). The strengthened bounds
    additionally need α_opt ≤ α*, which is not checked here.

    Args:
        slope: c = ε_RDP/α, > 0.
        delta: DP δ in (0, 1).

    Returns:
        (ε_DP, α_opt).
    """
    c = check_positive("slope", slope)
    delta = _check_delta(delta)
    log_term = math.log(1.0 / delta)
    return c + 2.0 * math.sqrt(c * log_term), 1.0 + math.sqrt(log_term / c)


# --------------------------------------------------------------------------------------------
# epochs, normalisation, figure presets
# --------------------------------------------------------------------------------------------


def epochs_to_steps(*, epochs, n: int, b: int, mode: str = "ceil"):
    """Number of iterations T after E epochs (Fig. 2/4 captions).

    Args:
        epochs: E ≥ 0, scalar or array.
        n: dataset size.
        b: batch size (≤ n).
        mode: ``"ceil"``: T = ⌈n/b⌉·E (paper); ``"exact"``: T = E·n/b as a float (authors' plotting code).

    Returns:
        T with the shape of ``epochs`` (a Python number for scalar input).
    """
    check_choice("mode", mode, ("ceil", "exact"))
    p = _check_params(dict(n=n, b=b))
    E = _as_nonneg_array("epochs", epochs, "number of epochs")
    raw = np.asarray(epochs)
    if mode == "exact":
        steps = E * (p["n"] / p["b"])
    else:
        per_epoch = -(-p["n"] // p["b"])
        steps = raw * per_epoch if np.issubdtype(raw.dtype, np.integer) else E * per_epoch
    steps = np.asarray(steps)
    return steps.item() if steps.ndim == 0 else steps


def normalize_global(curves: Mapping) -> dict:
    """Divide every curve by the single global maximum over all curves and points (Figs. 2b/3b; the
    normalisation is the authors' plotting code's).

    Args:
        curves: mapping from a label to an array of ε values.

    Returns:
        A new dict with the same keys and float arrays; the largest value becomes 1.0.
    """
    if not isinstance(curves, Mapping) or not curves:
        raise DPAuditError("curves must be a non-empty mapping of label → array")
    arrays = {key: np.asarray(value, dtype=float) for key, value in curves.items()}
    if any(a.size == 0 for a in arrays.values()):
        raise DPAuditError("curves must not contain empty arrays")
    peak = max(float(np.max(a)) for a in arrays.values())
    if not math.isfinite(peak) or peak <= 0:
        raise DPAuditError(f"the global maximum of curves must be finite and > 0, got {peak!r}")
    return {key: a / peak for key, a in arrays.items()}


def fig2b_curves(
    *,
    batch_sizes: Sequence[int] = (100, 200, 300, 400, 600, 1000),
    epochs=None,
    alpha: float = 1.1,
    C: float = 20.0,
    sigma: float = 0.002,
    n: int = 10000,
    step_mode: str = "exact",
    normalize: bool = True,
) -> dict[int, np.ndarray]:
    """Fig. 2b: Theorem 3.3 RDP ε (order α) of DPSGD-GC per batch size over epochs.

    The published panel is pure Theorem 3.3 (the DC cap in the authors' script never binds), with
    T = E·n/b (``step_mode="exact"``) and all curves divided by one global maximum, so the value is
    (b_min/b)²·E/E_max independent of α, C, σ.

    Args:
        batch_sizes: batch sizes b.
        epochs: epoch grid E (default 0..400).
        alpha: Rényi order α.
        C: clipping norm.
        sigma: σ_DP.
        n: dataset size.
        step_mode: ``"exact"`` (T = E·n/b, as plotted) or ``"ceil"`` (T = ⌈n/b⌉·E, paper caption).
        normalize: divide by the global maximum (:func:`normalize_global`); else raw RDP ε.

    Returns:
        {b: ε array over ``epochs``}.
    """
    if epochs is None:
        epochs = np.arange(0, 401)
    curves = {}
    for b in batch_sizes:
        T = epochs_to_steps(epochs=epochs, n=n, b=b, mode=step_mode)
        curves[int(b)] = np.asarray(rdp_bound("dpsgd-gc", T, alpha=alpha, C=C, sigma=sigma, n=n, b=b), dtype=float)
    return normalize_global(curves) if normalize else curves


_SCHEMATIC_D = {20: 2.0, 60: 2.5, 100: 3.0}


def fig3b_curves(
    *,
    mode: str = "paper_schematic",
    batch_sizes: Sequence[int] = (100, 400),
    domain_sizes: Sequence[float] = (20, 60, 100),
    epochs=None,
    alpha: float = 1.1,
    C: float = 20.0,
    sigma: float = 0.002,
    L: float = 0.1,
    eta: float = 0.1,
    n: int | None = None,
    schematic_D: Sequence[float] | None = None,
    step_mode: str = "exact",
    normalize: bool = True,
) -> dict[tuple[int, float], np.ndarray]:
    """Fig. 3b: DPSGD-DC RDP ε (order α) per (b, D) over epochs.

    ``mode="paper_schematic"`` reproduces the published panel, which is a schematic (the paper's Fig. 3b): n = 1000,
    the labels D = 20/60/100 are drawn with D_plot = 2.0/2.5/3.0, the linear part uses the strengthened
    slope 8αC²T/(n²σ²), and the cap is (√(2αC²/(bnσ²)) + √(α(1+ηL)²D_plot²/(2σ²)))², i.e. eq. 54 without
    the η² in the second term. ``mode="faithful"`` uses eq. 55 (``rdp_bound("dpsgd-dc")``) with the real
    experimental parameters (n = 10000, D = the labels); it does not saturate within 1000 epochs, so
    the curves coincide for every D.

    Args:
        mode: ``"paper_schematic"`` or ``"faithful"``.
        batch_sizes: batch sizes b.
        domain_sizes: domain diameters D used as labels (and as D in faithful mode).
        epochs: epoch grid E (default 0..1000).
        alpha: Rényi order α.
        C: clipping norm.
        sigma: σ_DP.
        L: smoothness constant.
        eta: step size η.
        n: dataset size (default 1000 schematic, 10000 faithful).
        schematic_D: D_plot values drawn for ``domain_sizes`` in schematic mode (default 2.0/2.5/3.0
            for the labels 20/60/100).
        step_mode: ``"exact"`` (T = E·n/b, as plotted) or ``"ceil"``.
        normalize: divide by the global maximum over all curves.

    Returns:
        {(b, D_label): ε array over ``epochs``}.
    """
    check_choice("mode", mode, ("paper_schematic", "faithful"))
    if epochs is None:
        epochs = np.arange(0, 1001)
    if n is None:
        n = 1000 if mode == "paper_schematic" else 10000
    labels = list(domain_sizes)
    curves: dict[tuple[int, float], np.ndarray] = {}
    if mode == "faithful":
        for b in batch_sizes:
            T = epochs_to_steps(epochs=epochs, n=n, b=b, mode=step_mode)
            for D in labels:
                eps = rdp_bound("dpsgd-dc", T, alpha=alpha, C=C, sigma=sigma, n=n, b=b, eta=eta, L=L, D=D)
                curves[(int(b), D)] = np.asarray(eps, dtype=float)
    else:
        if schematic_D is None:
            unknown = [d for d in labels if d not in _SCHEMATIC_D]
            if unknown:
                raise DPAuditError(f"schematic_D is required for domain_sizes other than 20/60/100, got {unknown!r}")
            plot_values = [_SCHEMATIC_D[d] for d in labels]
        else:
            plot_values = list(schematic_D)
            if len(plot_values) != len(labels):
                raise DPAuditError(
                    f"schematic_D must have one value per domain size ({len(labels)}), got {len(plot_values)}"
                )
        for b in batch_sizes:
            T = np.asarray(epochs_to_steps(epochs=epochs, n=n, b=b, mode=step_mode), dtype=float)
            for D, D_plot in zip(labels, plot_values):
                p = _check_params(dict(alpha=alpha, C=C, sigma=sigma, n=n, b=b, eta=eta, L=L, D=D_plot))
                slope = _dc_A(p, True)
                A = _dc_A(p, False)
                B_no_eta = alpha * (1.0 + eta * L) ** 2 * D_plot**2 / (2.0 * sigma**2)
                cap = (math.sqrt(A) + math.sqrt(B_no_eta)) ** 2
                curves[(int(b), D)] = np.minimum(slope * T, cap)
    return normalize_global(curves) if normalize else curves
