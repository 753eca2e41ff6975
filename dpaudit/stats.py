"""Comparisons across independent trials: confidence intervals of a difference, three-valued verdicts on a claimed
difference, and the paired and Welch t tests over trials that decide them.

A *trial* is one independent repetition of a configuration (its own seed); a per-trial value is any number a trial
gives (an ε̂ in nats, a training loss, an accuracy as a fraction): the functions here are unit-free, and a difference
and its standard error share the values' unit. A claim "A > B" is decided from the two-sided confidence interval of
the difference A − B: it *holds* when the interval lies entirely above the margin, is *contradicted* when it lies
entirely below, and is *inconclusive* otherwise.

scipy is imported inside the functions that need it, so ``import dpaudit`` stays light.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from dpaudit._validation import DPAuditError

__all__ = ["decide", "equivalent", "interval", "paired_verdict", "trials_verdict"]


def interval(
    *, difference: float, standard_error: float, level: float = 0.95, dof: int | None = None
) -> tuple[float, float]:
    """Two-sided confidence interval ``difference ± q·standard_error``, q the (1 + level)/2 quantile of the
    standard normal (or of Student's t with ``dof`` degrees of freedom when given); NaN bounds when the difference
    or its standard error is not finite, or the standard error is negative.

    Args:
        difference: the estimate (any unit).
        standard_error: its standard error (same unit, ≥ 0; 0 gives the point itself).
        level: confidence level (0 < level < 1).
        dof: degrees of freedom of a t interval; None for a normal interval.

    Returns:
        (lower, upper) in the unit of ``difference``.

    Raises:
        DPAuditError: ``level`` outside (0, 1).
    """
    from scipy import stats

    if not 0 < level < 1:
        raise DPAuditError(f"level must be in (0, 1), got {level}")
    if not (np.isfinite(difference) and np.isfinite(standard_error)) or standard_error < 0:
        return float("nan"), float("nan")
    tail = (1 + level) / 2
    quantile = float(stats.norm.ppf(tail) if dof is None else stats.t.ppf(tail, dof))
    return difference - quantile * standard_error, difference + quantile * standard_error


def decide(
    *, difference: float, standard_error: float, level: float = 0.95, margin: float = 0.0, dof: int | None = None
) -> str:
    """Three-valued verdict on the claim "``difference`` > ``margin``" from the two-sided :func:`interval`.

    Args:
        difference: estimate of the claimed difference, signed so that the claim says it is positive (e.g.
            accuracy of the method claimed better minus that of the other, as a fraction).
        standard_error: its standard error (≥ 0; 0 gives an exact comparison).
        level: confidence level of the interval (0 < level < 1).
        margin: the claim's threshold on the difference (same unit).
        dof: degrees of freedom of a t interval; None for a normal interval.

    Returns:
        "holds" when the interval lies entirely above ``margin``, "contradicted" when entirely below,
        "inconclusive" otherwise (also when the difference or its standard error is not finite).
    """
    low, high = interval(difference=difference, standard_error=standard_error, level=level, dof=dof)
    if low > margin:
        return "holds"
    if high < margin:
        return "contradicted"
    return "inconclusive"


def equivalent(*, difference: float, standard_error: float, margin: float, level: float = 0.95) -> bool:
    """Two one-sided tests (TOST) of equivalence: whether the data show |true difference| < ``margin``, each
    one-sided test at 1 − ``level``, i.e. the two-sided (2·``level`` − 1) normal interval lies inside
    (−``margin``, ``margin``). A claim of superiority ("A beats B") that the data show equivalent within a margin
    it states beforehand is refuted, not merely unproven.

    Args:
        difference: the estimate (any unit).
        standard_error: its standard error (same unit, ≥ 0).
        margin: the equivalence margin (> 0, same unit): differences smaller than it count as no advantage.
        level: confidence of each one-sided test (0.5 < level < 1).

    Returns:
        True when both one-sided tests reject (False also when the difference or its standard error is not finite).

    Raises:
        DPAuditError: ``margin`` ≤ 0 or ``level`` outside (0.5, 1).
    """
    if not margin > 0:
        raise DPAuditError(f"margin must be > 0, got {margin}")
    if not 0.5 < level < 1:
        raise DPAuditError(f"level must be in (0.5, 1), got {level}")
    low, high = interval(difference=difference, standard_error=standard_error, level=2 * level - 1)
    return bool(-margin < low and high < margin)


def trials_verdict(*, more, less=None) -> tuple[str, dict[str, Any]]:
    """Verdict on "the mean of ``more`` exceeds the mean of ``less``" from per-trial values, at 95 %.

    Non-finite values are left out. With ``less``, Welch's interval: the difference of the means, standard error
    √(s²_more/m_more + s²_less/m_less) (sample variances, ddof = 1) and a t quantile with dof = the fewer trials − 1
    (conservative beside the Welch–Satterthwaite dof). With ``less`` None, ``more`` holds paired per-trial differences
    and the claim is that their mean is > 0: a one-sample t interval with dof = trials − 1.

    Args:
        more: per-trial values of the side claimed larger (1-D, any unit), or paired differences.
        less: per-trial values of the other side (same unit), or None.

    Returns:
        (verdict, numbers): the verdict ("holds", "contradicted" or "inconclusive") and a JSON-ready dict holding it
        again with ``means`` (per side, None where a side has no finite value) and either ``difference``,
        ``standard_error`` and ``interval_95`` or, with fewer than 2 finite values on a side (inconclusive),
        ``trials`` (finite values per side).
    """
    samples = [np.asarray(x, dtype=float) for x in ((more,) if less is None else (more, less))]
    samples = [x[np.isfinite(x)] for x in samples]
    means = [float(x.mean()) if len(x) else None for x in samples]
    if min(len(x) for x in samples) < 2:
        return "inconclusive", {"verdict": "inconclusive", "means": means, "trials": [len(x) for x in samples]}
    difference = float(samples[0].mean() - (samples[1].mean() if len(samples) > 1 else 0.0))
    se = float(np.sqrt(sum(x.var(ddof=1) / len(x) for x in samples)))
    dof = min(len(x) for x in samples) - 1
    verdict = decide(difference=difference, standard_error=se, dof=dof)
    return verdict, {
        "verdict": verdict,
        "means": means,
        "difference": difference,
        "standard_error": se,
        "interval_95": list(interval(difference=difference, standard_error=se, dof=dof)),
    }


def paired_verdict(
    *,
    more: Sequence[float],
    less: Sequence[float],
    more_trials: Sequence[Hashable],
    less_trials: Sequence[Hashable],
) -> tuple[str, dict[str, Any]]:
    """Verdict on "``more``'s values are larger than ``less``'s", trial by trial where the trials match.

    When both sides ran the same trials (the same distinct keys, each once: e.g. the same seed and trial index,
    hence the same members, initialisation and noise), the per-trial differences ``more − less`` are tested with
    :func:`trials_verdict` (paired), which removes the variation the trials share; otherwise the two sets of values
    are compared with Welch's interval.

    Args:
        more: per-trial values of the side claimed larger (any unit).
        less: per-trial values of the other side (same unit).
        more_trials: the trial key of each value of ``more`` (hashable, e.g. (seed, trial)).
        less_trials: the trial key of each value of ``less``.

    Returns:
        (verdict, numbers) as :func:`trials_verdict` gives them, with ``paired`` (whether the trials matched); when
        paired, ``means`` are each side's mean over the matched trials.

    Raises:
        DPAuditError: a side whose values and trial keys differ in length.
    """
    if len(more) != len(more_trials) or len(less) != len(less_trials):
        raise DPAuditError("paired_verdict needs one trial key per value on each side")
    values = [
        {trial: float(value) for trial, value in zip(trials, side)}
        for side, trials in ((more, more_trials), (less, less_trials))
    ]
    if values[0].keys() != values[1].keys() or any(len(v) != len(side) for v, side in zip(values, (more, less))):
        verdict, numbers = trials_verdict(more=np.array(list(more)), less=np.array(list(less)))
        return verdict, {**numbers, "paired": False}
    trials = sorted(values[0], key=str)
    verdict, numbers = trials_verdict(more=np.array([values[0][t] - values[1][t] for t in trials]))
    means = [float(np.mean([v[t] for t in trials])) for v in values]
    return verdict, {**numbers, "means": means, "paired": True}
