"""The sampled Gaussian mechanism as the DPSGD-GC/DC paper uses it: α*(q, σ) and its Lemma A.13.

Lemma A.13 of Liang et al., "An Improved Privacy and Utility Analysis of Differentially Private SGD with Bounded
Domain and Smooth Losses" (AAAI 2026; arXiv 2502.17772), restating Mironov, Talwar & Zhang (2019): the Poisson
subsampled Gaussian mechanism with sampling probability q and noise std σ (in units of the sensitivity) is
(α, 2αq²/σ²)-RDP when q ≤ 1/5, σ > 4 and α ≤ α*(q, σ). The strengthened DPSGD-GC/DC bounds and the baselines of
:mod:`dpaudit.theory.bounds` check their validity conditions through it. (The exact RDP of the same mechanism at
any order is :func:`dpaudit.theory.accounting.rdp_subsampled_gaussian`.)

Pure numpy and deterministic.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from dpaudit._validation import check_positive
from dpaudit.theory._params import check_order, check_q, fmt

__all__ = ["alpha_star", "sgm_conditions", "sgm_rdp_bound"]


def _alpha_feasible(alpha: npt.NDArray[np.float64], q: float, sigma: float) -> npt.NDArray[np.bool_]:
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
    q = check_q(q)
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
    alpha = check_order(alpha)
    q = check_q(q)
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
    alpha = check_order(alpha)
    q = check_q(q)
    sigma = check_positive("sigma", sigma)
    return sgm_violations(alpha, q, sigma, q_name="q", sigma_name="σ")


def sgm_violations(alpha: float, q: float, sigma: float, *, q_name: str, sigma_name: str) -> list[str]:
    """:func:`sgm_conditions` on checked values, naming q and σ as the caller derived them (e.g. q = b/n)."""
    out = []
    if q > 0.2:
        out.append(f"{q_name} = {fmt(q)} violates q ≤ 1/5")
    if not sigma > 4:
        out.append(f"{sigma_name} = {fmt(sigma)} violates σ' > 4")
    a_star = alpha_star(q=q, sigma=sigma)
    if alpha > a_star:
        out.append(f"alpha = {fmt(alpha)} violates α ≤ α*({fmt(q)}, {fmt(sigma)}) = {fmt(a_star)}")
    return out
