"""Empirical privacy estimates and lower bounds from membership-inference scores.

Units and conventions used throughout:

* ε is in nats (natural logarithm), δ is a probability, α = 1 − confidence is a significance level.
* A *score* is any real number where higher means "member"; a threshold t predicts "member" when
  score ≥ t. FPR = FP/N over the N non-member scores, FNR = FN/P over the P member scores.
* Point estimates (``epsilon_point``, ``empirical_epsilon``) and the Gaussian-DP estimate
  (``epsilon_gdp``) are *estimates*. Only ``epsilon_lower_bound``, ``epsilon_from_counts`` and the
  one-run functions are *lower bounds* that hold with probability ≥ confidence, under the usual audit
  assumption that the scores of each class are independent draws (one per trial or canary).

scipy is imported lazily inside the functions that need it, so ``import dpaudit`` stays light.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from dpaudit._validation import (
    DPAuditError,
    check_choice,
    check_positive,
    check_positive_int,
    check_probability,
)


def empirical_epsilon(fpr, fnr, *, delta: float = 1e-5):
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
    """
    if not (isinstance(delta, (int, float)) and 0 <= delta < 1):
        raise DPAuditError(f"delta must lie in [0, 1), got {delta!r}")
    fpr_arr = np.asarray(fpr, dtype=float)
    fnr_arr = np.asarray(fnr, dtype=float)
    for name, values in (("fpr", fpr_arr), ("fnr", fnr_arr)):
        if values.size and (not np.all(np.isfinite(values)) or values.min() < 0 or values.max() > 1):
            raise DPAuditError(f"{name} must lie in [0, 1], got {values if values.ndim else float(values)}")
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


def error_rates(predicted_member, is_member) -> tuple[float, float]:
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


# ----------------------------------------------------------------------------------------------
# Argument checks (one-line DPAuditError, before any work)
# ----------------------------------------------------------------------------------------------

_SELECTIONS = ("split", "gaussian", "bonferroni")

#: Share of each class the "gaussian" selection fits on; the rest certifies.
GAUSSIAN_SELECTION_FRACTION = 0.2


def _check_scores(name: str, values) -> np.ndarray:
    """Return ``values`` as a non-empty 1-D float array of finite numbers."""
    try:
        array = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise DPAuditError(f"{name} must be a 1-D array of numbers") from None
    if array.ndim != 1:
        raise DPAuditError(f"{name} must be a 1-D array, got shape {array.shape}")
    if array.size == 0:
        raise DPAuditError(f"{name} is empty; an audit needs at least one score per class")
    bad = int(np.count_nonzero(~np.isfinite(array)))
    if bad:
        raise DPAuditError(f"{name} has {bad} non-finite value(s) (NaN or ±inf); scores must be finite")
    return array


def _check_delta(delta, *, allow_zero: bool = True) -> float:
    """δ in [0, 1) (or (0, 1) with ``allow_zero=False``)."""
    if isinstance(delta, bool):
        raise DPAuditError(f"delta must be a number, got {delta!r}")
    number = check_positive("delta", delta, allow_zero=True)
    if number >= 1 or (number == 0 and not allow_zero):
        interval = "[0, 1)" if allow_zero else "(0, 1)"
        raise DPAuditError(f"delta must lie in {interval}, got {delta!r}")
    return number


def _check_confidence(confidence) -> float:
    """Confidence in (0, 1); returns α = 1 − confidence."""
    if isinstance(confidence, bool):
        raise DPAuditError(f"confidence must be a number, got {confidence!r}")
    return 1.0 - check_probability("confidence", confidence)


def _check_alpha(alpha) -> float:
    if isinstance(alpha, bool):
        raise DPAuditError(f"alpha must be a number, got {alpha!r}")
    return check_probability("alpha", alpha)


def _check_seed(seed) -> int:
    if isinstance(seed, np.integer):
        seed = int(seed)
    return check_positive_int("seed", seed, allow_zero=True)


def _check_counts(k, n, *, k_name: str = "k", n_name: str = "n") -> tuple[np.ndarray, np.ndarray]:
    """Integer arrays (or scalars) with n ≥ 1 and 0 ≤ k ≤ n, broadcast together."""
    arrays = []
    for name, value in ((k_name, k), (n_name, n)):
        try:
            array = np.asarray(value)
        except Exception:  # pragma: no cover - np.asarray accepts nearly anything
            raise DPAuditError(f"{name} must be an integer count, got {value!r}") from None
        if array.dtype == bool or array.dtype.kind not in "iuf" or array.size == 0:
            raise DPAuditError(f"{name} must be an integer count (or array of counts), got {value!r}")
        if array.dtype.kind == "f" and (not np.all(np.isfinite(array)) or np.any(array != np.round(array))):
            raise DPAuditError(f"{name} must be an integer count (or array of counts), got {value!r}")
        arrays.append(array.astype(np.int64))
    k_arr, n_arr = arrays
    try:
        k_arr, n_arr = np.broadcast_arrays(k_arr, n_arr)
    except ValueError:
        raise DPAuditError(f"{k_name} {k_arr.shape} and {n_name} {n_arr.shape} do not broadcast") from None
    if np.any(n_arr < 1):
        raise DPAuditError(f"{n_name} must be ≥ 1, got {n!r}")
    if np.any(k_arr < 0) or np.any(k_arr > n_arr):
        raise DPAuditError(f"{k_name} must lie in [0, {n_name}], got {k_name}={k!r}, {n_name}={n!r}")
    return k_arr, n_arr


