"""Counts at every threshold (:class:`ScoreCounts`), exact Clopper–Pearson bounds and the KOV ε core.

A threshold t predicts "member" for scores ≥ t. :class:`ScoreCounts` is built from the scores once and
keeps, for every distinct threshold, how many members (TP) and non-members (FP) it predicts "member";
the ROC, the AUC, TPR at FPR, the eq. 20 point estimate and the simultaneous bounds all read these counts.
ε is in nats, δ a probability, α = 1 − confidence a significance level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import overload

import numpy as np
import numpy.typing as npt

from dpaudit._validation import DPAuditError, check_alpha, check_counts, check_delta, check_scores

# ----------------------------------------------------------------------------------------------
# Vectorised cores (no checks)
# ----------------------------------------------------------------------------------------------


def _cp_upper(k: npt.ArrayLike, n: npt.ArrayLike, alpha: float) -> npt.NDArray[np.float64]:
    """One-sided Clopper–Pearson upper bound u: P[Binom(n, u) ≤ k] = α; u = 1 where k = n."""
    from scipy import special

    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    full = k >= n
    # P[Binom(n, u) ≤ k] = 1 − I_u(k+1, n−k) = betaincc(k+1, n−k, u); invert the upper tail directly
    # so that tiny α (Bonferroni) keeps full relative precision.
    upper = special.betainccinv(k + 1.0, np.where(full, 1.0, n - k), alpha)
    return np.where(full, 1.0, upper)


def _cp_lower(k: npt.ArrayLike, n: npt.ArrayLike, alpha: float) -> npt.NDArray[np.float64]:
    """One-sided Clopper–Pearson lower bound l: P[Binom(n, l) ≥ k] = α; l = 0 where k = 0."""
    from scipy import special

    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    zero = k <= 0
    # P[Binom(n, l) ≥ k] = I_l(k, n−k+1).
    lower = special.betaincinv(np.where(zero, 1.0, k), n - k + 1.0, alpha)
    return np.where(zero, 0.0, lower)


def _kov_epsilon(fpr: npt.ArrayLike, fnr: npt.ArrayLike, delta: float) -> npt.NDArray[np.float64]:
    """max(0, ln((1−δ−FPR)/FNR), ln((1−δ−FNR)/FPR)), elementwise (Kairouz, Oh & Viswanath 2015).

    A ratio whose denominator is 0 or whose numerator is ≤ 0 is left out (treated as −inf), so the
    result is always finite and ≥ 0.
    """
    fpr = np.asarray(fpr, dtype=float)
    fnr = np.asarray(fnr, dtype=float)
    first = np.full(np.broadcast(fpr, fnr).shape, -np.inf)
    second = first.copy()
    num_first = 1.0 - delta - fpr
    num_second = 1.0 - delta - fnr
    ok_first = (num_first > 0) & (fnr > 0)
    ok_second = (num_second > 0) & (fpr > 0)
    fpr_b, fnr_b = np.broadcast_arrays(fpr, fnr)
    num_first, num_second = np.broadcast_arrays(num_first, num_second)
    first[ok_first] = np.log(num_first[ok_first] / fnr_b[ok_first])
    second[ok_second] = np.log(num_second[ok_second] / fpr_b[ok_second])
    return np.maximum(0.0, np.maximum(first, second))


def _certify(
    fp: int, nonmembers: int, fn: int, members: int, delta: float, alpha_fp: float, alpha_fn: float
) -> tuple[float, float, float]:
    """(ε lower bound, FPR upper, FNR upper) of one threshold's counts. One code path for all callers,
    so a perfect attack reproduces ``epsilon_ceiling`` bit for bit."""
    fpr_upper = _cp_upper(np.array([fp]), np.array([nonmembers]), alpha_fp)
    fnr_upper = _cp_upper(np.array([fn]), np.array([members]), alpha_fn)
    epsilon = _kov_epsilon(fpr_upper, fnr_upper, delta)
    return float(epsilon[0]), float(fpr_upper[0]), float(fnr_upper[0])


# ----------------------------------------------------------------------------------------------
# Clopper–Pearson
# ----------------------------------------------------------------------------------------------


@overload
def clopper_pearson_upper(k: int, n: int, *, alpha: float) -> float: ...
@overload
def clopper_pearson_upper(k: npt.ArrayLike, n: npt.ArrayLike, *, alpha: float) -> float | npt.NDArray[np.float64]: ...
def clopper_pearson_upper(k: npt.ArrayLike, n: npt.ArrayLike, *, alpha: float) -> float | npt.NDArray[np.float64]:
    """Exact one-sided Clopper–Pearson upper confidence bound on a binomial proportion.

    The bound u at level α solves P[Binom(n, u) ≤ k] = α, i.e. u = Beta⁻¹(1 − α; k + 1, n − k), so
    P[p ≤ u] ≥ 1 − α. By convention u = 1 when k = n.

    Args:
        k: observed successes (integer or integer array), 0 ≤ k ≤ n.
        n: trials (integer or integer array), n ≥ 1.
        alpha: one-sided significance α in (0, 1).

    Returns:
        u as a float for scalar input, else an array broadcast over ``k`` and ``n``.

    Raises:
        DPAuditError: non-integer or out-of-range counts, α outside (0, 1).
    """
    k_arr, n_arr = check_counts(k, n)
    alpha = check_alpha(alpha)
    upper = _cp_upper(k_arr, n_arr, alpha)
    return float(upper) if upper.ndim == 0 else upper


@overload
def clopper_pearson_lower(k: int, n: int, *, alpha: float) -> float: ...
@overload
def clopper_pearson_lower(k: npt.ArrayLike, n: npt.ArrayLike, *, alpha: float) -> float | npt.NDArray[np.float64]: ...
def clopper_pearson_lower(k: npt.ArrayLike, n: npt.ArrayLike, *, alpha: float) -> float | npt.NDArray[np.float64]:
    """Exact one-sided Clopper–Pearson lower confidence bound on a binomial proportion.

    The bound l at level α solves P[Binom(n, l) ≥ k] = α, i.e. l = Beta⁻¹(α; k, n − k + 1), so
    P[p ≥ l] ≥ 1 − α. By convention l = 0 when k = 0.

    Args:
        k: observed successes (integer or integer array), 0 ≤ k ≤ n.
        n: trials (integer or integer array), n ≥ 1.
        alpha: one-sided significance α in (0, 1).

    Returns:
        l as a float for scalar input, else an array broadcast over ``k`` and ``n``.

    Raises:
        DPAuditError: non-integer or out-of-range counts, α outside (0, 1).
    """
    k_arr, n_arr = check_counts(k, n)
    alpha = check_alpha(alpha)
    lower = _cp_lower(k_arr, n_arr, alpha)
    return float(lower) if lower.ndim == 0 else lower


# ----------------------------------------------------------------------------------------------
# Counts at every threshold
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ScoreCounts:
    """True- and false-positive counts of every distinct threshold of member vs non-member scores.

    Thresholds run from +inf (nothing predicted member: TP = FP = 0) down through every distinct
    pooled score to the smallest one (everything predicted member: TP = P, FP = N); a score predicts
    "member" when it is ≥ the threshold, so tied scores share one threshold. Build it with
    :meth:`from_scores`; the arrays are read-only.

    Attributes:
        thresholds: distinct thresholds in decreasing order, +inf first (float array).
        tp: members with score ≥ threshold, per threshold (int64 array, non-decreasing).
        fp: non-members with score ≥ threshold, per threshold (int64 array, non-decreasing).
        n_members: P, the number of member scores.
        n_nonmembers: N, the number of non-member scores.
    """

    thresholds: npt.NDArray[np.float64]
    tp: npt.NDArray[np.int64]
    fp: npt.NDArray[np.int64]
    n_members: int
    n_nonmembers: int

    @classmethod
    def from_scores(cls, *, member_scores: npt.ArrayLike, nonmember_scores: npt.ArrayLike) -> ScoreCounts:
        """Count TP and FP at every distinct threshold (ties handled by ≥).

        Build it once per pair of score sets and read every metric from it: the ROC
        (:attr:`fpr`, :attr:`tpr`), :meth:`auc`, :meth:`tpr_at`, :meth:`epsilon_point`, and the
        simultaneous bounds (:meth:`~dpaudit.estimate.BonferroniSelection.lower_bound_from_counts`,
        :meth:`~dpaudit.estimate.GDPEstimate.from_counts`).

        Args:
            member_scores: 1-D finite scores of members (higher = more likely member).
            nonmember_scores: 1-D finite scores of non-members.

        Returns:
            The :class:`ScoreCounts` of these scores.

        Raises:
            DPAuditError: empty input or non-finite scores.

        Examples:
            Of the 9 (member, non-member) pairs, 7 have the member scored higher: AUC = 7/9.

            >>> counts = ScoreCounts.from_scores(member_scores=[1, 2, 3], nonmember_scores=[0, 0.5, 2.5])
            >>> round(counts.auc(), 4)
            0.7778
        """
        members = check_scores("member_scores", member_scores)
        nonmembers = check_scores("nonmember_scores", nonmember_scores)
        # Plain (SIMD) sorts and binary searches: several times faster than one argsort of the pooled
        # scores with a cumulative count, and the distinct values are those np.unique gives.
        distinct = np.unique(np.concatenate([members, nonmembers]))[::-1]
        thresholds = np.concatenate([[np.inf], distinct])
        tp = (members.size - np.searchsorted(np.sort(members), thresholds, side="left")).astype(np.int64)
        fp = (nonmembers.size - np.searchsorted(np.sort(nonmembers), thresholds, side="left")).astype(np.int64)
        for array in (thresholds, tp, fp):
            array.flags.writeable = False
        return cls(thresholds, tp, fp, int(members.size), int(nonmembers.size))

    @property
    def fpr(self) -> npt.NDArray[np.float64]:
        """False-positive rate FP/N per threshold (non-decreasing)."""
        return self.fp / self.n_nonmembers

    @property
    def tpr(self) -> npt.NDArray[np.float64]:
        """True-positive rate TP/P per threshold (non-decreasing)."""
        return self.tp / self.n_members

    @property
    def fn(self) -> npt.NDArray[np.int64]:
        """False negatives P − TP per threshold: members with score < threshold."""
        return self.n_members - self.tp

    @property
    def fnr(self) -> npt.NDArray[np.float64]:
        """False-negative rate FN/P per threshold (non-increasing)."""
        return self.fn / self.n_members

    def auc(self) -> float:
        """Area under the ROC curve, P[member score > non-member score] + ½ P[tie] (Mann–Whitney).

        The trapezoidal area in exact integer arithmetic: a tie block contributes half its rectangle.

        Returns:
            AUC in [0, 1].
        """
        dfp = np.diff(self.fp)
        tp_sum = self.tp[1:] + self.tp[:-1]
        twice_area = int(np.dot(dfp.astype(object), tp_sum.astype(object)))  # exact, no overflow
        return twice_area / (2 * self.n_members * self.n_nonmembers)

    def gap_threshold(self, index: int) -> float:
        """A threshold with the counts of ``thresholds[index]`` away from the scores: the middle of the gap down to
        the next distinct score (+inf where ``index`` is the +inf row: predict none; −inf below the lowest score:
        predict all)."""
        upper = self.thresholds[index]
        lower = self.thresholds[index + 1] if index + 1 < self.thresholds.size else -np.inf
        if not np.isfinite(upper) or not np.isfinite(lower):
            return float(upper if not np.isfinite(upper) else lower)
        return float(upper / 2 + lower / 2)

    def tpr_at(self, fpr: float) -> float:
        """TPR of the best threshold whose FPR does not exceed ``fpr``: max{TPR(t) : FPR(t) ≤ fpr}.

        No interpolation; the threshold +inf always qualifies, so the value is 0 when even one false
        positive would exceed the target.

        Args:
            fpr: the target false-positive rate in [0, 1].

        Returns:
            TPR in [0, 1].

        Raises:
            DPAuditError: a target that is not a number in [0, 1].
        """
        if isinstance(fpr, bool) or not isinstance(fpr, (int, float, np.integer, np.floating)) or not 0 <= fpr <= 1:
            raise DPAuditError(f"fpr must be a number in [0, 1], got {fpr!r}")
        index = int(np.searchsorted(self.fpr, fpr, side="right")) - 1
        return float(self.tpr[max(index, 0)])

    def epsilon_point(self, *, delta: float) -> float:
        """Eq. 20 point estimate ε̂ over all thresholds, in nats (see :func:`dpaudit.estimate.epsilon_point`).

        Args:
            delta: the DP δ in [0, 1).

        Returns:
            ε̂ ≥ 0 in nats; an estimate, not a bound.

        Raises:
            DPAuditError: δ outside [0, 1).
        """
        delta = check_delta(delta)
        point = float(np.max(_kov_epsilon(self.fpr, self.fnr, delta)))
        if np.any((self.fp == 0) & (self.fn == 0)):  # perfectly separated, possibly tied: see epsilon_point
            point = max(point, math.log((1.0 - delta) * max(self.n_members, self.n_nonmembers)))
        return point


__all__ = ["ScoreCounts", "clopper_pearson_lower", "clopper_pearson_upper"]
