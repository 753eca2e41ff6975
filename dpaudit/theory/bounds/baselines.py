"""The earlier RDP bounds that the DPSGD-GC/DC paper (Liang et al., AAAI 2026) compares with, one :class:`Bound` each.

As Liang et al. state them in their Figure 1, Table 1 and Appendix E.1 (σ = σ_DP, the noise std on the averaged
clipped gradient):

* ``feldman2018``: 2αC²T/(b²σ²) (Feldman, Mironov, Talwar & Thakurta 2018, privacy amplification by iteration).
* ``mironov-composition``: 8αC²T/(n²σ²), the T-fold composition of the sampled Gaussian mechanism's 2αq²/σ'²
  (Mironov, Talwar & Zhang 2019).
* ``altschuler-talwar2022``: 8αC²/(n²σ²)·min{T, Dn/(ηC)} (Altschuler & Talwar 2022).
* ``kong-ribero2024``: α/(2σ²η²)·(√2·D·√(1+2ηm(1+m/(2(L+m)))) + 2ηC/b)², constant in T (Kong & Ribero 2024).
* ``trivial``: 2α(D + ηC/b)²/(η²σ²), constant in T (the bounded-domain argument of the paper's App. E.1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from dpaudit.theory._params import fmt
from dpaudit.theory.bounds.base import Bound
from dpaudit.theory.sgm import alpha_star, sgm_violations

__all__ = ["BOUNDS"]

_FIGURE1 = "Liang et al., AAAI 2026 (arXiv 2502.17772), Fig. 1"


def _step_size_violations(p: Mapping[str, float]) -> list[str]:
    """η ≤ 2/L, when both η and L are given."""
    if "eta" in p and "L" in p and p["eta"] > 2.0 / p["L"]:
        return [f"eta = {fmt(p['eta'])} violates η ≤ 2/L = {fmt(2.0 / p['L'])}"]
    return []


def _feldman(T: npt.NDArray[np.float64], p: Mapping[str, float]) -> npt.NDArray[np.float64]:
    return 2.0 * p["alpha"] * p["C"] ** 2 * T / (p["b"] ** 2 * p["sigma"] ** 2)


def _mironov(T: npt.NDArray[np.float64], p: Mapping[str, float]) -> npt.NDArray[np.float64]:
    return 8.0 * p["alpha"] * p["C"] ** 2 * T / (p["n"] ** 2 * p["sigma"] ** 2)


def _mironov_violations(p: Mapping[str, float]) -> list[str]:
    """Lemma A.13 with q = b/n and σ' = bσ/(2C)."""
    q = p["b"] / p["n"]
    sigma_sgm = p["b"] * p["sigma"] / (2.0 * p["C"])
    return sgm_violations(p["alpha"], q, sigma_sgm, q_name="q = b/n", sigma_name="σ' = bσ/(2C)")


def _altschuler_talwar(T: npt.NDArray[np.float64], p: Mapping[str, float]) -> npt.NDArray[np.float64]:
    alpha, C, sigma, n = p["alpha"], p["C"], p["sigma"], p["n"]
    return 8.0 * alpha * C**2 / (n**2 * sigma**2) * np.minimum(T, p["D"] * n / (p["eta"] * C))


def _altschuler_talwar_violations(p: Mapping[str, float]) -> list[str]:
    """b ≤ n/5, σ > 8√2·C/b, α ≤ α*(b/n, bσ/(2√2C)) and, if L is given, η ≤ 2/L."""
    alpha, C, sigma, n, b = p["alpha"], p["C"], p["sigma"], p["n"], p["b"]
    out = []
    q = b / n
    if q > 0.2:
        out.append(f"q = b/n = {fmt(q)} violates q ≤ 1/5")
    threshold = 8.0 * math.sqrt(2.0) * C / b
    if not sigma > threshold:
        out.append(f"sigma = {fmt(sigma)} violates σ > 8√2·C/b = {fmt(threshold)} (σ' = bσ/(2√2C) > 4)")
    sigma_sgm = b * sigma / (2.0 * math.sqrt(2.0) * C)
    a_star = alpha_star(q=q, sigma=sigma_sgm)
    if alpha > a_star:
        out.append(f"alpha = {fmt(alpha)} violates α ≤ α*(b/n, bσ/(2√2C)) = {fmt(a_star)}")
    return out + _step_size_violations(p)


def _kong_ribero_growth(p: Mapping[str, float]) -> float:
    eta, L, m = p["eta"], p["L"], p["m"]
    return math.sqrt(1.0 + 2.0 * eta * m * (1.0 + m / (2.0 * (L + m))))


