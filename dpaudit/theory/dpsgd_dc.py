"""DPSGD-GC / DPSGD-DC bounds read as (ε, δ)-DP and over epochs, and the presets of the paper's Figs. 2b/3b.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, overload

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
    "fig2b_curves",
    "fig3b_curves",
    "normalize_global",
    "one_step_check",
    "rdp_bound",
    "rdp_to_dp",
    "sgm_conditions",
    "sgm_rdp_bound",
]

_Label = TypeVar("_Label")  # the keys of normalize_global's curves

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
# epochs, normalisation, figure presets
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


def normalize_global(curves: Mapping[_Label, npt.ArrayLike]) -> dict[_Label, npt.NDArray[np.float64]]:
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
    epochs: npt.NDArray[Any] | Sequence[float] | None = None,
    alpha: float = 1.1,
    C: float = 20.0,
    sigma: float = 0.002,
    n: int = 10000,
    step_mode: str = "exact",
    normalize: bool = True,
) -> dict[int, npt.NDArray[np.float64]]:
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
    curves: dict[int, npt.NDArray[np.float64]] = {}
    for b in batch_sizes:
        T = epochs_to_steps(epochs=epochs, n=n, b=b, mode=step_mode)
        curves[int(b)] = np.asarray(rdp_bound("dpsgd-gc", T, alpha=alpha, C=C, sigma=sigma, n=n, b=b), dtype=float)
    return normalize_global(curves) if normalize else curves


_SCHEMATIC_D: dict[float, float] = {20: 2.0, 60: 2.5, 100: 3.0}


def fig3b_curves(
    *,
    mode: str = "paper_schematic",
    batch_sizes: Sequence[int] = (100, 400),
    domain_sizes: Sequence[float] = (20, 60, 100),
    epochs: npt.NDArray[Any] | Sequence[float] | None = None,
    alpha: float = 1.1,
    C: float = 20.0,
    sigma: float = 0.002,
    L: float = 0.1,
    eta: float = 0.1,
    n: int | None = None,
    schematic_D: Sequence[float] | None = None,
    step_mode: str = "exact",
    normalize: bool = True,
) -> dict[tuple[int, float], npt.NDArray[np.float64]]:
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
    curves: dict[tuple[int, float], npt.NDArray[np.float64]] = {}
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
                check_params(dict(alpha=alpha, C=C, sigma=sigma, n=n, b=b, eta=eta, L=L, D=D_plot))
                linear = rdp_bound(
                    "dpsgd-gc-strong", T, check_conditions=False, alpha=alpha, C=C, sigma=sigma, n=n, b=b
                )
                A = rdp_bound("dpsgd-gc", 1.0, alpha=alpha, C=C, sigma=sigma, n=n, b=b)  # A, one step of Theorem 3.3
                B_no_eta = alpha * (1.0 + eta * L) ** 2 * D_plot**2 / (2.0 * sigma**2)
                cap = (math.sqrt(A) + math.sqrt(B_no_eta)) ** 2
                curves[(int(b), D)] = np.minimum(linear, cap)
    return normalize_global(curves) if normalize else curves