def _check_count(name: str, value, *, allow_zero: bool) -> int:
    if isinstance(value, np.integer):
        value = int(value)
    return check_positive_int(name, value, allow_zero=allow_zero)


# ----------------------------------------------------------------------------------------------
# Vectorised cores (no checks)
# ----------------------------------------------------------------------------------------------


def _cp_upper(k, n, alpha):
    """One-sided Clopper–Pearson upper bound u: P[Binom(n, u) ≤ k] = α; u = 1 where k = n."""
    from scipy import special

    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    full = k >= n
    # P[Binom(n, u) ≤ k] = 1 − I_u(k+1, n−k) = betaincc(k+1, n−k, u); invert the upper tail directly
    # so that tiny α (Bonferroni) keeps full relative precision.
    upper = special.betainccinv(k + 1.0, np.where(full, 1.0, n - k), alpha)
    return np.where(full, 1.0, upper)


def _cp_lower(k, n, alpha):
    """One-sided Clopper–Pearson lower bound l: P[Binom(n, l) ≥ k] = α; l = 0 where k = 0."""
    from scipy import special

    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    zero = k <= 0
    # P[Binom(n, l) ≥ k] = I_l(k, n−k+1).
    lower = special.betaincinv(np.where(zero, 1.0, k), n - k + 1.0, alpha)
    return np.where(zero, 0.0, lower)


def _kov_epsilon(fpr, fnr, delta: float) -> np.ndarray:
    """max(0, ln((1−δ−FPR)/FNR), ln((1−δ−FNR)/FPR)), elementwise.

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


@dataclass(frozen=True)
class _Curve:
    """Counts at every distinct threshold (descending, +inf first): scores ≥ t predicted member."""

    thresholds: np.ndarray
    tp: np.ndarray
    fp: np.ndarray
    n_members: int
    n_nonmembers: int

    @property
    def fpr(self) -> np.ndarray:
        return self.fp / self.n_nonmembers

    @property
    def tpr(self) -> np.ndarray:
        return self.tp / self.n_members

    @property
    def fn(self) -> np.ndarray:
        return self.n_members - self.tp


def _curve(members: np.ndarray, nonmembers: np.ndarray) -> _Curve:
    """All distinct thresholds and their TP/FP counts, by sorting (ties handled by ≥)."""
    distinct = np.unique(np.concatenate([members, nonmembers]))[::-1]
    thresholds = np.concatenate([[np.inf], distinct])
    tp = members.size - np.searchsorted(np.sort(members), thresholds, side="left")
    fp = nonmembers.size - np.searchsorted(np.sort(nonmembers), thresholds, side="left")
    return _Curve(thresholds, tp.astype(np.int64), fp.astype(np.int64), int(members.size), int(nonmembers.size))


def _auc(curve: _Curve) -> float:
    """Trapezoidal area in exact integer arithmetic: a tie block contributes half its rectangle."""
    dfp = np.diff(curve.fp)
    tp_sum = curve.tp[1:] + curve.tp[:-1]
    twice_area = int(np.dot(dfp.astype(object), tp_sum.astype(object)))  # exact, no overflow
    return twice_area / (2 * curve.n_members * curve.n_nonmembers)


def _tpr_at(curve: _Curve, fpr_target: float) -> float:
    index = int(np.searchsorted(curve.fpr, fpr_target, side="right")) - 1
    return float(curve.tpr[max(index, 0)])


def _point(curve: _Curve, delta: float) -> float:
    point = float(np.max(_kov_epsilon(curve.fpr, curve.fn / curve.n_members, delta)))
    if np.any((curve.fp == 0) & (curve.fn == 0)):  # perfectly separated, possibly tied: see epsilon_point
        point = max(point, math.log((1.0 - delta) * max(curve.n_members, curve.n_nonmembers)))
    return point


def _side_alphas(alpha: float, selection: str, n_members: int, n_nonmembers: int) -> tuple[float, float]:
    """Per-side significance (for FPR, for FNR) used to certify under ``selection``."""
    if selection in ("split", "gaussian"):
        return alpha / 2, alpha / 2
    # Simultaneous over all thresholds: FP(t) can only be "too small" at N count levels, FN(t) at P.
    return alpha / (2 * n_nonmembers), alpha / (2 * n_members)


def _certify(
    fp: int, nonmembers: int, fn: int, members: int, delta: float, alpha_fp: float, alpha_fn: float
) -> tuple[float, float, float]:
    """(ε lower bound, FPR upper, FNR upper) of one threshold's counts. One code path for all callers,
    so a perfect attack reproduces ``epsilon_ceiling`` bit for bit."""
    fpr_upper = _cp_upper(np.array([fp]), np.array([nonmembers]), alpha_fp)
    fnr_upper = _cp_upper(np.array([fn]), np.array([members]), alpha_fn)
    epsilon = _kov_epsilon(fpr_upper, fnr_upper, delta)
    return float(epsilon[0]), float(fpr_upper[0]), float(fnr_upper[0])


def _bonferroni_band(curve: _Curve, alpha: float) -> tuple[np.ndarray, np.ndarray, float, float]:
    alpha_fp, alpha_fn = _side_alphas(alpha, "bonferroni", curve.n_members, curve.n_nonmembers)
    fpr_upper = _cp_upper(curve.fp, curve.n_nonmembers, alpha_fp)
    fnr_upper = _cp_upper(curve.fn, curve.n_members, alpha_fn)
    return fpr_upper, fnr_upper, alpha_fp, alpha_fn


# ----------------------------------------------------------------------------------------------
# ROC, AUC, TPR at FPR, point estimate
# ----------------------------------------------------------------------------------------------


def roc_curve(member_scores, nonmember_scores) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
    members = _check_scores("member_scores", member_scores)
    nonmembers = _check_scores("nonmember_scores", nonmember_scores)
    curve = _curve(members, nonmembers)
    return curve.fpr, curve.tpr, curve.thresholds.copy()


def auc(member_scores, nonmember_scores) -> float:
    """Area under the ROC curve: P[member score > non-member score] + ½ P[tie] (Mann–Whitney).

    Args:
        member_scores: 1-D finite member scores.
        nonmember_scores: 1-D finite non-member scores.

    Returns:
        AUC in [0, 1], computed exactly from integer counts.

    Raises:
        DPAuditError: empty input or non-finite scores.
    """
    members = _check_scores("member_scores", member_scores)
    nonmembers = _check_scores("nonmember_scores", nonmember_scores)
    return _auc(_curve(members, nonmembers))


def _check_fprs(fprs) -> tuple[float, ...]:
    try:
        values = tuple(float(value) for value in np.atleast_1d(np.asarray(fprs, dtype=float)))
    except (TypeError, ValueError):
        raise DPAuditError(f"fprs must be numbers in [0, 1], got {fprs!r}") from None
    if not values or not all(0 <= value <= 1 for value in values):
        raise DPAuditError(f"fprs must be numbers in [0, 1], got {fprs!r}")
    return values


def tpr_at_fpr(member_scores, nonmember_scores, *, fprs=(0.001, 0.01)) -> dict[float, float]:
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
    members = _check_scores("member_scores", member_scores)
    nonmembers = _check_scores("nonmember_scores", nonmember_scores)
    targets = _check_fprs(fprs)
    curve = _curve(members, nonmembers)
    return {target: _tpr_at(curve, target) for target in targets}


def epsilon_point(member_scores, nonmember_scores, *, delta: float) -> float:
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
    """
    members = _check_scores("member_scores", member_scores)
    nonmembers = _check_scores("nonmember_scores", nonmember_scores)
    delta = _check_delta(delta)
    return _point(_curve(members, nonmembers), delta)


