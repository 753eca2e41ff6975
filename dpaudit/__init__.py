"""dpaudit: audit and reproduce differentially private training.

``import dpaudit`` is light: torch and the other heavy dependencies load only when a submodule that
needs them is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dpaudit._validation import DPAuditError
from dpaudit.estimate import empirical_epsilon


def _installed_version() -> str:
    """The version of the installed distribution (pyproject.toml's ``version``, the one source); "0+unknown" in a
    source tree that was never installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dpaudit")
    except PackageNotFoundError:
        return "0+unknown"


__version__ = _installed_version()

_SUBMODULES = ("attacks", "audit", "blackbox", "data", "estimate", "models", "optim", "theory", "train")
_AUDIT_FUNCTIONS = ("audit_scores", "audit_model", "audit_whole_run", "validation_flag")

__all__ = ["DPAuditError", "empirical_epsilon", "__version__", *_AUDIT_FUNCTIONS, *_SUBMODULES]

if TYPE_CHECKING:  # pragma: no cover
    from dpaudit import attacks, audit, blackbox, data, models, optim, theory, train  # noqa: F401
    from dpaudit.audit import audit_model, audit_scores, audit_whole_run, validation_flag  # noqa: F401


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"dpaudit.{name}")
    if name in _AUDIT_FUNCTIONS:
        return getattr(importlib.import_module("dpaudit.audit"), name)
    raise AttributeError(f"module 'dpaudit' has no attribute {name!r}")
