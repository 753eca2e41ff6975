"""Argument checks shared by the closed-form bounds (:mod:`dpaudit.theory.sgm`, :mod:`dpaudit.theory.bounds`).

Parameter names follow the bounds' conventions: ``alpha`` (Rényi order α > 1), ``C`` (clipping norm), ``sigma``
(σ_DP), ``eta`` (step size η), ``D`` (domain diameter), ``L`` (smoothness), ``n`` (dataset size), ``b`` (batch
size), ``m`` (weak-convexity constant, ≥ 0).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from dpaudit._validation import DPAuditError, check_positive, check_positive_int

POSITIVE_FLOATS = ("C", "sigma", "eta", "D", "L")
POSITIVE_INTS = ("n", "b")


def check_order(alpha: float) -> float:
    """Return the Rényi order α as a float if it is finite and > 1 (not a significance level:
    :func:`dpaudit._validation.check_alpha` checks those)."""
    try:
        value = float(alpha)
    except (TypeError, ValueError):
        raise DPAuditError(f"alpha must be a number > 1 (Rényi order), got {alpha!r}") from None
    if not math.isfinite(value) or value <= 1:
        raise DPAuditError(f"alpha must be finite and > 1 (Rényi order), got {alpha!r}")
    return value


def check_params(params: Mapping[str, float]) -> dict[str, float]:
    """Validate known parameters by name; also b ≤ n when both are present."""
    out: dict[str, float] = {}
    for key, value in params.items():
        if key == "alpha":
            out[key] = check_order(value)
        elif key in POSITIVE_FLOATS:
            out[key] = check_positive(key, value)
        elif key in POSITIVE_INTS:
            out[key] = check_positive_int(key, value)
        elif key == "m":
            out[key] = check_positive(key, value, allow_zero=True)
        else:  # pragma: no cover - callers only pass known names
            raise DPAuditError(f"unknown parameter {key!r}")
    if "n" in out and "b" in out and out["b"] > out["n"]:
        raise DPAuditError(f"b must be ≤ n (batch size at most the dataset size), got b={out['b']}, n={out['n']}")
    return out


def as_nonneg_array(name: str, value: npt.ArrayLike, unit: str) -> npt.NDArray[np.float64]:
    """``value`` as a float array, every entry finite and ≥ 0 (``unit`` names what it counts, for the error)."""
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise DPAuditError(f"{name} must be a number or an array of numbers ({unit}), got {value!r}") from None
    bad = ~np.isfinite(arr) | (arr < 0)
    if np.any(bad):
        first = arr[bad].flat[0]
        raise DPAuditError(f"{name} must be finite and ≥ 0 ({unit}), got {float(first)!r}")
    return arr


def check_q(q: float) -> float:
    """Return the sampling probability q if it lies in (0, 1]."""
    value = check_positive("q", q)
    if value > 1:
        raise DPAuditError(f"q must lie in (0, 1] (sampling probability), got {q!r}")
    return value


def shape_like(values: npt.NDArray[np.float64], template: npt.NDArray[np.float64]) -> float | npt.NDArray[np.float64]:
    """A float for a 0-d ``template``, else ``values`` unchanged."""
    return float(values) if template.ndim == 0 else values


def fmt(x: float) -> str:
    """A number as it appears in a violated-condition message."""
    return f"{x:.6g}"
