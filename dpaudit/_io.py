"""Atomic file writes: a reader never sees a half-written result."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from dpaudit._atomic import replace_file
from dpaudit.integrity import record_write, verify_file


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename
    (:func:`atomic_write_stream`)."""
    return atomic_write_stream(path, lambda stream: stream.write(data))


def atomic_write_stream(path: str | os.PathLike, write: Callable[[BinaryIO], Any]) -> Path:
    """Have ``write(stream)`` write ``path``'s contents into a temporary file in the same folder, then rename it
    (for large outputs that need not be held in memory as bytes first, e.g. ``np.savez(stream, ...)``).

    The file gets the permissions of a file the user creates (0666 less the umask), and, inside a run folder, its
    SHA-256 goes into the run's manifest before the rename (:func:`dpaudit.integrity.record_write`): a killed write
    leaves no file that its run's manifest does not vouch for.
    """
    return replace_file(path, write, before_rename=lambda target, temp: record_write(target, contents=temp))


def write_json(path: str | os.PathLike, payload: Any) -> Path:
    """Write ``payload`` as indented JSON, atomically."""
    text = json.dumps(payload, indent=2, sort_keys=False, allow_nan=True, default=_to_builtin)
    return atomic_write_bytes(path, (text + "\n").encode("utf-8"))


def read_json(path: str | os.PathLike) -> Any:
    """Parse a JSON file (a missing one raises FileNotFoundError); a garbled one, or a run's file that is not the
    one dpaudit wrote (:func:`dpaudit.integrity.verify_file`), is a one-line ``DPAuditError``."""
    from dpaudit._validation import DPAuditError

    verify_file(path)
    with open(path, encoding="utf-8") as stream:
        try:
            return json.load(stream)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise DPAuditError(
                f"{path}: not valid JSON: {' '.join(str(error).split())}; delete it and rerun the step that writes it"
            ) from None


def _to_builtin(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"cannot serialise {type(value).__name__} to JSON")
