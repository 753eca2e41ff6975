"""Theoretical privacy (numpy, scipy and dp-accounting; importing this package never imports torch).

* :mod:`dpaudit.theory.accounting` — ε of any sequence of Poisson-subsampled Gaussian steps, as dp-accounting
  ``DpEvent`` (:func:`~dpaudit.theory.accounting.dp_event`) composed by dp-accounting's RDP (improved or classic
  conversion; dpaudit's own series at fractional orders, where dp-accounting 0.6.0 overestimates) or PLD
  accountant, or Opacus's PRV; noise calibration through dp-accounting's
  ``calibrate_dp_mechanism``; per-epoch ε replayed from a run's ledger.
  It holds dpaudit's one RDP → (ε, δ) formula (:func:`~dpaudit.theory.accounting.rdp_to_epsilon_per_order`: the
  classic conversion and the closed-form bounds; a run's improved conversion is dp-accounting's).
* :mod:`dpaudit.theory.bounds` — closed-form RDP bounds, one :class:`~dpaudit.theory.bounds.Bound` record each:
  Liang et al.'s DPSGD-GC / DPSGD-DC bounds and the bounds they compare with.
* :mod:`dpaudit.theory.sgm` — α*(q, σ) and Lemma A.13 of Liang et al. for the sampled Gaussian mechanism.
* :mod:`dpaudit.theory.dpsgd_dc` — those bounds read as (ε, δ)-DP and over epochs, and the paper's per-step bound
  against the exact one-step RDP.
"""

from __future__ import annotations

from dpaudit.theory import accounting, bounds, dpsgd_dc, sgm  # noqa: F401 - the submodules, as theory.bounds etc.
from dpaudit.theory.accounting import (
    DEFAULT_ORDERS,
    OPACUS_ORDERS,
    POISSON_ON_SHUFFLED_LABEL,
    SHUFFLED_UPPER_LABEL,
    AccountingFallbackWarning,
    calibrate_noise,
    dp_event,
    epsilon,
    epsilon_labels,
    ledger_epsilons,
    ledger_shuffled_epsilons,
    prv_grid,
    rdp_epsilon_floor,
    rdp_subsampled_gaussian,
    rdp_to_epsilon,
    shuffled_upper_epsilon,
)
from dpaudit.theory.bounds import Bound, get_bound
from dpaudit.theory.dpsgd_dc import *  # noqa: F403 - the public names are dpsgd_dc.__all__

__all__ = [
    "DEFAULT_ORDERS",
    "OPACUS_ORDERS",
    "POISSON_ON_SHUFFLED_LABEL",
    "SHUFFLED_UPPER_LABEL",
    "AccountingFallbackWarning",
    "Bound",
    "calibrate_noise",
    "dp_event",
    "epsilon",
    "epsilon_labels",
    "get_bound",
    "ledger_epsilons",
    "ledger_shuffled_epsilons",
    "prv_grid",
    "rdp_epsilon_floor",
    "rdp_subsampled_gaussian",
    "rdp_to_epsilon",
    "shuffled_upper_epsilon",
    *dpsgd_dc.__all__,
]
