"""Empirical privacy estimates from membership-inference error rates."""

from __future__ import annotations

import warnings

import numpy as np

from dpaudit._validation import DPAuditError


def empirical_epsilon(fpr, fnr, *, delta: float = 1e-5):
    """Empirical ε̂ of an attack from its false-positive and false-negative rates (seed 004 eq. 20).

    ε̂ = max{ log((1 − δ − FPR) / FNR), log((1 − δ − FNR) / FPR) }  (Kairouz, Oh & Viswanath 2015).

    This is the papers' point estimate, not a confidence bound. Edge cases follow the formula
    exactly and are reported, not clipped: a zero rate gives +inf (with a warning), a worse-than-random
    attack gives a negative value.

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
        first = np.log((1 - delta - fpr_arr) / fnr_arr)
        second = np.log((1 - delta - fnr_arr) / fpr_arr)
        result = np.fmax(first, second)
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


__all__ = ["empirical_epsilon", "error_rates"]
