"""Argument checks shared by public functions: one-line errors before any expensive work.

The general checks (numbers, integers, probabilities, choices) come first, then the checks of the
auditing functions (:mod:`dpaudit.estimate`, :mod:`dpaudit.audit`, the ``audit`` commands): scores,
δ, confidence, α, seeds and counts. Every check raises :class:`DPAuditError` with a one-line message
that names the argument; the messages are part of the interface (tests and docs quote them).
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt


class DPAuditError(ValueError):
    """A bad argument or input, reported as one line naming the cause."""


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60


def brief(value: object) -> str:
    """``repr(value)`` shortened to one line of at most about 60 characters, for error messages."""
    return " ".join(_REPR.repr(value).split())


def check_number(name: str, value: float) -> float:
    """Return ``value`` as a float (NaN and ±inf included), refusing booleans, strings and anything that is
    not one real number."""
    if isinstance(value, (bool, np.bool_, str, bytes)) or (isinstance(value, np.ndarray) and value.ndim):
        raise DPAuditError(f"{name} must be a number, got {brief(value)}")
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        raise DPAuditError(f"{name} must be a number, got {brief(value)}") from None


def real_array(value: npt.ArrayLike, *, refused: str) -> npt.NDArray[np.float64]:
    """``value`` (a number or an array-like of them) as a float array, or a ``DPAuditError`` saying ``refused``
    and what it got: booleans, text, None, dicts and anything numpy does not read as integers or floats are
    refused. (The message is built only on a refusal: a large array's repr costs milliseconds.)"""
    if value is None or isinstance(value, (bool, np.bool_, str, bytes, dict)):
        raise DPAuditError(f"{refused}, got {brief(value)}")
    try:
        array = np.asarray(value)
        if array.dtype.kind in "iuf":
            return array.astype(float)
    except (TypeError, ValueError, OverflowError, RuntimeError):
        pass
    raise DPAuditError(f"{refused}, got {brief(value)}") from None


def check_positive(name: str, value: float, *, allow_zero: bool = False) -> float:
    """Return ``value`` as float if it is finite and > 0 (or ≥ 0 with ``allow_zero``)."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise DPAuditError(f"{name} must be a number, got {brief(value)}") from None
    if not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
        bound = "≥ 0" if allow_zero else "> 0"
        raise DPAuditError(f"{name} must be finite and {bound}, got {brief(value)}")
    return number


def check_positive_int(name: str, value: float, *, allow_zero: bool = False) -> int:
    """Return ``value`` as an ``int`` if it is an integer > 0 (or ≥ 0 with ``allow_zero``); an integral float is
    accepted."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int,))
        and not (isinstance(value, float) and value.is_integer())
    ):
        raise DPAuditError(f"{name} must be an integer, got {brief(value)}")
    number = int(value)
    if number < 0 or (number == 0 and not allow_zero):
        bound = "≥ 0" if allow_zero else "> 0"
        raise DPAuditError(f"{name} must be an integer {bound}, got {brief(value)}")
    return number


def check_probability(name: str, value: float, *, open_interval: bool = True) -> float:
    """Return ``value`` if it lies in (0, 1) (or [0, 1] with ``open_interval=False``)."""
    number = check_positive(name, value, allow_zero=True)
    if (open_interval and not 0 < number < 1) or number > 1:
        interval = "(0, 1)" if open_interval else "[0, 1]"
        raise DPAuditError(f"{name} must lie in {interval}, got {brief(value)}")
    return number


def check_choice(name: str, value: str, choices: Iterable[str]) -> str:
    """Return ``value`` if it is one of ``choices``."""
    options = sorted(choices)
    if not isinstance(value, str) or value not in options:
        raise DPAuditError(f"unknown {name} {brief(value)}; choose from: {', '.join(options)}")
    return value


def check_ratio(name: str, value: float) -> float:
    """Return ``value`` if it is a number in (0, 1] (booleans refused)."""
    if isinstance(value, (bool, np.bool_)) or not (
        isinstance(value, (int, float, np.integer, np.floating)) and 0 < value <= 1
    ):
        raise DPAuditError(f"{name} must be in (0, 1]; got {brief(value)}")
    return value


# ----------------------------------------------------------------------------------------------
# Checks of the auditing functions (dpaudit.estimate, dpaudit.audit, the audit commands)
# ----------------------------------------------------------------------------------------------


def _tensor_to_numpy(name: str, values: Any) -> Any:
    """A torch tensor as a float64 numpy array (detached, on the CPU), without importing torch; anything else as
    it is. Complex tensors are refused."""
    if not (type(values).__module__ or "").startswith("torch") or not hasattr(values, "detach"):
        return values
    if values.is_complex():
        raise DPAuditError(f"{name} must be real numbers, got a complex tensor")
    return values.detach().cpu().double().numpy()