# ----------------------------------------------------------------------------------------------
# Clopper–Pearson and certified lower bounds
# ----------------------------------------------------------------------------------------------


def clopper_pearson_upper(k, n, *, alpha: float):
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
    k_arr, n_arr = _check_counts(k, n)
    alpha = _check_alpha(alpha)
    upper = _cp_upper(k_arr, n_arr, alpha)
    return float(upper) if upper.ndim == 0 else upper


def clopper_pearson_lower(k, n, *, alpha: float):
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
    k_arr, n_arr = _check_counts(k, n)
    alpha = _check_alpha(alpha)
    lower = _cp_lower(k_arr, n_arr, alpha)
    return float(lower) if lower.ndim == 0 else lower


def epsilon_from_counts(
    *, false_positives: int, nonmembers: int, false_negatives: int, members: int, delta: float, alpha: float
) -> float:
    """Lower bound on ε from one threshold fixed in advance (independently of these counts).

    FPR_u and FNR_u are one-sided Clopper–Pearson upper bounds at α/2 each (union bound: both hold
    with probability ≥ 1 − α), and ε_lo = max(0, ln((1−δ−FPR_u)/FNR_u), ln((1−δ−FNR_u)/FPR_u)); it is
    0 when the confidence rectangle reaches the chance line FPR + FNR = 1 − δ. With zero errors and
    δ = 0 this is ln(p/(1−p)), p = (α/2)^(1/n) for n scores per class (the sample-size ceiling).

    Args:
        false_positives: non-members predicted member.
        nonmembers: number of non-member trials N ≥ 1.
        false_negatives: members predicted non-member.
        members: number of member trials P ≥ 1.
        delta: the DP δ in [0, 1).
        alpha: total significance α in (0, 1) (the bound holds with probability ≥ 1 − α).

    Returns:
        ε lower bound in nats, ≥ 0.

    Raises:
        DPAuditError: bad counts, δ outside [0, 1), α outside (0, 1).
    """
    fp, n_non = _check_counts(false_positives, nonmembers, k_name="false_positives", n_name="nonmembers")
    fn, n_mem = _check_counts(false_negatives, members, k_name="false_negatives", n_name="members")
    if fp.ndim or fn.ndim:
        raise DPAuditError("epsilon_from_counts takes scalar counts")
    delta = _check_delta(delta)
    alpha = _check_alpha(alpha)
    return _certify(int(fp), int(n_non), int(fn), int(n_mem), delta, alpha / 2, alpha / 2)[0]


