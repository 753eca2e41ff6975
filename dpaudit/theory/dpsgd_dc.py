"""DPSGD-GC / DPSGD-DC bounds read as (ε, δ)-DP and over epochs, and the paper's per-step bound against the exact
one-step RDP.

Paper: Liang, Zhang, He, Wu, Xing, "An Improved Privacy and Utility Analysis of Differentially
Private SGD with Bounded Domain and Smooth Losses" (AAAI 2026; arXiv 2502.17772).

The bounds themselves are records in :mod:`dpaudit.theory.bounds` (the paper's in
:mod:`~dpaudit.theory.bounds.dpsgd_dc`, the ones it compares with in :mod:`~dpaudit.theory.bounds.baselines`);
Lemma A.13 and α*(q, σ) are in :mod:`dpaudit.theory.sgm`. Their names stay importable from here.
RDP → (ε, δ) goes through :mod:`dpaudit.theory.accounting`, the one conversion module.

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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from dpaudit._validation import DPAuditError, check_choice, check_delta, check_positive
from dpaudit.theory._params import as_nonneg_array, check_params
from dpaudit.theory.accounting import linear_rdp_to_epsilon, rdp_subsampled_gaussian, rdp_to_epsilon_per_order
from dpaudit.theory.bounds import (
    DCCap,
    available_bounds,
    bound_parameters,
    check_conditions,
    condition_parameters,
    dc_cap,
    rdp_bound,
)
from dpaudit.theory.sgm import alpha_star, sgm_conditions, sgm_rdp_bound

__all__ = [
    "DCCap",
    "OneStepCheck",
    "alpha_star",
    "available_bounds",
    "bound_parameters",
    "check_conditions",
    "condition_parameters",
    "dc_cap",
    "dp_from_linear_rdp",
    "epochs_to_steps",
    "one_step_check",
    "rdp_bound",
    "rdp_to_dp",
    "sgm_conditions",
    "sgm_rdp_bound",
]


# --------------------------------------------------------------------------------------------
# RDP → (ε, δ)-DP at the bounds' order
# --------------------------------------------------------------------------------------------


@overload
def rdp_to_dp(*, epsilon_rdp: float, alpha: float, delta: float) -> float: ...
@overload
def rdp_to_dp(
    *, epsilon_rdp: npt.NDArray[Any] | Sequence[float], alpha: npt.ArrayLike, delta: float
) -> npt.NDArray[np.float64]: ...
@overload
def rdp_to_dp(
    *, epsilon_rdp: npt.ArrayLike, alpha: npt.NDArray[Any] | Sequence[float], delta: float
) -> npt.NDArray[np.float64]: ...
def rdp_to_dp(*, epsilon_rdp: npt.ArrayLike, alpha: npt.ArrayLike, delta: float) -> float | npt.NDArray[np.float64]:
    """Convert (α, ε_RDP)-RDP to (ε_DP, δ)-DP: ε_DP = ε_RDP + log(1/δ)/(α − 1) (Mironov 2017, Lemma 2.4).

    The classic conversion of :func:`dpaudit.theory.accounting.rdp_to_epsilon_per_order`, read at the given
    order(s) rather than minimised over orders.

    Args:
        epsilon_rdp: RDP ε at order α (≥ 0), scalar or array.
        alpha: Rényi order(s) α > 1, broadcast against ``epsilon_rdp``.
        delta: DP δ in (0, 1).

    Returns:
        ε_DP: a float for scalar (or 0-d) inputs, else a broadcast array.
    """
    delta = check_delta(delta, allow_zero=False)
    eps = as_nonneg_array("epsilon_rdp", epsilon_rdp, "RDP ε")
    try:
        alpha_arr = np.asarray(alpha, dtype=float)
    except (TypeError, ValueError):
        raise DPAuditError(f"alpha must be a number > 1 (Rényi order), got {alpha!r}") from None
    bad = ~np.isfinite(alpha_arr) | (alpha_arr <= 1)
    if np.any(bad):
        raise DPAuditError(f"alpha must be finite and > 1 (Rényi order), got {float(alpha_arr[bad].flat[0])!r}")
    try:
        result = rdp_to_epsilon_per_order(rdp=eps, orders=alpha_arr, delta=delta, conversion="classic")
    except ValueError:
        raise DPAuditError(f"epsilon_rdp {eps.shape} and alpha {alpha_arr.shape} do not broadcast") from None
    return float(result) if result.ndim == 0 else result


def dp_from_linear_rdp(*, slope: float, delta: float) -> tuple[float, float]:
    """Best (ε, δ)-DP for a bound linear in the order, ε_RDP(α) = α·slope (all bounds here).

    Minimising α·c + log(1/δ)/(α − 1) over α > 1 gives α_opt = 1 + √(log(1/δ)/c) and
    ε_DP = c + 2√(c·log(1/δ)) (Mironov 2017; the paper's Lemma 2.4): the closed-form variant
    :func:`dpaudit.theory.accounting.linear_rdp_to_epsilon`. The strengthened bounds additionally need
    α_opt ≤ α*, which is not checked here.

    Args:
        slope: c = ε_RDP/α, > 0.
        delta: DP δ in (0, 1).

    Returns:
        (ε_DP, α_opt).
    """
    c = check_positive("slope", slope)
    delta = check_delta(delta, allow_zero=False)
    return linear_rdp_to_epsilon(slope=c, delta=delta)


# --------------------------------------------------------------------------------------------
# the paper's per-step bound against the exact one-step RDP (both adjacency directions)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OneStepCheck:
    """One step of DPSGD-GC/DC: the paper's per-step RDP bound A against the exact RDP of the same step.

    Attributes:
        alpha: Rényi order α.
        noise_multiplier: z = σ_DP·b/C, the noise std over the sensitivity C/b of one record in the average.
        sample_rate: q = b/n.
        paper: A = 2αC²/(nbσ²), Theorem 3.3's per-step RDP ε (one adjacency direction only).
        exact: the exact one-step RDP ε under add/remove adjacency, D_α((1−q)N(0, σ²) + qN(C/b, σ²) ‖ N(0, σ²)),
            the "remove" direction, which is the larger of the two (Mironov, Talwar & Zhang 2019).
        lower: the closed-form lower bound max(0, (α/(α−1))·log q + α/(2z²)) on ``exact`` (the q^α·N_Δ^α term
            alone).
        covered: whether ``exact`` ≤ ``paper``, i.e. whether the paper's bound holds for both directions here.
        ratio: ``exact`` / ``paper``.
    """

    alpha: float
    noise_multiplier: float
    sample_rate: float
    paper: float
    exact: float
    lower: float
    covered: bool
    ratio: float


def one_step_check(*, alpha: float, C: float, sigma: float, n: int, b: int) -> OneStepCheck:
    """The paper's per-step bound A (Theorems 3.3/3.4) against the exact one-step RDP under add/remove adjacency.

    A = 2αC²/(nbσ²) bounds D_α(N₀ ‖ (1−q)N₀ + qN_Δ) only (convexity in the second argument). The exact RDP of
    the step is the other direction, D_α((1−q)N₀ + qN_Δ ‖ N₀) with Δ = C/b and N = N(·, σ²), computed by the RDP
    accountant (:func:`dpaudit.theory.rdp_subsampled_gaussian` at z = σb/C, q = b/n). With the sensitivity C/b
    it is generous to the paper, whose A uses 2C/b. At the paper's experimental parameters (σ = 0.002, C = 20,
    b = 100, n = 10000, α = 1.1) exact ≈ 5449.3 against A = 220.

    Args:
        alpha: Rényi order α > 1.
        C: per-sample clipping norm.
        sigma: σ_DP, noise std on the averaged clipped gradient.
        n: dataset size.
        b: batch size (q = b/n ≤ 1).

    Returns:
        :class:`OneStepCheck` (RDP ε in nats at order α).
    """
    p = check_params(dict(alpha=alpha, C=C, sigma=sigma, n=n, b=b))
    z = p["sigma"] * p["b"] / p["C"]
    q = p["b"] / p["n"]
    paper = float(rdp_bound("dpsgd-gc", 1.0, alpha=p["alpha"], C=p["C"], sigma=p["sigma"], n=p["n"], b=p["b"]))
    exact = float(rdp_subsampled_gaussian(noise_multiplier=z, sample_rate=q, orders=[p["alpha"]])[0])
    a = p["alpha"]
    return OneStepCheck(
        alpha=a,
        noise_multiplier=z,
        sample_rate=q,
        paper=paper,
        exact=exact,
        lower=max(0.0, a / (a - 1) * math.log(q) + a / (2 * z * z)),
        covered=exact <= paper,
        ratio=exact / paper,
    )


# --------------------------------------------------------------------------------------------
# epochs
# --------------------------------------------------------------------------------------------


@overload
def epochs_to_steps(*, epochs: float, n: int, b: int, mode: str = "ceil") -> float: ...
@overload
def epochs_to_steps(
    *, epochs: npt.NDArray[Any] | Sequence[float], n: int, b: int, mode: str = "ceil"
) -> npt.NDArray[np.float64] | npt.NDArray[np.int64]: ...
def epochs_to_steps(
    *, epochs: float | npt.NDArray[Any] | Sequence[float], n: int, b: int, mode: str = "ceil"
) -> float | npt.NDArray[np.float64] | npt.NDArray[np.int64]:
    """Number of iterations T after E epochs (Fig. 2/4 captions).

    Args:
        epochs: E ≥ 0, scalar or array.
        n: dataset size.
        b: batch size (≤ n).
        mode: ``"ceil"``: T = ⌈n/b⌉·E (paper); ``"exact"``: T = E·n/b as a float (authors' plotting code).

    Returns:
        T with the shape of ``epochs`` (a Python number for scalar or 0-d input; integers for integer epochs and
        ``mode="ceil"``).
    """
    check_choice("mode", mode, ("ceil", "exact"))
    p = check_params(dict(n=n, b=b))
    E = as_nonneg_array("epochs", epochs, "number of epochs")
    raw = np.asarray(epochs)
    if mode == "exact":
        steps = E * (p["n"] / p["b"])
    else:
        per_epoch = -(-p["n"] // p["b"])
        steps = raw * per_epoch if np.issubdtype(raw.dtype, np.integer) else E * per_epoch
    steps = np.asarray(steps)
    return steps.item() if steps.ndim == 0 else steps