def check_scores(name: str, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Return ``values`` as a non-empty 1-D float array of finite numbers (membership scores).

    Accepts sequences, numpy arrays and torch tensors (detached and copied to the CPU, whatever their device and
    ``requires_grad``); refuses strings, complex numbers, dicts and anything not one-dimensional.
    """
    if isinstance(values, (str, bytes, dict)):
        raise DPAuditError(f"{name} must be a 1-D array of numbers, got {type(values).__name__} {brief(values)}")
    try:
        array = np.asarray(_tensor_to_numpy(name, values))
        if array.dtype.kind not in "biufO":
            kind = {"U": "text", "S": "bytes", "c": "complex numbers"}.get(array.dtype.kind, f"{array.dtype} values")
            raise DPAuditError(f"{name} must be a 1-D array of numbers, got {kind}: {brief(values)}")
        if array.dtype.kind == "O" and any(item is None for item in array.ravel()):
            raise DPAuditError(f"{name} must be a 1-D array of numbers, got None among them: {brief(values)}")
        array = array.astype(float, copy=False)
    except DPAuditError:
        raise
    except (TypeError, ValueError, OverflowError, RuntimeError):
        raise DPAuditError(f"{name} must be a 1-D array of numbers, got {brief(values)}") from None
    if array.ndim != 1:
        raise DPAuditError(f"{name} must be a 1-D array, got shape {array.shape}")
    if array.size == 0:
        raise DPAuditError(f"{name} is empty; an audit needs at least one score per class")
    bad = int(np.count_nonzero(~np.isfinite(array)))
    if bad:
        raise DPAuditError(f"{name} has {bad} non-finite value(s) (NaN or ±inf); scores must be finite")
    return array


def check_delta(delta: float, *, allow_zero: bool = True) -> float:
    """Return the DP δ as a float if it lies in [0, 1), or in (0, 1) with ``allow_zero=False``.

    Booleans are refused ("delta must be a number"); a δ outside the interval reads
    "delta must lie in [0, 1)" (or "(0, 1)"), a negative or non-finite one "delta must be finite and ≥ 0".
    """
    if isinstance(delta, bool):
        raise DPAuditError(f"delta must be a number, got {brief(delta)}")
    number = check_positive("delta", delta, allow_zero=True)
    if number >= 1 or (number == 0 and not allow_zero):
        interval = "[0, 1)" if allow_zero else "(0, 1)"
        raise DPAuditError(f"delta must lie in {interval}, got {brief(delta)}")
    return number


def check_confidence(confidence: float) -> float:
    """Check a confidence level 1 − α in (0, 1) and return the significance α = 1 − confidence."""
    if isinstance(confidence, bool):
        raise DPAuditError(f"confidence must be a number, got {brief(confidence)}")
    return 1.0 - check_probability("confidence", confidence)


def check_alpha(alpha: float) -> float:
    """Return a significance level α in (0, 1) as a float (booleans refused)."""
    if isinstance(alpha, bool):
        raise DPAuditError(f"alpha must be a number, got {brief(alpha)}")
    return check_probability("alpha", alpha)


def check_seed(seed: int | np.integer[Any]) -> int:
    """Return a random seed as a non-negative ``int`` (numpy integers accepted)."""
    if isinstance(seed, np.integer):
        seed = int(seed)
    return check_positive_int("seed", seed, allow_zero=True)


def check_count(name: str, value: int | np.integer[Any], *, allow_zero: bool) -> int:
    """Return a count as an ``int`` > 0 (or ≥ 0 with ``allow_zero``); numpy integers accepted."""
    if isinstance(value, np.integer):
        value = int(value)
    return check_positive_int(name, value, allow_zero=allow_zero)


def check_counts(
    k: npt.ArrayLike, n: npt.ArrayLike, *, k_name: str = "k", n_name: str = "n"
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Return binomial counts as int64 arrays broadcast together, with n ≥ 1 and 0 ≤ k ≤ n.

    ``k`` and ``n`` are integers or arrays of integers (integral floats accepted, booleans refused);
    ``k_name`` and ``n_name`` name them in the messages.
    """
    arrays = []
    for name, value in ((k_name, k), (n_name, n)):
        try:
            array = np.asarray(value)
        except Exception:  # pragma: no cover - np.asarray accepts nearly anything
            raise DPAuditError(f"{name} must be an integer count, got {brief(value)}") from None
        if array.dtype == bool or array.dtype.kind not in "iuf" or array.size == 0:
            raise DPAuditError(f"{name} must be an integer count (or array of counts), got {brief(value)}")
        if array.dtype.kind == "f" and (not np.all(np.isfinite(array)) or np.any(array != np.round(array))):
            raise DPAuditError(f"{name} must be an integer count (or array of counts), got {brief(value)}")
        arrays.append(array.astype(np.int64))
    k_arr, n_arr = arrays
    try:
        k_arr, n_arr = np.broadcast_arrays(k_arr, n_arr)
    except ValueError:
        raise DPAuditError(f"{k_name} {k_arr.shape} and {n_name} {n_arr.shape} do not broadcast") from None
    if np.any(n_arr < 1):
        raise DPAuditError(f"{n_name} must be ≥ 1, got {brief(n)}")
    if np.any(k_arr < 0) or np.any(k_arr > n_arr):
        raise DPAuditError(f"{k_name} must lie in [0, {n_name}], got {k_name}={brief(k)}, {n_name}={brief(n)}")
    return k_arr, n_arr


def check_split_sizes(members: npt.NDArray[np.float64], nonmembers: npt.NDArray[np.float64]) -> None:
    """Refuse fewer than 2 member or 2 non-member scores, which a held-out ("split"/"gaussian")
    threshold selection cannot divide."""
    if members.size < 2 or nonmembers.size < 2:
        raise DPAuditError(
            "a split selection needs at least 2 member and 2 non-member scores, got "
            f"{members.size} and {nonmembers.size}"
        )
