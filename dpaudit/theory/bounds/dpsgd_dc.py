"""The DPSGD-GC / DPSGD-DC bounds of Liang et al. (AAAI 2026, arXiv 2502.17772), one :class:`Bound` each.

Paper: Liang, Zhang, He, Wu, Xing, "An Improved Privacy and Utility Analysis of Differentially Private SGD with
Bounded Domain and Smooth Losses" (AAAI 2026; arXiv 2502.17772). DPSGD-GC clips gradients; DPSGD-DC also projects
the iterate onto a domain of diameter D, which caps the RDP ε at the plateau of Theorem 3.4.

With σ = σ_DP (noise std on the averaged clipped gradient), A = 2αC²/(nbσ²), A' = 8αC²/(n²σ²) and
B = α(1+ηL)²D²/(2η²σ²):

* ``dpsgd-gc``: A·T (Theorem 3.3, eq. 46).
* ``dpsgd-dc``: min{A·T, (√A + √B)²} (Theorem 3.4, eq. 55).
* ``dpsgd-gc-strong``: A'·T (eq. 42), through Lemma A.13 (:mod:`dpaudit.theory.sgm`).
* ``dpsgd-dc-strong``: min{A'·T, (√A' + √B)²} (explicit analogue of eq. 48).

One direction only: the per-step cost A of Theorems 3.3/3.4 is what convexity of D_α in its *second* argument gives
for D_α(N₀ ‖ (1−q)N₀ + qN_Δ), the "add" direction of add/remove adjacency. The "remove" direction,
D_α((1−q)N₀ + qN_Δ ‖ N₀), has the mixture first, where that convexity does not hold for α > 1, and it is at least
(α/(α−1))·log q + αΔ²/(2σ²). At the paper's own experimental parameters (σ_DP = 0.002, C = 20, b = 100, n = 10000,
so z = σb/C = 0.01, q = 0.01) and α = 1.1, one step of the remove direction costs ≈ 5449.3 (exact, with the
smaller sensitivity Δ = C/b) against A = 220. So ``dpsgd-gc`` and ``dpsgd-dc`` are the paper's one-sided bounds, not
RDP guarantees under add/remove adjacency; their records carry :data:`ONE_DIRECTION_CAVEAT`, and
:func:`dpaudit.theory.dpsgd_dc.one_step_check` compares A with the exact one-step RDP (Mironov, Talwar & Zhang 2019,
which covers both directions). The strengthened forms go through Lemma A.13 (Mironov et al.'s bound, valid for both
directions under its conditions, which are enforced).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpaudit.theory._params import check_params, fmt
from dpaudit.theory.bounds.base import Bound, Evaluate
from dpaudit.theory.sgm import alpha_star

__all__ = ["BOUNDS", "ONE_DIRECTION_CAVEAT", "DCCap", "dc_cap"]

PAPER = "Liang et al., AAAI 2026 (arXiv 2502.17772)"

ONE_DIRECTION_CAVEAT = (
    "one direction only: Theorems 3.3/3.4 bound D_α(N₀ ‖ mixture) (adding a record), not the other direction of "
    "add/remove adjacency, which can cost far more per step (≈ 5449 vs 220 at the paper's z = 0.01, α = 1.1); "
    "not an RDP guarantee — compare the exact accountant"
)
"""The caveat of the paper's own per-step bounds (``dpsgd-gc``, ``dpsgd-dc``), printed wherever they appear."""


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


def _per_step(p: Mapping[str, float], strengthened: bool) -> float:
    """A = 2αC²/(nbσ²) (Theorem 3.3), or A' = 8αC²/(n²σ²) through Lemma A.13 when ``strengthened``."""
    if strengthened:
        return 8.0 * p["alpha"] * p["C"] ** 2 / (p["n"] ** 2 * p["sigma"] ** 2)
    return 2.0 * p["alpha"] * p["C"] ** 2 / (p["n"] * p["b"] * p["sigma"] ** 2)


def _last_step_shift(p: Mapping[str, float]) -> float:
    """B = α(1+ηL)²D²/(2η²σ²), the cost of the last projected step (eq. 52)."""
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
    see :func:`~dpaudit.theory.bounds.check_conditions`).

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
    p = check_params(dict(alpha=alpha, C=C, sigma=sigma, n=n, b=b, eta=eta, L=L, D=D))
    return _cap_from(_per_step(p, bool(strengthened)), _last_step_shift(p))


