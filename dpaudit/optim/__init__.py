"""Optimizers as small pluggable pieces of the one training engine.

The engine computes gradients (per-sample where the optimizer asks for them) and hands them over in
chunks; the optimizer turns them into one parameter update per step and says what the step cost in
privacy (a :class:`StepCost`). Add an optimizer by subclassing :class:`Optimizer` and decorating it with
:func:`register`. ``available()`` lists the registered names.

Every private optimizer here has the same skeleton (DP-PSAC, D2P2-SGD, DPSGD-GC/DC): per-sample gradients g_i are
scaled by a factor φ(‖g_i‖) with ‖φ(‖g‖)·g‖ ≤ C, summed, Gaussian noise is added, and the result is
divided by the *expected* batch size b (never the realised one, which is data-dependent). Only φ, the
noise schedule and what happens around the update differ, so each optimizer is a few lines.

Noise convention (DPSGD-GC/DC, Liang et al. eq. 6): σ_DP is the per-coordinate std of the Gaussian noise added to the
*averaged* clipped gradient Σ φ_i g_i / b. The usual noise multiplier is z = σ_DP · b / C
(noise std on the summed clipped gradient divided by its sensitivity C), so either may be given.
Dynamic-noise optimizers multiply z by a schedule factor per step and record each step's z in the ledger.

The modules, by family:

- ``base``: the registry, σ_DP ↔ z, :class:`Hyperparameters`, :class:`StepCost`, :class:`Optimizer` and non-private
  :class:`SGD`;
- ``stacked``: :class:`StackedRows`, an ensemble's optimizers as rows of one stack (the ensemble fast path);
- ``clipping``: the private skeleton :class:`PrivateOptimizer`, DP-SGD (gradient and domain clipping, and its
  broken-on-purpose controls) and the DP-PSAC paper's weights (Auto-S, Auto-V, DP-PSAC);
- ``projection``: the D2P2-SGD paper's automatic clipping, dynamic noise and random projection;
- ``sparse``: the TP-TopK paper's coordinate-sparse optimizers (two-phase and online);
- ``adadpigu``: AdaDPIGU.

Everything public is importable from ``dpaudit.optim`` itself.
"""

# Imported in the order the optimizers were always registered in (sgd first, the AdaDPIGU variants last).
# (``isort: split`` keeps that order.)
from dpaudit.optim.base import (
    SGD,
    Hyperparameters,
    Optimizer,
    OptimizerSpec,
    StepCost,
    available,
    get_spec,
    noise_multiplier_to_sigma_dp,
    register,
    sigma_dp_to_noise_multiplier,
)

# isort: split
from dpaudit.optim.stacked import StackedRows

# isort: split
from dpaudit.optim.clipping import (
    AUTO_V_EPSILON,
    CLIP_EPSILON,
    DPPSAC,
    DPSGD,
    SKIPPED_NOISE_EVERY,
    UNDERSTATED_SAMPLE_RATE_FACTOR,
    AutoS,
    AutoV,
    DPPSACBatchNoise,
    DPSGDDomainConstrained,
    DPSGDNoClip,
    DPSGDNoNoise,
    DPSGDReusedNoise,
    DPSGDSkippedNoise,
    DPSGDUnderstatedSampleRate,
    PrivateOptimizer,
    auto_s_factor,
    psac_factor,
)

# isort: split
from dpaudit.optim.projection import (
    D2P2SGD,
    D2PSGD,
    DP2SGD,
    NOISE_DECAY_UNITS,
    PROJECTION_REFRESH,
    REDUCTION_CONVENTIONS,
    AutomaticClipping,
    D2P2SGDAsPublished,
    DP2SGDAsPublished,
    DPSGDAuto,
    ProjectedNoise,
    projected_dimension,
)

# isort: split
from dpaudit.optim.sparse import (
    MaskedSupport,
    OnlineSparse,
    ONRand,
    ONTopK,
    TPRand,
    TPTopK,
    TPTopKCleanSupport,
    TwoPhaseSparse,
    top_k_indices,
    top_k_support,
)

# isort: split
from dpaudit.optim.adadpigu import VARIANCE_CLAMP, AdaDPIGU, AdaDPIGUCode, AdaDPIGUFreeze, AdaDPIGUPaper

__all__ = [
    # base
    "Hyperparameters",
    "Optimizer",
    "OptimizerSpec",
    "SGD",
    "StepCost",
    "available",
    "get_spec",
    "noise_multiplier_to_sigma_dp",
    "register",
    "sigma_dp_to_noise_multiplier",
    # stacked
    "StackedRows",
    # clipping
    "AUTO_V_EPSILON",
    "CLIP_EPSILON",
    "SKIPPED_NOISE_EVERY",
    "UNDERSTATED_SAMPLE_RATE_FACTOR",
    "AutoS",
    "AutoV",
    "DPPSAC",
    "DPPSACBatchNoise",
    "DPSGD",
    "DPSGDDomainConstrained",
    "DPSGDNoClip",
    "DPSGDNoNoise",
    "DPSGDReusedNoise",
    "DPSGDSkippedNoise",
    "DPSGDUnderstatedSampleRate",
    "PrivateOptimizer",
    "auto_s_factor",
    "psac_factor",
    # projection
    "NOISE_DECAY_UNITS",
    "PROJECTION_REFRESH",
    "REDUCTION_CONVENTIONS",
    "AutomaticClipping",
    "D2P2SGD",
    "D2P2SGDAsPublished",
    "D2PSGD",
    "DP2SGD",
    "DP2SGDAsPublished",
    "DPSGDAuto",
    "ProjectedNoise",
    "projected_dimension",
    # sparse
    "MaskedSupport",
    "ONRand",
    "ONTopK",
    "OnlineSparse",
    "TPRand",
    "TPTopK",
    "TPTopKCleanSupport",
    "TwoPhaseSparse",
    "top_k_indices",
    "top_k_support",
    # adadpigu
    "VARIANCE_CLAMP",
    "AdaDPIGU",
    "AdaDPIGUCode",
    "AdaDPIGUFreeze",
    "AdaDPIGUPaper",
]