@dataclass(frozen=True)
class EpsilonBound:
    """A certified lower bound on ε and how it was obtained.

    Attributes:
        epsilon: the lower bound on ε (nats), ≥ 0; it holds with probability ≥ ``confidence``.
        threshold: the certified threshold (score ≥ threshold predicts member).
        false_positives: FP count of the threshold on the certifying sample.
        false_negatives: FN count of the threshold on the certifying sample.
        fpr_upper: Clopper–Pearson upper bound on FPR used.
        fnr_upper: Clopper–Pearson upper bound on FNR used.
        n_members: member scores in the certifying sample.
        n_nonmembers: non-member scores in the certifying sample.
        delta: the δ of the bound.
        confidence: 1 − α.
        selection: "split" or "bonferroni".
        method: a one-line description of the method.
    """

    epsilon: float
    threshold: float
    false_positives: int
    false_negatives: int
    fpr_upper: float
    fnr_upper: float
    n_members: int
    n_nonmembers: int
    delta: float
    confidence: float
    selection: str
    method: str

    def __float__(self) -> float:
        return self.epsilon


_METHOD_TEXT = {
    "split": "Clopper-Pearson, threshold chosen on a held-out half",
    "gaussian": "Clopper-Pearson, threshold chosen by Gaussian fits to a held-out fifth",
    "bonferroni": "Clopper-Pearson, simultaneous over all thresholds (Bonferroni over count levels)",
}


def _split_indices(n: int, rng: np.random.Generator, selection: str) -> tuple[np.ndarray, np.ndarray]:
    """(selection part, certifying part) of a random permutation of ``n`` scores."""
    order = rng.permutation(n)
    size = _selection_size(n, selection)
    return order[:size], order[size:]


def _selection_size(n: int, selection: str) -> int:
    """Scores of a class used to choose the threshold: ⌊n/2⌋ ("split") or ⌊n/5⌋, at least 1 ("gaussian")."""
    return n // 2 if selection == "split" else max(1, int(n * GAUSSIAN_SELECTION_FRACTION))


def _split_sizes(n: int, selection: str = "split") -> int:
    """Certifying-sample size for ``n`` scores of a class."""
    return n - _selection_size(n, selection)


def _certify_cut(cut, members, nonmembers, delta, alpha, selection, seed) -> EpsilonBound:
    alpha_fp, alpha_fn = _side_alphas(alpha, selection, 0, 0)
    fp = int(np.count_nonzero(nonmembers >= cut))
    fn = int(np.count_nonzero(members < cut))
    epsilon, fpr_u, fnr_u = _certify(fp, nonmembers.size, fn, members.size, delta, alpha_fp, alpha_fn)
    return EpsilonBound(
        epsilon,
        float(cut),
        fp,
        fn,
        fpr_u,
        fnr_u,
        int(members.size),
        int(nonmembers.size),
        delta,
        1.0 - alpha,
        selection,
        _METHOD_TEXT[selection] + f" (seed {seed})",
    )


