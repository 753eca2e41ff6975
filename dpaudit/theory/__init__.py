"""Theoretical privacy bounds (pure numpy; importing this package never imports torch).

Seed 004 (Liang et al., DPSGD-GC / DPSGD-DC): :mod:`dpaudit.theory.seed004`.
"""

from __future__ import annotations

from dpaudit.theory import seed004
from dpaudit.theory.seed004 import *  # noqa: F403 - the public names are seed004.__all__

__all__ = list(seed004.__all__)
