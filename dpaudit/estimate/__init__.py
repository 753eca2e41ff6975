"""Empirical privacy estimates and lower bounds from membership-inference scores.

Units and conventions used throughout:

* ε is in nats (natural logarithm), δ is a probability, α = 1 − confidence is a significance level.
* A *score* is any real number where higher means "member"; a threshold t predicts "member" when
  score ≥ t. FPR = FP/N over the N non-member scores, FNR = FN/P over the P member scores.
* Point estimates (``epsilon_point``, ``empirical_epsilon``) and the Gaussian-DP estimate
  (``epsilon_gdp``) are *estimates*; ``epsilon_point_null`` is the point estimate's level with no
  membership signal (permuted labels), the reference a point estimate must exceed to mean anything.
  Only ``epsilon_lower_bound``, ``epsilon_from_counts`` and the one-run functions are *lower bounds*
  that hold with probability ≥ confidence, under the usual audit assumption that the scores of each
  class are independent draws (one per trial or canary).

The package is split by family; every public name is importable from ``dpaudit.estimate``:

* :mod:`~dpaudit.estimate.counts`: :class:`ScoreCounts` (TP/FP at every threshold, from one sort) and
  the exact Clopper–Pearson bounds;
* :mod:`~dpaudit.estimate.roc`: ROC, AUC, TPR at FPR, the eq. 20 point estimates, error rates;
* :mod:`~dpaudit.estimate.bounds`: certified lower bounds, their ceilings and the threshold selections
  (:class:`SplitSelection`, :class:`GaussianSelection`, :class:`BonferroniSelection`, :data:`SELECTIONS`);
* :mod:`~dpaudit.estimate.gdp`: Gaussian-DP conversions and the Nasr et al. (2023) estimate;
* :mod:`~dpaudit.estimate.one_run`: the one-run bounds of Steinke, Nasr & Jagielski (2023).

scipy is imported lazily inside the functions that need it, so ``import dpaudit`` stays light.
"""

from __future__ import annotations

from dpaudit.estimate.bounds import (
    GAUSSIAN_SELECTION_FRACTION,
    SELECTIONS,
    BonferroniSelection,
    EpsilonBound,
    GaussianSelection,
    SplitSelection,
    ThresholdSelection,
    epsilon_ceiling,
    epsilon_from_counts,
    epsilon_from_rates,
    epsilon_lower_bound,
    resolve_selection,
)
from dpaudit.estimate.counts import ScoreCounts, clopper_pearson_lower, clopper_pearson_upper
from dpaudit.estimate.gdp import GDPEstimate, epsilon_gdp, gdp_delta, gdp_epsilon
from dpaudit.estimate.one_run import OneRunBound, epsilon_one_run, epsilon_one_run_scores, one_run_p_value
from dpaudit.estimate.roc import (
    NULL_PERMUTATIONS,
    NULL_QUANTILE,
    auc,
    empirical_epsilon,
    epsilon_point,
    epsilon_point_null,
    epsilon_point_null_at_threshold,
    error_rates,
    roc_curve,
    tpr_at_fpr,
)

__all__ = [
    "GAUSSIAN_SELECTION_FRACTION",
    "NULL_PERMUTATIONS",
    "NULL_QUANTILE",
    "SELECTIONS",
    "BonferroniSelection",
    "EpsilonBound",
    "GDPEstimate",
    "GaussianSelection",
    "OneRunBound",
    "ScoreCounts",
    "SplitSelection",
    "ThresholdSelection",
    "auc",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "empirical_epsilon",
    "epsilon_ceiling",
    "epsilon_from_counts",
    "epsilon_from_rates",
    "epsilon_gdp",
    "epsilon_lower_bound",
    "epsilon_one_run",
    "epsilon_one_run_scores",
    "epsilon_point",
    "epsilon_point_null",
    "epsilon_point_null_at_threshold",
    "error_rates",
    "gdp_delta",
    "gdp_epsilon",
    "one_run_p_value",
    "resolve_selection",
    "roc_curve",
    "tpr_at_fpr",
]
