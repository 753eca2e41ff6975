"""Atomic file writes: a reader never sees a half-written result."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    return atomic_write_stream(path, lambda stream: stream.write(data))


def atomic_write_stream(path: str | os.PathLike, write: Callable[[BinaryIO], Any]) -> Path:
    """Have ``write(stream)`` write ``path``'s contents into a temporary file in the same folder, then rename it
    (for large outputs that need not be held in memory as bytes first, e.g. ``np.savez(stream, ...)``)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            write(stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp_name, target)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    return target


def remove_partial_writes(folder: str | os.PathLike) -> int:
    """Delete the temporary files of writes a killed process left under ``folder``; returns how many."""
    leftovers = [path for path in Path(folder).rglob(".*.tmp") if path.is_file()] if Path(folder).is_dir() else []
    for path in leftovers:
        path.unlink(missing_ok=True)
    return len(leftovers)


def write_json(path: str | os.PathLike, payload: Any) -> Path:
    """Write ``payload`` as indented JSON, atomically."""
    text = json.dumps(payload, indent=2, sort_keys=False, allow_nan=True, default=_to_builtin)
    return atomic_write_bytes(path, (text + "\n").encode("utf-8"))


def read_json(path: str | os.PathLike) -> Any:
    """Parse a JSON file (a missing one raises FileNotFoundError); a garbled one is a one-line ``DPAuditError``."""
    from dpaudit._validation import DPAuditError

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
