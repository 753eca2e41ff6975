"""The DPSGD-GC/DC paper's Figs. 2b and 3b as curves: its presets, step conventions and normalisation.

Paper: Liang, Zhang, He, Wu, Xing, "An Improved Privacy and Utility Analysis of Differentially
Private SGD with Bounded Domain and Smooth Losses" (AAAI 2026; arXiv 2502.17772). The bounds are
:mod:`dpaudit.theory`'s (``rdp_bound``); what is here reproduces how the paper draws them. The conventions of
:mod:`dpaudit.theory.dpsgd_dc` hold (α the Rényi order, σ = σ_DP on the averaged gradient, C, n, b, η, L, D).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from dpaudit._validation import DPAuditError, check_choice
from dpaudit.theory import epochs_to_steps, rdp_bound
from dpaudit.theory._params import check_params

__all__ = ["fig2b_curves", "fig3b_curves", "normalize_global"]


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
                check_params(dict(alpha=alpha, C=C, sigma=sigma, n=n, b=b, eta=eta, L=L, D=D_plot))
                cost = dict(alpha=alpha, C=C, sigma=sigma, n=n, b=b)
                linear = rdp_bound("dpsgd-gc-strong", T, check_conditions=False, **cost)  # A'·T
                A = rdp_bound("dpsgd-gc", 1.0, **cost)  # A, one step of Theorem 3.3
                B_no_eta = alpha * (1.0 + eta * L) ** 2 * D_plot**2 / (2.0 * sigma**2)
                cap = (math.sqrt(A) + math.sqrt(B_no_eta)) ** 2
                curves[(int(b), D)] = np.minimum(linear, cap)
    return normalize_global(curves) if normalize else curves