def _lower_gaussian(members, nonmembers, delta, alpha, seed) -> EpsilonBound:
    """Fit N(m₁, s₁²) to a fifth of the members and N(m₀, s₀²) to a fifth of the non-members, pick the
    threshold whose bound is largest under the fits with the certifying sizes, certify it on the rest.

    The fits only choose the threshold, so the bound stays valid whatever the score distributions are;
    when they are Gaussian (white-box canaries), the choice is far less noisy than an empirical one
    in the tail, and four fifths of the data certify.
    """
    from scipy import stats

    rng = np.random.default_rng(seed)
    fit_m, cert_m = (members[part] for part in _split_indices(members.size, rng, "gaussian"))
    fit_n, cert_n = (nonmembers[part] for part in _split_indices(nonmembers.size, rng, "gaussian"))
    scale = max(float(np.ptp(np.concatenate([fit_m, fit_n]))), abs(float(fit_m.mean())), 1.0)
    mean_m, mean_n = float(fit_m.mean()), float(fit_n.mean())
    std_m = max(float(fit_m.std()), 1e-9 * scale)
    std_n = max(float(fit_n.std()), 1e-9 * scale)
    low = min(mean_m - 10 * std_m, mean_n - 10 * std_n)
    high = max(mean_m + 10 * std_m, mean_n + 10 * std_n)
    cuts = np.linspace(low, high, 4001)
    alpha_fp, alpha_fn = _side_alphas(alpha, "gaussian", 0, 0)
    expected_fp = np.round(cert_n.size * stats.norm.sf(cuts, loc=mean_n, scale=std_n)).astype(np.int64)
    expected_fn = np.round(cert_m.size * stats.norm.cdf(cuts, loc=mean_m, scale=std_m)).astype(np.int64)
    bound = _kov_epsilon(
        _cp_upper(expected_fp, cert_n.size, alpha_fp), _cp_upper(expected_fn, cert_m.size, alpha_fn), delta
    )
    best = np.flatnonzero(bound == bound.max())
    return _certify_cut(cuts[best[best.size // 2]], cert_m, cert_n, delta, alpha, "gaussian", seed)


def _lower_split(members, nonmembers, delta, alpha, seed) -> EpsilonBound:
    rng = np.random.default_rng(seed)
    sel_m, cert_m = _split_indices(members.size, rng, "split")
    sel_n, cert_n = _split_indices(nonmembers.size, rng, "split")
    selection = _curve(members[sel_m], nonmembers[sel_n])
    alpha_fp, alpha_fn = _side_alphas(alpha, "split", 0, 0)
    bound = _kov_epsilon(
        _cp_upper(selection.fp, selection.n_nonmembers, alpha_fp),
        _cp_upper(selection.fn, selection.n_members, alpha_fn),
        delta,
    )
    youden = selection.tpr - selection.fpr
    best = int(np.lexsort((youden, bound))[-1])  # largest bound; ties → largest TPR − FPR
    upper = selection.thresholds[best]
    lower = selection.thresholds[best + 1] if best + 1 < selection.thresholds.size else -np.inf
    if not np.isfinite(upper) or not np.isfinite(lower):
        cut = upper if not np.isfinite(upper) else lower  # +inf: predict none; −inf: predict all
    else:
        cut = upper / 2 + lower / 2  # middle of the gap with the same selection-half counts
    return _certify_cut(cut, members[cert_m], nonmembers[cert_n], delta, alpha, "split", seed)


#: Selections that hold scores out to choose the threshold, and the bound each computes.
SPLIT_BOUNDS = {"split": _lower_split, "gaussian": _lower_gaussian}


def _lower_bonferroni(curve: _Curve, delta, alpha) -> EpsilonBound:
    fpr_upper, fnr_upper, alpha_fp, alpha_fn = _bonferroni_band(curve, alpha)
    best = int(np.argmax(_kov_epsilon(fpr_upper, fnr_upper, delta)))
    fp = int(curve.fp[best])
    fn = int(curve.fn[best])
    epsilon, fpr_u, fnr_u = _certify(fp, curve.n_nonmembers, fn, curve.n_members, delta, alpha_fp, alpha_fn)
    return EpsilonBound(
        epsilon,
        float(curve.thresholds[best]),
        fp,
        fn,
        fpr_u,
        fnr_u,
        curve.n_members,
        curve.n_nonmembers,
        delta,
        1.0 - alpha,
        "bonferroni",
        _METHOD_TEXT["bonferroni"],
    )


def _check_split_sizes(members: np.ndarray, nonmembers: np.ndarray) -> None:
    if members.size < 2 or nonmembers.size < 2:
        raise DPAuditError(
            "a split selection needs at least 2 member and 2 non-member scores, got "
            f"{members.size} and {nonmembers.size}"
        )


def epsilon_lower_bound(
    member_scores, nonmember_scores, *, delta: float, confidence: float = 0.95, selection: str = "split", seed: int = 0
) -> EpsilonBound:
    """Lower bound on ε that holds with probability ≥ confidence (Kairouz–Oh–Viswanath + Clopper–Pearson).

    For a threshold with counts (FP of N, FN of P) the bound is
    ε_lo = max(0, ln((1−δ−FPR_u)/FNR_u), ln((1−δ−FNR_u)/FPR_u)) with one-sided Clopper–Pearson upper
    bounds FPR_u, FNR_u (union bound over the two sides). Choosing the threshold on the same data
    would invalidate the bound, so ``selection`` says how the choice is paid for:

    * ``"split"``: each class is permuted with ``np.random.default_rng(seed)`` (members first, then
      non-members); the first ⌊n/2⌋ of each permutation form the selection half, the remaining
      ⌈n/2⌉ the certifying half. The threshold maximising the selection half's bound (CP at α/2 per
      side; ties broken by larger TPR − FPR) is placed in the middle of the gap between its selection
      score and the next lower one, then certified once on the certifying half at α/2 per side.
    * ``"gaussian"``: the same kind of split, but only ⌊n/5⌋ of each class (at least one) choose the
      threshold: a normal distribution is fitted to each class there, and the threshold maximising the
      bound the fits predict for the certifying sizes is certified on the remaining four fifths at α/2
      per side. Valid for any scores; it pays off when they are near Gaussian (white-box canaries),
      where an empirical tail choice is noisy.
    * ``"bonferroni"``: all data and all thresholds, with FPR_u at α/(2N) and FNR_u at α/(2P). This
      is a Bonferroni correction over the count levels at which a bound can fail: FP(t) can be
      atypically small at only N levels and FN(t) at only P, whichever (data-dependent) thresholds are
      tried, so the bounds hold simultaneously for every threshold with probability ≥ 1 − α, ties
      included. With distinct scores this is never stricter than α/(2·#thresholds) (#thresholds =
      N + P + 1).

    Args:
        member_scores: 1-D finite member scores (higher = member); one independent trial each.
        nonmember_scores: 1-D finite non-member scores.
        delta: the DP δ in [0, 1).
        confidence: 1 − α, in (0, 1).
        selection: "split", "gaussian" or "bonferroni".
        seed: non-negative integer seed of the split (ignored for "bonferroni").

    Returns:
        An :class:`EpsilonBound`; ``float(bound)`` is ε_lo in nats. It never exceeds
        :func:`epsilon_ceiling` for the same sizes, and equals it when the certified threshold makes no
        error on the certifying sample (always so for perfectly separated scores with "bonferroni";
        with "split", whenever the chosen cut also separates the held-out half, e.g. separated clusters).

    Raises:
        DPAuditError: empty or non-finite scores, δ outside [0, 1), confidence outside (0, 1), unknown
            selection, fewer than 2 scores per class with "split" or "gaussian".
    """
    members = _check_scores("member_scores", member_scores)
    nonmembers = _check_scores("nonmember_scores", nonmember_scores)
    delta = _check_delta(delta)
    alpha = _check_confidence(confidence)
    check_choice("selection", selection, _SELECTIONS)
    seed = _check_seed(seed)
    if selection in SPLIT_BOUNDS:
        _check_split_sizes(members, nonmembers)
        return SPLIT_BOUNDS[selection](members, nonmembers, delta, alpha, seed)
    return _lower_bonferroni(_curve(members, nonmembers), delta, alpha)


def epsilon_ceiling(
    *, n_members: int, n_nonmembers: int, delta: float, confidence: float = 0.95, selection: str = "split"
) -> float:
    """The largest :func:`epsilon_lower_bound` these sample sizes allow, reached by a perfect attack.

    It is the bound for FP = FN = 0 on the certifying sample: for ``"split"`` the held-out halves of
    ⌈n_members/2⌉ and ⌈n_nonmembers/2⌉ scores at α/2 per side (for ``"gaussian"`` the four fifths that
    certify); for ``"bonferroni"`` all scores with
    FPR_u at α/(2·n_nonmembers) and FNR_u at α/(2·n_members) (the correction every threshold, the
    perfect one included, is certified at; it does not depend on how many distinct scores there are).
    Print it next to ε_lo: a bound at the ceiling means the sample size, not the attack, limits it.

    Args:
        n_members: total member scores (as passed to :func:`epsilon_lower_bound`), ≥ 1 (≥ 2 for split).
        n_nonmembers: total non-member scores, ≥ 1 (≥ 2 for split).
        delta: the DP δ in [0, 1).
        confidence: 1 − α, in (0, 1).
        selection: "split", "gaussian" or "bonferroni".

    Returns:
        The ceiling in nats.

    Raises:
        DPAuditError: bad sizes, δ outside [0, 1), confidence outside (0, 1), unknown selection.
    """
    n_mem = _check_count("n_members", n_members, allow_zero=False)
    n_non = _check_count("n_nonmembers", n_nonmembers, allow_zero=False)
    delta = _check_delta(delta)
    alpha = _check_confidence(confidence)
    check_choice("selection", selection, _SELECTIONS)
    if selection != "bonferroni":
        if n_mem < 2 or n_non < 2:
            raise DPAuditError(f"selection={selection!r} needs at least 2 scores per class, got {n_mem} and {n_non}")
        alpha_fp, alpha_fn = _side_alphas(alpha, selection, n_mem, n_non)
        return _certify(
            0, _split_sizes(n_non, selection), 0, _split_sizes(n_mem, selection), delta, alpha_fp, alpha_fn
        )[0]
    alpha_fp, alpha_fn = _side_alphas(alpha, "bonferroni", n_mem, n_non)
    return _certify(0, n_non, 0, n_mem, delta, alpha_fp, alpha_fn)[0]


# ----------------------------------------------------------------------------------------------
# Gaussian differential privacy (Dong, Roth & Su) and the Nasr et al. 2023 estimate
# ----------------------------------------------------------------------------------------------


def _gdp_log_delta(mu: float, epsilon: float) -> float:
    """log δ(ε) of μ-GDP, computed in the log domain (−inf where δ underflows to 0)."""
    from scipy import special

    if mu == 0:
        return -math.inf
    first = float(special.log_ndtr(-epsilon / mu + mu / 2))
    second = epsilon + float(special.log_ndtr(-epsilon / mu - mu / 2))
    if not second < first:
        return -math.inf
    return first + math.log(-math.expm1(second - first))


def gdp_delta(*, mu: float, epsilon: float) -> float:
    """δ(ε) of a μ-GDP mechanism: Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Dong, Roth & Su).

    Computed as exp(log Φ(a)) · (1 − exp(ε + log Φ(b) − log Φ(a))) with ``scipy.special.log_ndtr``, so it
    stays accurate in the far tail.

    Args:
        mu: the GDP parameter μ ≥ 0 (μ = 0 gives δ = 0).
        epsilon: ε ≥ 0 in nats.

    Returns:
        δ in [0, 1).

    Raises:
        DPAuditError: μ or ε negative or not finite.
    """
    mu = check_positive("mu", mu, allow_zero=True)
    epsilon = check_positive("epsilon", epsilon, allow_zero=True)
    return math.exp(_gdp_log_delta(mu, epsilon))


def _gdp_epsilon(mu: float, delta: float) -> float:
    from scipy import optimize

    if mu == 0 or delta >= math.exp(_gdp_log_delta(mu, 0.0)):
        return 0.0
    target = math.log(delta)
    high = 1.0
    while _gdp_log_delta(mu, high) > target:
        high *= 2
        if high > 1e12:  # pragma: no cover - needs μ ~ 1e6
            return math.inf
    return float(
        optimize.brentq(
            lambda eps: _gdp_log_delta(mu, eps) - target,
            0.0,
            high,
            xtol=1e-12,
            rtol=4 * np.finfo(float).eps,
            maxiter=500,
        )
    )


def gdp_epsilon(*, mu: float, delta: float) -> float:
    """The ε at which a μ-GDP mechanism is (ε, δ)-DP: the root of :func:`gdp_delta` (ε) = δ.

    Args:
        mu: the GDP parameter μ ≥ 0.
        delta: δ in (0, 1) (δ = 0 is excluded: μ-GDP with μ > 0 is (ε, 0)-DP for no finite ε).

    Returns:
        ε ≥ 0 in nats; 0 when μ = 0 or δ ≥ gdp_delta(μ, 0) = 2Φ(μ/2) − 1.

    Raises:
        DPAuditError: μ negative or not finite, δ outside (0, 1).
    """
    mu = check_positive("mu", mu, allow_zero=True)
    delta = _check_delta(delta, allow_zero=False)
    return _gdp_epsilon(mu, delta)


@dataclass(frozen=True)
class GDPEstimate:
    """The Gaussian-DP ε estimate of Nasr et al. (2023); an estimate, not a bound.

    Attributes:
        epsilon: gdp_epsilon(μ̂, δ) in nats.
        mu: μ̂ = max_t Φ⁻¹(1 − FPR_u) − Φ⁻¹(FNR_u), clamped at 0.
        threshold: the maximising threshold (score ≥ threshold predicts member).
        fpr_upper: FPR upper bound at that threshold.
        fnr_upper: FNR upper bound at that threshold.
        n_members: member scores used.
        n_nonmembers: non-member scores used.
        delta: δ of the conversion.
        confidence: 1 − α of the Clopper–Pearson band.
        method: a one-line description.
    """

    epsilon: float
    mu: float
    threshold: float
    fpr_upper: float
    fnr_upper: float
    n_members: int
    n_nonmembers: int
    delta: float
    confidence: float
    method: str

    def __float__(self) -> float:
        return self.epsilon


_GDP_TEXT = (
    "Gaussian-DP estimate (Nasr et al. 2023): mu from simultaneous Clopper-Pearson bounds over all "
    "thresholds, converted to epsilon at delta; assumes a Gaussian trade-off curve; not a bound"
)


def _gdp(curve: _Curve, delta: float, alpha: float, band=None) -> GDPEstimate:
    from scipy import special

    fpr_upper, fnr_upper = band if band is not None else _bonferroni_band(curve, alpha)[:2]
    # Φ⁻¹(1 − x) = −Φ⁻¹(x); upper bounds are > 0, so no NaN (a bound of 1 gives −inf).
    mus = -special.ndtri(fpr_upper) - special.ndtri(fnr_upper)
    best = int(np.argmax(mus))
    mu = max(0.0, float(mus[best]))
    return GDPEstimate(
        _gdp_epsilon(mu, delta),
        mu,
        float(curve.thresholds[best]),
        float(fpr_upper[best]),
        float(fnr_upper[best]),
        curve.n_members,
        curve.n_nonmembers,
        delta,
        1.0 - alpha,
        _GDP_TEXT,
    )


def epsilon_gdp(member_scores, nonmember_scores, *, delta: float, confidence: float = 0.95) -> GDPEstimate:
    """Gaussian-DP ε estimate of Nasr et al. (2023), "Tight auditing of differentially private ML".

    At every threshold, FPR_u and FNR_u are Clopper–Pearson upper bounds from the same simultaneous
    band as ``epsilon_lower_bound(selection="bonferroni")`` (α/(2N) and α/(2P) per side, valid over all
    thresholds at once); μ̂ = max_t Φ⁻¹(1 − FPR_u) − Φ⁻¹(FNR_u), clamped at 0, and ε = gdp_epsilon(μ̂, δ).
    The result is an *estimate*: it assumes the attack's trade-off curve is Gaussian (true for a
    Gaussian mechanism audited with an optimal white-box canary), and is no assumption-free bound.

    Args:
        member_scores: 1-D finite member scores.
        nonmember_scores: 1-D finite non-member scores.
        delta: δ in (0, 1) for the conversion.
        confidence: 1 − α of the Clopper–Pearson band, in (0, 1).

    Returns:
        A :class:`GDPEstimate`; ``float(estimate)`` is ε in nats.

    Raises:
        DPAuditError: empty or non-finite scores, δ outside (0, 1), confidence outside (0, 1).
    """
    members = _check_scores("member_scores", member_scores)
    nonmembers = _check_scores("nonmember_scores", nonmember_scores)
    delta = _check_delta(delta, allow_zero=False)
    alpha = _check_confidence(confidence)
    return _gdp(_curve(members, nonmembers), delta, alpha)


# ----------------------------------------------------------------------------------------------
# One training run (Steinke, Nasr & Jagielski 2023)
# ----------------------------------------------------------------------------------------------


def _check_one_run_counts(guesses, correct, canaries) -> tuple[int, int, int]:
    m = _check_count("canaries", canaries, allow_zero=False)
    r = _check_count("guesses", guesses, allow_zero=False)
    v = _check_count("correct", correct, allow_zero=True)
    if r > m:
        raise DPAuditError(f"guesses ({r}) cannot exceed canaries ({m})")
    if v > r:
        raise DPAuditError(f"correct ({v}) cannot exceed guesses ({r})")
    return r, v, m


def _one_run_p(epsilon: float, delta: float, r: int, v: int, m: int) -> float:
    from scipy import special, stats

    if v == 0:
        return 1.0
    q = float(special.expit(epsilon))  # e^ε / (1 + e^ε)
    beta = float(stats.binom.sf(v - 1, r, q))  # P[Binom(r, q) ≥ v]
    if delta == 0:
        return min(1.0, beta)
    pmf = stats.binom.pmf(np.arange(v - 1, -1, -1), r, q)  # k = v−1, v−2, …, 0
    alpha_star = float(np.max(np.cumsum(pmf) / np.arange(1, v + 1)))  # max_i P[v > B ≥ v−i] / i
    return min(1.0, beta + alpha_star * delta * 2 * m)


def one_run_p_value(*, epsilon: float, delta: float, guesses: int, correct: int, canaries: int) -> float:
    """p-value of the null "the training run is (ε, δ)-DP" from a one-run audit (Steinke et al. 2023).

    With q = e^ε/(1+e^ε), β = P[Binom(r, q) ≥ v], α* = max_{i=1..v} P[v > Binom(r, q) ≥ v − i]/i:
    p = min(1, β + α*·δ·2m), for m canaries (each included independently with probability ½), r
    guesses and v correct guesses.

    Args:
        epsilon: ε ≥ 0 of the null hypothesis, in nats.
        delta: δ in [0, 1).
        guesses: r ≥ 1 guesses made (abstentions excluded).
        correct: v correct guesses, 0 ≤ v ≤ r.
        canaries: m ≥ r canaries.

    Returns:
        p in (0, 1].

    Raises:
        DPAuditError: bad counts, ε negative or not finite, δ outside [0, 1).
    """
    epsilon = check_positive("epsilon", epsilon, allow_zero=True)
    delta = _check_delta(delta)
    r, v, m = _check_one_run_counts(guesses, correct, canaries)
    return _one_run_p(epsilon, delta, r, v, m)


def _epsilon_one_run(r: int, v: int, m: int, delta: float, alpha: float) -> float:
    from scipy import optimize

    def excess(eps: float) -> float:
        return _one_run_p(eps, delta, r, v, m) - alpha

    if excess(0.0) >= 0:
        return 0.0
    high = 1.0
    while excess(high) < 0:
        high *= 2
        if high > 1e4:  # pragma: no cover - would need astronomically many guesses
            return math.inf
    return float(optimize.brentq(excess, 0.0, high, xtol=1e-10, maxiter=500))


def epsilon_one_run(*, guesses: int, correct: int, canaries: int, delta: float, confidence: float = 0.95) -> float:
    """Lower bound on ε from one training run: sup{ε : one_run_p_value(ε) < 1 − confidence}.

    Valid when the guesses were fixed without looking at which canaries were included (for instance a
    number of top-scored canaries decided in advance); found by root-finding (brentq) on p(ε) = α.

    Args:
        guesses: r ≥ 1 guesses made.
        correct: v correct guesses, 0 ≤ v ≤ r.
        canaries: m ≥ r canaries, each included independently with probability ½.
        delta: δ in [0, 1).
        confidence: 1 − α in (0, 1).

    Returns:
        ε lower bound in nats (0 when even ε = 0 is not rejected).

    Raises:
        DPAuditError: bad counts, δ outside [0, 1), confidence outside (0, 1).
    """
    delta = _check_delta(delta)
    alpha = _check_confidence(confidence)
    r, v, m = _check_one_run_counts(guesses, correct, canaries)
    return _epsilon_one_run(r, v, m, delta, alpha)


@dataclass(frozen=True)
class OneRunBound:
    """A one-run ε lower bound from scores: ``epsilon`` (nats) and the counts it came from."""

    epsilon: float
    guesses: int
    correct: int
    canaries: int
    delta: float
    confidence: float

    def __float__(self) -> float:
        return self.epsilon


def epsilon_one_run_scores(scores, is_member, *, delta: float, confidence: float = 0.95, guesses: int) -> OneRunBound:
    """One-run ε lower bound guessing IN for the ``guesses`` highest scores (k₋ = 0, no OUT guesses).

    ``guesses`` must be fixed by the caller before looking at these scores and labels (e.g. from a
    pilot run or a rule of thumb): choosing it to maximise the result on the same data invalidates the
    bound. Ties at the cut are resolved against the auditor (non-members first), so the count of
    correct guesses is the smallest any tie-breaking could give and the bound stays valid.

    Args:
        scores: 1-D finite scores of all m canaries (higher = member).
        is_member: booleans of the same shape, True where the canary was included.
        delta: δ in [0, 1).
        confidence: 1 − α in (0, 1).
        guesses: r, the number of top-scored canaries guessed IN, 1 ≤ r ≤ m.

    Returns:
        A :class:`OneRunBound`; ``float(bound)`` is ε_lo in nats.

    Raises:
        DPAuditError: empty or non-finite scores, labels not boolean or of another shape, bad
            ``guesses``, δ outside [0, 1), confidence outside (0, 1).
    """
    values = _check_scores("scores", scores)
    labels = np.asarray(is_member)
    if labels.shape != values.shape:
        raise DPAuditError(f"is_member {labels.shape} and scores {values.shape} differ in shape")
    if labels.dtype != bool:
        if labels.dtype.kind not in "iuf" or not np.all((labels == 0) | (labels == 1)):
            raise DPAuditError("is_member must hold booleans (or 0/1)")
        labels = labels.astype(bool)
    delta = _check_delta(delta)
    alpha = _check_confidence(confidence)
    r, _, m = _check_one_run_counts(guesses, 0, values.size)
    order = np.lexsort((labels, -values))  # by score descending, non-members first among ties
    v = int(np.count_nonzero(labels[order[:r]]))
    return OneRunBound(_epsilon_one_run(r, v, m, delta, alpha), r, v, m, delta, 1.0 - alpha)


__all__ = [
    "EpsilonBound",
    "GDPEstimate",
    "OneRunBound",
    "auc",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "empirical_epsilon",
    "epsilon_ceiling",
    "epsilon_from_counts",
    "epsilon_gdp",
    "epsilon_lower_bound",
    "epsilon_one_run",
    "epsilon_one_run_scores",
    "epsilon_point",
    "error_rates",
    "gdp_delta",
    "gdp_epsilon",
    "one_run_p_value",
    "roc_curve",
    "tpr_at_fpr",
]
