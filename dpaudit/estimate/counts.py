"""Counts at every threshold (:class:`ScoreCounts`), exact Clopper–Pearson bounds and the KOV ε core.

A threshold t predicts "member" for scores ≥ t. :class:`ScoreCounts` is built from the scores once and
keeps, for every distinct threshold, how many members (TP) and non-members (FP) it predicts "member";
the ROC, the AUC, TPR at FPR, the eq. 20 point estimate and the simultaneous bounds all read these counts.
ε is in nats, δ a probability, α = 1 − confidence a significance level.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import overload

import numpy as np
import numpy.typing as npt

from dpaudit._validation import DPAuditError, check_alpha, check_counts, check_delta, check_scores

# ----------------------------------------------------------------------------------------------
# Vectorised cores (no checks)
# ----------------------------------------------------------------------------------------------


#: Count arrays at least this long, of one n, go through :class:`_CountBounds` (each distinct count inverted once).
_CP_DISTINCT_MIN = 256
#: The largest n whose bounds :func:`_count_bounds` keeps (an array of 8·(n + 1) bytes: 16 MiB).
_CP_CACHE_MAX_N = 1 << 21


def _cp_upper(k: npt.ArrayLike, n: npt.ArrayLike, alpha: float) -> npt.NDArray[np.float64]:
    """One-sided Clopper–Pearson upper bound u: P[Binom(n, u) ≤ k] = α; u = 1 where k = n.

    A long integer array of counts ``k`` of one ``n`` (a number) is inverted once per distinct count (the counts of
    every threshold of a score set repeat: they take at most n + 1 values), through the cache of
    :func:`_count_bounds` where n ≤ :data:`_CP_CACHE_MAX_N`: the same numbers, bit for bit, as one inversion per
    entry (:func:`_cp_upper_each`).
    """
    k = np.asarray(k)
    if np.ndim(n) == 0 and k.ndim >= 1 and k.size >= _CP_DISTINCT_MIN and k.dtype.kind in "iu":
        trials = float(np.asarray(n))
        if trials.is_integer() and 0 <= int(k.min()) and int(k.max()) <= trials:
            if trials <= _CP_CACHE_MAX_N:
                return _count_bounds(int(trials), float(alpha))(k)
            distinct, inverse = np.unique(k, return_inverse=True)
            return _cp_upper_each(distinct, trials, alpha)[inverse.reshape(k.shape)]
    return _cp_upper_each(k, n, alpha)


def _cp_upper_each(k: npt.ArrayLike, n: npt.ArrayLike, alpha: float) -> npt.NDArray[np.float64]:
    """:func:`_cp_upper`, one inversion per entry."""
    from scipy import special

    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    full = k >= n
    # P[Binom(n, u) ≤ k] = 1 − I_u(k+1, n−k) = betaincc(k+1, n−k, u); invert the upper tail directly
    # so that tiny α (Bonferroni) keeps full relative precision.
    upper = special.betainccinv(k + 1.0, np.where(full, 1.0, n - k), alpha)
    return np.where(full, 1.0, upper)


class _CountBounds:
    """The Clopper–Pearson upper bounds (:func:`_cp_upper_each`) of counts 0…n of n trials at level α, each count
    inverted when first asked for and kept: calling it on integer counts returns their bounds, bit for bit those of
    :func:`_cp_upper_each`."""

    def __init__(self, n: int, alpha: float) -> None:
        self.n, self.alpha = n, alpha
        self._bounds = np.full(n + 1, np.nan)  # NaN: not inverted yet (no valid count's bound is NaN)

    def __call__(self, k: npt.NDArray[np.integer]) -> npt.NDArray[np.float64]:
        bounds = self._bounds[k]
        missing = np.isnan(bounds)
        if missing.any():
            new = np.unique(k[missing])
            self._bounds[new] = _cp_upper_each(new, self.n, self.alpha)
            bounds = self._bounds[k]
        return bounds


def _count_bounds(n: int, alpha: float) -> _CountBounds:
    """The :class:`_CountBounds` of n and α: for n ≤ :data:`_CP_CACHE_MAX_N` one shared by every caller (the audits
    of one run's statistics share their class sizes and α), else a new one."""
    return _shared_count_bounds(n, alpha) if n <= _CP_CACHE_MAX_N else _CountBounds(n, alpha)


@lru_cache(maxsize=8)
def _shared_count_bounds(n: int, alpha: float) -> _CountBounds:
    return _CountBounds(n, alpha)


#: Every this many thresholds :func:`_best_threshold` inverts first; the rest only where they could win.
_SCOUT_STRIDE = 64


def _best_threshold(
    score: Callable[[npt.NDArray[np.float64], npt.NDArray[np.float64]], npt.NDArray[np.float64]],
    counts: ScoreCounts,
    *,
    alpha_fp: float,
    alpha_fn: float,
    youden: npt.NDArray[np.float64] | None = None,
) -> int:
    """The index of the threshold of ``counts`` whose ``score(FPR_u, FNR_u)`` is largest, with Clopper–Pearson
    upper bounds FPR_u = u(FP; N, ``alpha_fp``) and FNR_u = u(FN; P, ``alpha_fn``), without inverting every count.

    ``score`` must be elementwise and non-increasing in both bounds (a larger FPR or FNR bound never scores
    higher), as the KOV ε and the Gaussian-DP μ are. Ties go as ``np.argmax(scores)`` breaks them (the first
    index) or, with ``youden`` (one value per threshold), as ``np.lexsort((youden, scores))[-1]`` does (the
    largest ``youden``, then the last index): the result is that index exactly.

    Every :data:`_SCOUT_STRIDE`-th threshold (and the last) is scored first. Between two scored thresholds
    a < b, FP ≥ FP(a) and FN ≥ FN(b) (FP grows and FN falls along the thresholds), so no threshold there scores
    above score(u(FP(a)), u(FN(b))); only the gaps whose bound could beat (or tie with a better tie-break than)
    the best scored threshold are scored in full, until none is left. The bound is inflated by 10⁻¹² relative
    before it is compared, so rounding in ``score`` cannot hide a winner. Each count's bound is the same
    inversion as in :func:`_cp_upper_each`, so the scores compared are bit for bit those of every threshold.
    """
    fp_bounds = _count_bounds(counts.n_nonmembers, float(alpha_fp))
    fn_bounds = _count_bounds(counts.n_members, float(alpha_fn))
    fp, fn = counts.fp, counts.fn
    size = fp.size
    scored = np.unique(np.r_[np.arange(0, size, _SCOUT_STRIDE), size - 1])
    scores = np.empty(size)
    known = np.zeros(size, dtype=bool)
    scores[scored] = score(fp_bounds(fp[scored]), fn_bounds(fn[scored]))
    known[scored] = True
    low, high = scored[:-1] + 1, scored[1:] - 1  # each gap's first and last threshold
    inside = low <= high
    low, high = low[inside], high[inside]
    bound = np.array(score(fp_bounds(fp[low - 1]), fn_bounds(fn[high + 1])), dtype=float)
    finite = np.isfinite(bound)
    bound[finite] += 1e-12 * np.abs(bound[finite])
    top = np.empty(0)  # with youden: each gap's largest
    if youden is not None and low.size:
        top = np.maximum.reduceat(youden, np.ravel(np.column_stack([low, high + 1])))[::2]
    pending = np.ones(low.size, dtype=bool)
    while True:
        done = np.flatnonzero(known)
        if youden is None:
            best = int(done[np.argmax(scores[done])])
            beats = (bound > scores[best]) | ((bound >= scores[best]) & (low < best))
        else:
            best = int(done[np.lexsort((youden[done], scores[done]))[-1]])
            tie = (top > youden[best]) | ((top == youden[best]) & (high > best))
            beats = (bound > scores[best]) | ((bound >= scores[best]) & tie)
        todo = np.flatnonzero(pending & beats)
        if todo.size == 0:
            return best
        pending[todo] = False
        index = np.concatenate([np.arange(low[j], high[j] + 1) for j in todo])
        scores[index] = score(fp_bounds(fp[index]), fn_bounds(fn[index]))
        known[index] = True


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
    upper = _cp_upper(k_arr, int(n_arr.flat[0]) if np.ndim(n) == 0 else n_arr, alpha)
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
