"""Theoretical privacy (pure numpy/scipy; importing this package never imports torch).

* :mod:`dpaudit.theory.accounting` — ε of any sequence of Poisson-subsampled Gaussian steps (RDP with the
  improved or classic conversion, PRV), noise calibration, per-epoch ε replayed from a run's ledger.
* :mod:`dpaudit.theory.dpsgd_dc` — Liang et al.'s DPSGD-GC / DPSGD-DC bounds and the bounds they compare with.
"""

from __future__ import annotations

from dpaudit.theory import accounting, dpsgd_dc  # noqa: F401 - the submodules, as dpaudit.theory.accounting etc.
from dpaudit.theory.accounting import (
    DEFAULT_ORDERS,
    OPACUS_ORDERS,
    AccountingFallbackWarning,
    calibrate_noise,
    epsilon,
    ledger_epsilons,
    prv_grid,
    rdp_epsilon_floor,
    rdp_subsampled_gaussian,
    rdp_to_epsilon,
)
from dpaudit.theory.dpsgd_dc import *  # noqa: F403 - the public names are dpsgd_dc.__all__

__all__ = [
    "DEFAULT_ORDERS",
    "OPACUS_ORDERS",
    "AccountingFallbackWarning",
    "calibrate_noise",
    "epsilon",
    "ledger_epsilons",
    "prv_grid",
    "rdp_epsilon_floor",
    "rdp_subsampled_gaussian",
    "rdp_to_epsilon",
    *dpsgd_dc.__all__,
]
