"""dpaudit: audit and reproduce differentially private training.

``import dpaudit`` is light: torch and the other heavy dependencies load only when a submodule that
needs them is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dpaudit._validation import DPAuditError
from dpaudit.estimate import empirical_epsilon

__version__ = "0.1.0"

_SUBMODULES = ("attacks", "audit", "data", "estimate", "models", "optim", "theory", "train")
_AUDIT_FUNCTIONS = ("audit_scores", "audit_model", "audit_whole_run", "validation_flag")

__all__ = ["DPAuditError", "empirical_epsilon", "__version__", *_AUDIT_FUNCTIONS, *_SUBMODULES]

if TYPE_CHECKING:  # pragma: no cover
    from dpaudit import attacks, audit, data, models, optim, theory, train  # noqa: F401
    from dpaudit.audit import audit_model, audit_scores, audit_whole_run, validation_flag  # noqa: F401


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"dpaudit.{name}")
    if name in _AUDIT_FUNCTIONS:
        return getattr(importlib.import_module("dpaudit.audit"), name)
    raise AttributeError(f"module 'dpaudit' has no attribute {name!r}")
