"""Attacks and optimizers from outside dpaudit: the plugin modules that the ``dpaudit`` command imports.

A plugin is a Python module that registers attacks (:func:`dpaudit.attacks.register_attack`) and/or optimizers
(the :func:`dpaudit.optim.register` class decorator) when it is imported. The ``dpaudit`` command imports, before it
reads its arguments (so that ``--attack`` and ``--optimizer`` accept the new names and ``dpaudit list`` lists them):

- every entry point of the group ``dpaudit.plugins`` (:data:`ENTRY_POINT_GROUP`) of the installed distributions,
  which makes the names reach every ``dpaudit`` command, the pipeline's included. A package declares one in its
  ``pyproject.toml``::

      [project.entry-points."dpaudit.plugins"]
      my_attacks = "my_package.attacks"

- each ``--plugin MODULE`` given before the command: a module name importable from ``sys.path``, or the path of a
  ``.py`` file, e.g. ``dpaudit --plugin my_attack.py audit --run RUN --attack my-attack``.

``import dpaudit`` loads no plugin. In Python, import the plugin module yourself (or call :func:`load_plugins`).
Importing dpaudit.plugins loads no torch.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

from dpaudit._validation import DPAuditError

__all__ = ["ENTRY_POINT_GROUP", "load_plugins"]

#: The entry-point group whose entries the ``dpaudit`` command imports: each names a module (or an object in one,
#: ``module:attribute``) that registers attacks or optimizers when imported.
ENTRY_POINT_GROUP = "dpaudit.plugins"

_FILE_MODULE_PREFIX = "dpaudit_plugin_"
_loaded: set[str] = set()  # what load_plugins imported already: entry points as "group:name=value", files, modules


def load_plugins(*, modules: Sequence[str] = (), entry_points: bool = True) -> list[str]:
    """Import plugin modules, each once per process, so that what they register joins dpaudit's registries.

    Args:
        modules: module names (importable from ``sys.path``) or paths of ``.py`` files, imported in this order
            after the entry points. A file is imported as the module ``dpaudit_plugin_<its stem>``.
        entry_points: also import the entry points of the group :data:`ENTRY_POINT_GROUP` of every installed
            distribution (first, in the order ``importlib.metadata`` lists them).

    Returns:
        What this call imported (entry points as ``name = value``, then the modules as given); those imported by
        an earlier call are skipped.

    Raises:
        DPAuditError: one line naming the plugin, for a module or file that cannot be found, or one whose import
            failed (with the error's type, message and the plugin's line where it was raised): a name registered
            twice, a bug in the plugin.
    """
    imported = []
    if entry_points:
        from importlib.metadata import entry_points as installed

        for point in installed(group=ENTRY_POINT_GROUP):
            key = f"{point.name} = {point.value}"
            if key in _loaded:
                continue
            distribution = getattr(point, "dist", None)
            owner = f" of {distribution.name}" if distribution is not None else ""
            _guarded(
                f"plugin {point.name!r} (entry point {point.value!r}{owner})",
                lambda: (_import_module(point.module), point.load()),
            )
            _loaded.add(key)
            imported.append(key)
    for module in modules:
        if not isinstance(module, str) or not module.strip():
            raise DPAuditError(f"--plugin needs a module name or a .py file, got {module!r}")
        key = str(Path(module).resolve()) if module.endswith(".py") else module
        if key in _loaded:
            continue
        if module.endswith(".py"):
            _guarded(f"plugin {module!r}", lambda: _import_file(Path(module)))
        else:
            _guarded(f"plugin {module!r}", lambda: _import_module(module))
        _loaded.add(key)
        imported.append(module)
    return imported


def _import_module(name: str) -> ModuleType:
    """Import the module ``name``; a missing module (not a missing import inside it) is a one-line error."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name is not None and (name == error.name or name.startswith(error.name + ".")):
            raise DPAuditError(
                "no such module on sys.path (give a module name that Python can import, or the path of a .py file)"
            ) from None
        raise


def _import_file(path: Path) -> ModuleType:
    """Import the Python file ``path`` as the module ``dpaudit_plugin_<stem>``."""
    if not path.is_file():
        raise DPAuditError("no such file")
    name = _FILE_MODULE_PREFIX + "".join(char if char.isalnum() else "_" for char in path.stem)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # pragma: no cover - a .py path always has a source loader
        raise DPAuditError("not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before it runs: dataclasses and pickling look their module up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _guarded(label: str, load: Callable[[], object]) -> None:
    """Run ``load()``; any failure becomes one line naming the plugin (its traceback stays as the cause)."""
    try:
        load()
    except DPAuditError as error:
        raise DPAuditError(f"{label}: {error}") from error
    except Exception as error:  # noqa: BLE001 - a plugin's bug is named in one line, not taken for dpaudit's
        frames = traceback.extract_tb(error.__traceback__)
        where = f" ({frames[-1].filename}, line {frames[-1].lineno})" if frames else ""
        message = " ".join(str(error).split())
        raise DPAuditError(f"{label} failed to import: {type(error).__name__}: {message}{where}") from error
