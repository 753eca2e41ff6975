"""ROC curve, AUC, TPR at low FPR and the eq. 20 point estimates (estimates, not bounds).

A threshold t predicts "member" when score ≥ t; FPR = FP/N over the N non-member scores, FNR = FN/P
over the P member scores. ε is in nats and δ a probability.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from dpaudit._validation import (
    DPAuditError,
    brief,
    check_delta,
    check_positive_int,
    check_probability,
    check_scores,
    check_seed,
    real_array,
)
from dpaudit.estimate.counts import ScoreCounts


def _rates(name: str, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """A rate or an array of rates as floats (the range is checked by the caller); booleans, text, None and
    dicts refused."""
    rates = real_array(values, refused=f"{name} must be a rate in [0, 1] or an array of rates")
    return rates + 0.0  # −0.0 → 0.0: a zero rate is +inf, never log(−inf) = NaN


@overload
def empirical_epsilon(fpr: float, fnr: float, *, delta: float = 1e-5) -> float: ...
@overload
def empirical_epsilon(
    fpr: npt.ArrayLike, fnr: npt.ArrayLike, *, delta: float = 1e-5
) -> float | npt.NDArray[np.float64]: ...
def empirical_epsilon(
    fpr: npt.ArrayLike, fnr: npt.ArrayLike, *, delta: float = 1e-5
) -> float | npt.NDArray[np.float64]:
    """Empirical ε̂ of an attack from its false-positive and false-negative rates (Liang et al., eq. 20).

    ε̂ = max{ log((1 − δ − FPR) / FNR), log((1 − δ − FNR) / FPR) }  (Kairouz, Oh & Viswanath 2015).

    This is the papers' point estimate, not a confidence bound. Edge cases follow the formula
    exactly and are reported, not clipped: a zero rate gives +inf (with a warning), a worse-than-random
    attack gives a negative value, and a side with 1 − δ − rate ≤ 0 counts as −inf (its limit).

    Args:
        fpr: false-positive rate(s) in [0, 1] (non-members predicted "member").
        fnr: false-negative rate(s) in [0, 1] (members predicted "non-member").
        delta: the DP δ, in [0, 1).

    Returns:
        ε̂ as a float for scalar input, else a numpy array broadcast over ``fpr`` and ``fnr``.

    Examples:
        FPR 0.05 and FNR 0.30: the larger of log((1 − δ − 0.05)/0.30) ≈ 1.15 and log((1 − δ − 0.30)/0.05) ≈ 2.64:

        >>> round(empirical_epsilon(0.05, 0.30, delta=1e-5), 4)
        2.639
    """
    if isinstance(delta, bool) or not (isinstance(delta, (int, float, np.integer, np.floating)) and 0 <= delta < 1):
        raise DPAuditError(f"delta must lie in [0, 1), got {brief(delta)}")
    fpr_arr = _rates("fpr", fpr)
    fnr_arr = _rates("fnr", fnr)
    for name, values in (("fpr", fpr_arr), ("fnr", fnr_arr)):
        if values.size and (not np.all(np.isfinite(values)) or values.min() < 0 or values.max() > 1):
            raise DPAuditError(f"{name} must lie in [0, 1], got {brief(values if values.ndim else float(values))}")
    try:
        np.broadcast_shapes(fpr_arr.shape, fnr_arr.shape)
    except ValueError:
        raise DPAuditError(f"fpr {fpr_arr.shape} and fnr {fnr_arr.shape} do not broadcast together") from None
    with np.errstate(divide="ignore", invalid="ignore"):
        # a side whose 1 − δ − rate is ≤ 0 certifies nothing (its limit is −inf), not NaN
        first = np.where(1 - delta - fpr_arr > 0, np.log((1 - delta - fpr_arr) / fnr_arr), -np.inf)
        second = np.where(1 - delta - fnr_arr > 0, np.log((1 - delta - fnr_arr) / fpr_arr), -np.inf)
        result = np.maximum(first, second)
    if np.any(np.isposinf(result)):
        warnings.warn("a zero FPR or FNR gives ε̂ = +inf (perfect separation on this sample)", stacklevel=2)
    if result.ndim == 0:
        return float(result)
    return result


def error_rates(predicted_member: npt.ArrayLike, is_member: npt.ArrayLike) -> tuple[float, float]:
    """FPR and FNR of binary membership predictions.

    Args:
        predicted_member: booleans, True where the attack says "member".
        is_member: booleans, the ground truth.

    Returns:
        (FPR, FNR): FP/(FP+TN) over non-members, FN/(FN+TP) over members.
    """
    predicted = np.asarray(predicted_member, dtype=bool)
    truth = np.asarray(is_member, dtype=bool)
    if predicted.shape != truth.shape:
        raise DPAuditError(f"predictions {predicted.shape} and labels {truth.shape} differ in shape")
    if truth.all() or not truth.any():
        raise DPAuditError("error rates need both members and non-members")
    fpr = float(predicted[~truth].mean())
    fnr = float((~predicted[truth]).mean())
    return fpr, fnr


def roc_curve(
    member_scores: npt.ArrayLike, nonmember_scores: npt.ArrayLike
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """ROC curve over every distinct threshold, predicting "member" when score ≥ threshold.

    Args:
        member_scores: 1-D finite scores of members (higher = more likely member).
        nonmember_scores: 1-D finite scores of non-members.

    Returns:
        ``(fpr, tpr, thresholds)``: thresholds decrease from +inf (the point (0, 0)) through every
        distinct pooled score down to the smallest one (the point (1, 1)); fpr and tpr are
        non-decreasing. Tied scores share one threshold, so a tie between classes is one diagonal step.

    Raises:
        DPAuditError: empty input or non-finite scores.
    """
    counts = ScoreCounts.from_scores(member_scores=member_scores, nonmember_scores=nonmember_scores)
    return counts.fpr, counts.tpr, counts.thresholds.copy()


def auc(member_scores: npt.ArrayLike, nonmember_scores: npt.ArrayLike) -> float:
    """Area under the ROC curve: P[member score > non-member score] + ½ P[tie] (Mann–Whitney).

    Args:
        member_scores: 1-D finite member scores.
        nonmember_scores: 1-D finite non-member scores.

    Returns:
        AUC in [0, 1], computed exactly from integer counts.

    Raises:
        DPAuditError: empty input or non-finite scores.
    """
    return ScoreCounts.from_scores(member_scores=member_scores, nonmember_scores=nonmember_scores).auc()


def _check_fprs(fprs: float | Sequence[float] | npt.NDArray[Any]) -> tuple[float, ...]:
    try:
        values = tuple(float(value) for value in np.atleast_1d(np.asarray(fprs, dtype=float)))
    except (TypeError, ValueError):
        raise DPAuditError(f"fprs must be numbers in [0, 1], got {fprs!r}") from None
    if not values or not all(0 <= value <= 1 for value in values):
        raise DPAuditError(f"fprs must be numbers in [0, 1], got {fprs!r}")
    return values


def tpr_at_fpr(
    member_scores: npt.ArrayLike,
    nonmember_scores: npt.ArrayLike,
    *,
    fprs: float | Sequence[float] | npt.NDArray[Any] = (0.001, 0.01),
) -> dict[float, float]:
    """TPR of the best deterministic threshold whose FPR does not exceed each target.

    Convention: for each target f the result is max{TPR(t) : FPR(t) ≤ f} over the thresholds of
    :func:`roc_curve` (FPR computed as FP/N). No interpolation and no randomised thresholds; the
    threshold +inf always qualifies, so the value is 0 when even one false positive would exceed f.

    Args:
        member_scores: 1-D finite member scores.
        nonmember_scores: 1-D finite non-member scores.
        fprs: target false-positive rates in [0, 1].

    Returns:
        ``{fpr: tpr}`` with the targets (as floats) as keys.

    Raises:
        DPAuditError: empty or non-finite scores, or a target outside [0, 1].
    """
    members = check_scores("member_scores", member_scores)
    nonmembers = check_scores("nonmember_scores", nonmember_scores)
    targets = _check_fprs(fprs)
    counts = ScoreCounts.from_scores(member_scores=members, nonmember_scores=nonmembers)
    return {target: counts.tpr_at(target) for target in targets}


def epsilon_point(member_scores: npt.ArrayLike, nonmember_scores: npt.ArrayLike, *, delta: float) -> float:
    """Eq. 20 point estimate ε̂ = max over thresholds of max{ln((1−δ−FPR)/FNR), ln((1−δ−FNR)/FPR)}.

    This is a plug-in *estimate* on the observed rates, not a confidence bound. A ratio with a zero
    denominator (FNR = 0 or FPR = 0 at that threshold) would be +inf; such a ratio is left out and the
    maximum is taken over the finite ratios only (the other ratio at the same threshold still counts).
    Consequences: the result is always finite; the trivial thresholds give ln(1 − δ) ≤ 0, so the
    result is clamped at 0; perfectly separated scores give ln(max(P, N)·(1−δ)), not +inf: the larger
    of the thresholds that miss exactly one member or one non-member (see :func:`epsilon_ceiling` for
    what such a sample can certify). Tied scores separated perfectly (say, two values, as canaries
    without noise give) have no such thresholds and get the same value, not the 0 their finite
    ratios alone would give. A ratio with 1 − δ − rate ≤ 0 is also left out.

    Args:
        member_scores: 1-D finite member scores.
        nonmember_scores: 1-D finite non-member scores.
        delta: the DP δ in [0, 1).

    Returns:
        ε̂ in nats, ≥ 0.

    Raises:
        DPAuditError: empty or non-finite scores, δ outside [0, 1).

    Examples:
        Scores two standard deviations apart; the point estimate means something only above its no-signal level:

        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> members, nonmembers = rng.normal(2, 1, 1000), rng.normal(0, 1, 1000)
        >>> point = epsilon_point(members, nonmembers, delta=1e-5)
        >>> null = epsilon_point_null(member_scores=members, nonmember_scores=nonmembers, delta=1e-5)
        >>> bool(point > null)
        True
    """
    members = check_scores("member_scores", member_scores)
    nonmembers = check_scores("nonmember_scores", nonmember_scores)
    delta = check_delta(delta)
    return ScoreCounts.from_scores(member_scores=members, nonmember_scores=nonmembers).epsilon_point(delta=delta)


#: Label permutations behind :func:`epsilon_point_null` by default.
NULL_PERMUTATIONS = 200
#: Quantile of the permutation distribution that :func:`epsilon_point_null` reports by default.
NULL_QUANTILE = 0.95
_NULL_CHUNK_ELEMENTS = 4_000_000  # permutations x scores per block: bounds the memory at large n


def epsilon_point_null(
    *,
    member_scores: npt.ArrayLike,
    nonmember_scores: npt.ArrayLike,
    delta: float,
    permutations: int = NULL_PERMUTATIONS,
    quantile: float = NULL_QUANTILE,
    seed: int = 0,
) -> float:
    """Null level of the eq. 20 point estimate: what :func:`epsilon_point` gives on these scores when membership
    carries no signal.

    The pooled scores are kept and the membership labels permuted (P members and N non-members each time,
    ``permutations`` uniform permutations from ``seed``); :func:`epsilon_point` of each relabelling is computed, and
    the ``quantile`` of those values is returned (the order statistic at or above it, numpy's "higher" method). Under
    no leakage the observed labelling is one more draw from this distribution, so the observed point estimate
    exceeds the 95 % null level with probability about 5 %. A point estimate at or below its null level says
    nothing about leakage, however large it is: eq. 20 maximised over all thresholds is biased upwards, and more so
    the fewer scores there are (about 1.1 on average at 360 + 360 scores with no leakage at all). The null level
    depends only on the pooled scores' ranks and ties and on P and N, never on which scores are the members'.

    It is a reference level for an *estimate*, not a confidence bound on ε: only a lower bound
    (:func:`~dpaudit.estimate.epsilon_lower_bound`) certifies leakage.

    Args:
        member_scores: 1-D finite member scores (higher = more likely member).
        nonmember_scores: 1-D finite non-member scores.
        delta: the DP δ in [0, 1) of the point estimate.
        permutations: number of label permutations, ≥ 1.
        quantile: the quantile in (0, 1) of the permutation distribution to report.
        seed: seed of the permutations (non-negative integer).

    Returns:
        The null level ε̂ in nats, ≥ 0.

    Raises:
        DPAuditError: empty or non-finite scores, δ outside [0, 1), permutations < 1, quantile outside (0, 1), a
            bad seed.
    """
    members = check_scores("member_scores", member_scores)
    nonmembers = check_scores("nonmember_scores", nonmember_scores)
    delta = check_delta(delta)
    permutations = check_positive_int("permutations", permutations)
    quantile = check_probability("quantile", quantile)
    seed = check_seed(seed)
    n_members, n_nonmembers = members.size, nonmembers.size
    ranked = np.sort(np.concatenate([members, nonmembers]))[::-1]  # a threshold t counts every score >= t
    # Last position of each block of tied scores: the rows of ScoreCounts below its +inf row.
    ends = np.flatnonzero(np.append(ranked[1:] != ranked[:-1], True))
    if ends.size == ranked.size:  # no ties: the null level depends on P, N, δ and the permutations alone
        return _untied_null(n_members, n_nonmembers, delta, permutations, quantile, seed)
    return _null_level(ends, n_members, n_nonmembers, delta, permutations, quantile, seed)


def epsilon_point_null_at_threshold(
    *,
    member_scores,
    nonmember_scores,
    threshold: float,
    delta: float,
    permutations: int = NULL_PERMUTATIONS,
    quantile: float = NULL_QUANTILE,
    seed: int = 0,
) -> float:
    """Null level of the eq. 20 estimate of an attack that decides at one fixed threshold: what
    :func:`empirical_epsilon` of its error rates gives when membership carries no signal.

    The attack predicts "member" where a score is strictly above ``threshold`` (as the shadow-model attack does
    with its member probability and 0.5). Its predictions are kept and the membership labels permuted (P members
    and N non-members each time, ``permutations`` draws of ``np.random.default_rng(seed).permutation``); the
    :func:`empirical_epsilon` of each relabelling's (FPR, FNR) is computed, and the ``quantile`` of those values is
    returned (numpy's default, linear interpolation). Unlike :func:`epsilon_point_null`, which maximises eq. 20
    over every threshold, this is the null of one attack's own decision rule. A relabelling with a zero FPR or FNR
    gives +inf (with :func:`empirical_epsilon`'s warning), one where both sides certify nothing gives −inf.

    It is a reference level for an *estimate*, not a confidence bound on ε.

    Args:
        member_scores: 1-D finite member scores (higher = more likely member).
        nonmember_scores: 1-D finite non-member scores.
        threshold: the attack's decision threshold (a score > threshold predicts "member").
        delta: the DP δ in [0, 1) of the estimate.
        permutations: number of label permutations, ≥ 1.
        quantile: the quantile in (0, 1) of the permutation distribution to report.
        seed: seed of the permutations (non-negative integer).

    Returns:
        The null level ε̂ in nats (±inf where the quantile falls on such relabellings).

    Raises:
        DPAuditError: empty or non-finite scores, a non-finite threshold, δ outside [0, 1), permutations < 1,
            quantile outside (0, 1), a bad seed.
    """
    members = check_scores("member_scores", member_scores)
    nonmembers = check_scores("nonmember_scores", nonmember_scores)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.integer, np.floating)):
        raise DPAuditError(f"threshold must be a finite number, got {brief(threshold)}")
    if not np.isfinite(threshold):
        raise DPAuditError(f"threshold must be a finite number, got {threshold!r}")
    delta = check_delta(delta)
    permutations = check_positive_int("permutations", permutations)
    quantile = check_probability("quantile", quantile)
    rng = np.random.default_rng(check_seed(seed))
    predicted = np.concatenate([members, nonmembers]) > threshold
    labels = np.arange(len(predicted)) < len(members)
    permuted = [error_rates(predicted, rng.permutation(labels)) for _ in range(permutations)]
    return float(np.quantile([empirical_epsilon(a, b, delta=delta) for a, b in permuted], quantile))


@functools.lru_cache(maxsize=64)
def _untied_null(
    n_members: int, n_nonmembers: int, delta: float, permutations: int, quantile: float, seed: int
) -> float:
    """:func:`_null_level` of scores without ties (cached: every checkpoint of a run has the same P and N)."""
    ends = np.arange(n_members + n_nonmembers)
    return _null_level(ends, n_members, n_nonmembers, delta, permutations, quantile, seed)


def _null_level(
    ends: npt.NDArray[np.intp],
    n_members: int,
    n_nonmembers: int,
    delta: float,
    permutations: int,
    quantile: float,
    seed: int,
) -> float:
    """The ``quantile`` of eq. 20 over ``permutations`` relabellings of scores ranked in descending order whose
    blocks of ties end at positions ``ends``."""
    pooled_size = n_members + n_nonmembers
    labels = np.zeros(pooled_size, dtype=np.int8)
    labels[:n_members] = 1  # order is irrelevant: every row is permuted
    predicted = np.concatenate([[0], ends + 1])  # scores predicted "member" per threshold (+inf first)
    rng = np.random.default_rng(seed)
    chunk = max(1, _NULL_CHUNK_ELEMENTS // pooled_size)
    values = np.empty(permutations)
    floor = np.log((1.0 - delta) * max(n_members, n_nonmembers))  # perfectly separated: see epsilon_point
    for start in range(0, permutations, chunk):
        rows = min(chunk, permutations - start)
        permuted = rng.permuted(np.broadcast_to(labels, (rows, pooled_size)), axis=1)
        tp = np.zeros((rows, predicted.size), dtype=np.int32)
        tp[:, 1:] = np.cumsum(permuted, axis=1, dtype=np.int32)[:, ends]
        fp = predicted - tp
        fn = n_members - tp
        # eq. 20 without a log per threshold: the largest admissible ratio of each row in counts, then one log.
        # As _kov_epsilon, a ratio with a zero denominator is left out (an infinite denominator gives 0) and
        # one with a non-positive numerator cannot win (best starts at 0).
        best = np.zeros(rows)
        for numerator_count, total, denominator_count, other in (
            (fp, n_nonmembers, fn, n_members),  # ln((1 − δ − FPR)/FNR)
            (fn, n_members, fp, n_nonmembers),  # ln((1 − δ − FNR)/FPR)
        ):
            numerator = (1.0 - delta) * total - numerator_count
            denominator = denominator_count.astype(float)
            denominator[denominator_count == 0] = np.inf
            np.divide(numerator, denominator, out=numerator)
            best = np.maximum(best, numerator.max(axis=1) * (other / total))
        point = np.log(best, out=np.zeros(rows), where=best > 1.0)
        separated = np.any((fp == 0) & (fn == 0), axis=1)
        point[separated] = np.maximum(point[separated], floor)
        values[start : start + rows] = point
    return float(np.quantile(values, quantile, method="higher"))


__all__ = [
    "NULL_PERMUTATIONS",
    "NULL_QUANTILE",
    "auc",
    "empirical_epsilon",
    "epsilon_point",
    "epsilon_point_null",
    "epsilon_point_null_at_threshold",
    "error_rates",
    "roc_curve",
    "tpr_at_fpr",
]