def _kong_ribero_figure(T: npt.NDArray[np.float64], p: Mapping[str, float]) -> npt.NDArray[np.float64]:
    alpha, C, sigma, b, eta, D = (p[k] for k in ("alpha", "C", "sigma", "b", "eta", "D"))
    value = alpha / (2.0 * sigma**2 * eta**2) * (math.sqrt(2.0) * D * _kong_ribero_growth(p) + 2.0 * eta * C / b) ** 2
    return np.full_like(T, value)


def _kong_ribero_table(T: npt.NDArray[np.float64], p: Mapping[str, float]) -> npt.NDArray[np.float64]:
    alpha, C, sigma, b, eta, D = (p[k] for k in ("alpha", "C", "sigma", "b", "eta", "D"))
    value = alpha / (eta**2 * sigma**2) * (D * _kong_ribero_growth(p) + eta * C / b) ** 2
    return np.full_like(T, value)


def _kong_ribero_violations(p: Mapping[str, float]) -> list[str]:
    limit = 1.0 / (2.0 * (p["m"] + p["L"]))
    if p["eta"] > limit:
        return [f"eta = {fmt(p['eta'])} violates η ≤ 1/(2(m+L)) = {fmt(limit)}"]
    return []


def _trivial_text_value(p: Mapping[str, float]) -> float:
    alpha, C, sigma, b, eta, D = (p[k] for k in ("alpha", "C", "sigma", "b", "eta", "D"))
    return 2.0 * alpha * (D + eta * C / b) ** 2 / sigma**2


def _trivial_figure(T: npt.NDArray[np.float64], p: Mapping[str, float]) -> npt.NDArray[np.float64]:
    return np.full_like(T, _trivial_text_value(p) / p["eta"] ** 2)


def _trivial_text(T: npt.NDArray[np.float64], p: Mapping[str, float]) -> npt.NDArray[np.float64]:
    return np.full_like(T, _trivial_text_value(p))


BOUNDS: tuple[Bound, ...] = (
    Bound(
        name="feldman2018",
        paper=f"Feldman, Mironov, Talwar & Thakurta 2018, as in {_FIGURE1}",
        formula="2αC²T/(b²σ²)",
        parameters=("alpha", "C", "sigma", "b"),
        evaluate=_feldman,
        conditions="η ≤ 2/L if the optional eta and L are given",
        violations=_step_size_violations,
        optional_condition_parameters=("eta", "L"),
    ),
    Bound(
        name="mironov-composition",
        paper=f"Mironov, Talwar & Zhang 2019 composed T times, as in {_FIGURE1}",
        formula="8αC²T/(n²σ²)",
        parameters=("alpha", "C", "sigma", "n"),
        evaluate=_mironov,
        conditions="Lemma A.13 with q = b/n, σ' = bσ/(2C): q ≤ 1/5, σ' > 4, α ≤ α*(q, σ') (needs b)",
        violations=_mironov_violations,
        condition_parameters=("b",),
    ),
    Bound(
        name="altschuler-talwar2022",
        paper=f"Altschuler & Talwar 2022, as in {_FIGURE1}",
        formula="8αC²/(n²σ²)·min{T, Dn/(ηC)}",
        parameters=("alpha", "C", "sigma", "n", "eta", "D"),
        evaluate=_altschuler_talwar,
        conditions="b ≤ n/5, σ > 8√2·C/b, α ≤ α*(b/n, bσ/(2√2C)) and, if L is given, η ≤ 2/L (needs b)",
        violations=_altschuler_talwar_violations,
        condition_parameters=("b",),
        optional_condition_parameters=("L",),
    ),
    Bound(
        name="kong-ribero2024",
        paper=f"Kong & Ribero 2024, as in {_FIGURE1} (variant 'table': Table 1)",
        formula="α/(2σ²η²)·(√2·D·√(1+2ηm(1+m/(2(L+m)))) + 2ηC/b)², constant in T",
        parameters=("alpha", "C", "sigma", "b", "eta", "D", "L", "m"),
        evaluate=_kong_ribero_figure,
        conditions="η ≤ 1/(2(m+L))",
        violations=_kong_ribero_violations,
        variants=(("table", _kong_ribero_table),),
    ),
    Bound(
        name="trivial",
        paper="Liang et al., AAAI 2026 (arXiv 2502.17772), Fig. 5 and App. E.1 (variant 'text': the App. E.1 text)",
        formula="2α(D + ηC/b)²/(η²σ²), constant in T",
        parameters=("alpha", "C", "sigma", "b", "eta", "D"),
        evaluate=_trivial_figure,
        variants=(("text", _trivial_text),),
    ),
)
"""The baselines, in the order ``dpaudit list bounds`` prints them."""
