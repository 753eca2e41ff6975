"""Argument checks shared by public functions: one-line errors before any expensive work."""

from __future__ import annotations

import math
from collections.abc import Iterable


class DPAuditError(ValueError):
    """A bad argument or input, reported as one line naming the cause."""


def check_positive(name: str, value: float, *, allow_zero: bool = False) -> float:
    """Return ``value`` as float if it is finite and > 0 (or ≥ 0 with ``allow_zero``)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise DPAuditError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
        bound = "≥ 0" if allow_zero else "> 0"
        raise DPAuditError(f"{name} must be finite and {bound}, got {value!r}")
    return number


def check_positive_int(name: str, value: int, *, allow_zero: bool = False) -> int:
    """Return ``value`` if it is an integer > 0 (or ≥ 0 with ``allow_zero``)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int,))
        and not (isinstance(value, float) and value.is_integer())
    ):
        raise DPAuditError(f"{name} must be an integer, got {value!r}")
    number = int(value)
    if number < 0 or (number == 0 and not allow_zero):
        bound = "≥ 0" if allow_zero else "> 0"
        raise DPAuditError(f"{name} must be an integer {bound}, got {value!r}")
    return number


def check_probability(name: str, value: float, *, open_interval: bool = True) -> float:
    """Return ``value`` if it lies in (0, 1) (or [0, 1] with ``open_interval=False``)."""
    number = check_positive(name, value, allow_zero=True)
    if (open_interval and not 0 < number < 1) or number > 1:
        interval = "(0, 1)" if open_interval else "[0, 1]"
        raise DPAuditError(f"{name} must lie in {interval}, got {value!r}")
    return number


def check_choice(name: str, value: str, choices: Iterable[str]) -> str:
    """Return ``value`` if it is one of ``choices``."""
    options = sorted(choices)
    if value not in options:
        raise DPAuditError(f"unknown {name} {value!r}; choose from: {', '.join(options)}")
    return value


def check_ratio(name: str, value: float) -> float:
    """Return ``value`` if it lies in (0, 1]."""
    if not (isinstance(value, (int, float)) and 0 < value <= 1):
        raise DPAuditError(f"{name} must be in (0, 1]; got {value!r}")
    return value
