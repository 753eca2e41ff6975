"""The one way dpaudit replaces a file: a temporary file in the same folder, flushed to disk, then renamed.

:mod:`dpaudit._io` builds its writers on it (and records a run's files, :mod:`dpaudit.integrity`); the run
manifest itself is written with it directly.
"""

from __future__ import annotations

import functools
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

#: the name of a temporary file of ``replace_file``: ``.NAME.XXXXXXXX.tmp`` beside NAME (a killed write leaves it)
TEMPORARY = re.compile(r"\.(?P<name>.+)\.[^.]+\.tmp")


def replace_file(
    path: str | os.PathLike,
    write: Callable[[BinaryIO], Any],
    *,
    before_rename: Callable[[Path, str], Any] | None = None,
) -> Path:
    """Have ``write(stream)`` write ``path``'s contents into a temporary file in the same folder, then rename it.

    The file gets the permissions of a file the user creates (0666 less the umask). ``before_rename(path,
    temporary name)`` runs once the contents are on disk, before the rename. An OS error without a file name (a full
    disk) gains ``path``'s.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            write(stream)
            stream.flush()
            os.fchmod(stream.fileno(), 0o666 & ~_umask())
            os.fsync(stream.fileno())
        if before_rename is not None:
            before_rename(target, temp_name)
        os.replace(temp_name, target)
    except BaseException as error:
        Path(temp_name).unlink(missing_ok=True)
        if isinstance(error, OSError) and error.filename is None:  # a full disk: say which write it stopped
            error.filename = str(target)
        raise
    return target


@functools.cache
def _umask() -> int:
    """The process's umask, read once (reading it means setting it: set it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
