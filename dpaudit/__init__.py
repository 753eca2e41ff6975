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

_SUBMODULES = ("attacks", "data", "estimate", "models", "optim", "theory", "train")

__all__ = ["DPAuditError", "empirical_epsilon", "__version__", *_SUBMODULES]

if TYPE_CHECKING:  # pragma: no cover
    from dpaudit import attacks, data, models, optim, theory, train  # noqa: F401


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"dpaudit.{name}")
    raise AttributeError(f"module 'dpaudit' has no attribute {name!r}")
