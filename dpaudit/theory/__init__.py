"""Theoretical privacy bounds (pure numpy; importing this package never imports torch).

Seed 004 (Liang et al., DPSGD-GC / DPSGD-DC): :mod:`dpaudit.theory.seed004`.
"""

from __future__ import annotations

from dpaudit.theory.seed004 import (
    DCCap,
    alpha_star,
    available_bounds,
    bound_parameters,
    check_conditions,
    dc_cap,
    dp_from_linear_rdp,
    epochs_to_steps,
    fig2b_curves,
    fig3b_curves,
    normalize_global,
    rdp_bound,
    rdp_to_dp,
    sgm_conditions,
    sgm_rdp_bound,
)

__all__ = [
    "DCCap",
    "alpha_star",
    "available_bounds",
    "bound_parameters",
    "check_conditions",
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