def _strong_violations(p: Mapping[str, float], beta: float) -> list[str]:
    """Conditions of eq. 35 / 42 / 48: b ≤ n/5, σ > 8C/(b√β), α ≤ α*(b/n, b√βσ/(2C))."""
    alpha, C, sigma, n, b = p["alpha"], p["C"], p["sigma"], p["n"], p["b"]
    out = []
    if b > n / 5:
        out.append(f"b = {b} violates b ≤ n/5 = {fmt(n / 5)}")
    threshold = 8.0 * C / (b * math.sqrt(beta))
    if not sigma > threshold:
        out.append(f"sigma = {fmt(sigma)} violates σ > 8C/(b√β) = {fmt(threshold)} (β = {fmt(beta)})")
    q = b / n
    sigma_sgm = b * math.sqrt(beta) * sigma / (2.0 * C)
    a_star = alpha_star(q=q, sigma=sigma_sgm)
    if alpha > a_star:
        out.append(
            f"alpha = {fmt(alpha)} violates α ≤ α*(b/n, b√βσ/(2C)) = α*({fmt(q)}, {fmt(sigma_sgm)}) = {fmt(a_star)}"
        )
    return out


def _gc(strengthened: bool) -> Evaluate:
    def evaluate(T: npt.NDArray[np.float64], p: Mapping[str, float]) -> npt.NDArray[np.float64]:
        return _per_step(p, strengthened) * T

    return evaluate


def _dc(strengthened: bool) -> Evaluate:
    def evaluate(T: npt.NDArray[np.float64], p: Mapping[str, float]) -> npt.NDArray[np.float64]:
        cap = _cap_from(_per_step(p, strengthened), _last_step_shift(p))
        return np.minimum(cap.A * T, cap.cap)

    return evaluate


def _dc_strong_violations(p: Mapping[str, float]) -> list[str]:
    return _strong_violations(p, _cap_from(_per_step(p, True), _last_step_shift(p)).beta_star)


_GC_PARAMS = ("alpha", "C", "sigma", "n", "b")
_DC_PARAMS = ("alpha", "C", "sigma", "n", "b", "eta", "L", "D")

BOUNDS: tuple[Bound, ...] = (
    Bound(
        name="dpsgd-gc",
        paper=f"{PAPER}, Theorem 3.3 (eq. 46)",
        formula="2αC²T/(nbσ²)",
        parameters=_GC_PARAMS,
        evaluate=_gc(False),
        conditions="none (L-smoothness is an assumption, not checkable)",
        caveat=ONE_DIRECTION_CAVEAT,
    ),
    Bound(
        name="dpsgd-dc",
        paper=f"{PAPER}, Theorem 3.4 (eq. 55)",
        formula="min{A·T, (√A + √B)²}, A = 2αC²/(nbσ²), B = α(1+ηL)²D²/(2η²σ²)",
        parameters=_DC_PARAMS,
        evaluate=_dc(False),
        conditions="none (L-smoothness is an assumption, not checkable)",
        caveat=ONE_DIRECTION_CAVEAT,
    ),
    Bound(
        name="dpsgd-gc-strong",
        paper=f"{PAPER}, eq. 42 (through Lemma A.13)",
        formula="8αC²T/(n²σ²)",
        parameters=_GC_PARAMS,
        evaluate=_gc(True),
        conditions="b ≤ n/5, σ > 8C/b, α ≤ α*(b/n, bσ/(2C)) (eq. 42, β → 1)",
        violations=lambda p: _strong_violations(p, 1.0),
        enforce_conditions=True,
    ),
    Bound(
        name="dpsgd-dc-strong",
        paper=f"{PAPER}, explicit analogue of eq. 48",
        formula="min{A'·T, (√A' + √B)²}, A' = 8αC²/(n²σ²), B = α(1+ηL)²D²/(2η²σ²)",
        parameters=_DC_PARAMS,
        evaluate=_dc(True),
        conditions="b ≤ n/5, σ > 8C/(b√β*), α ≤ α*(b/n, b√β*σ/(2C)) at β* = √A'/(√A' + √B) (eq. 48)",
        violations=_dc_strong_violations,
        enforce_conditions=True,
    ),
)
"""The paper's own bounds, in the order ``dpaudit list bounds`` prints them."""
