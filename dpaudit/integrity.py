"""A run folder is owned and its files are checked: the run's manifest (importable without torch).

``dpaudit train`` claims its folder before it writes anything (:func:`claim_run_folder`): a new or empty folder,
or one that holds a run of the same configuration (which it resumes). A folder that holds anything else — another
configuration's run, files that are not a run's — is refused, never merged; ``overwrite=True`` first removes the
files of a run there (:func:`remove_run_files`: the files the run names, never a recursive sweep).

The claim writes ``RUN/dpaudit-run.json`` (a name no other tool uses: a folder holding a file of the run's
layout must not be taken for a run because it holds some other ``manifest.json``)::

    {"format": "dpaudit-run/1", "identity": {the validated configuration}, "complete": false,
     "files": {"config.json": "<sha-256>", "target/ledger.json": "<sha-256>", ...}}

Every write through :mod:`dpaudit._io` into a run folder (the folder of a manifest, or a model folder inside it)
records the file's SHA-256 there (:func:`record_write`), and every reader checks it (:func:`verify_file`): a file
that changed since dpaudit wrote it, or one that dpaudit did not write, is refused with one line naming it. A run is
``complete`` once every model trained all its epochs; readers of its results refuse an incomplete run
(:func:`check_complete`). Runs written before manifests existed have none and are read as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from dpaudit._atomic import TEMPORARY, replace_file
from dpaudit._validation import DPAuditError
from dpaudit.rundir import MANIFEST, RunDir  # MANIFEST: declared with the rest of the layout, still importable here

FORMAT = "dpaudit-run/1"
_LOCK = ".dpaudit-run.lock"
#: the names a run writes in its own folder and in each model folder (``dpaudit.rundir``'s layout)
RUN_FILES = re.compile(
    r"(config|split|attack|summary|dpaudit-run)\.json|scores_epoch_\d{4}\.csv|audit_[\w-]+\.(json|png|pdf)"
)
MODEL_FOLDERS = re.compile(r"target|shadow_\d{2}")
MODEL_FILES = re.compile(
    r"(metrics|ledger|epsilon|diagnostics|canaries|canaries_run)\.json|canaries(_run)?\.npz|(epoch|state)_\d{4}\.(pt|json)"
)


def sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes, hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _owned_name(relative: Path) -> bool:
    """Whether ``relative`` (a path inside a run folder) is a name the run's layout writes."""
    parts = relative.parts
    if len(parts) == 1:
        return bool(RUN_FILES.fullmatch(parts[0]))
    return len(parts) == 2 and bool(MODEL_FOLDERS.fullmatch(parts[0])) and bool(MODEL_FILES.fullmatch(parts[1]))


def run_root(path: str | os.PathLike) -> Path | None:
    """The run folder holding ``path`` (a file in it or in one of its model folders), or None: no manifest there."""
    path = Path(path)
    for folder in (path.parent, path.parent.parent):
        if (folder / MANIFEST).is_file():
            return folder
    return None


def _read_manifest(root: Path) -> dict[str, Any]:
    path = root / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DPAuditError(
            f"{path}: not valid JSON ({' '.join(str(error).split())}); the run cannot be checked"
        ) from None
    if (
        not isinstance(manifest, dict)
        or manifest.get("format") != FORMAT
        or not isinstance(manifest.get("files"), dict)
    ):
        raise DPAuditError(f"{path} is not a dpaudit run manifest (format {FORMAT}); the run cannot be checked")
    return manifest


def _write_manifest(root: Path, manifest: Mapping[str, Any]) -> None:
    data = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
    replace_file(root / MANIFEST, lambda stream: stream.write(data))


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Hold the run's manifest lock (two processes writing one run never lose each other's entries)."""
    with open(root / _LOCK, "a") as stream:
        fcntl.flock(stream, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(stream, fcntl.LOCK_UN)


def record_write(path: str | os.PathLike, *, contents: str | os.PathLike | None = None) -> None:
    """Record the SHA-256 of ``path`` in its run's manifest (nothing outside a run folder).

    Args:
        path: the file, as readers will name it.
        contents: the file holding its bytes (default ``path``; ``dpaudit._io`` records its temporary file before
            renaming it to ``path``).
    """
    path = Path(path)
    root = run_root(path)
    if root is None or path.name == MANIFEST:
        return
    relative = path.relative_to(root).as_posix()
    digest = sha256(path if contents is None else contents)
    with _locked(root):
        manifest = _read_manifest(root)
        manifest["files"][relative] = digest
        _write_manifest(root, manifest)


def forget(paths: Sequence[str | os.PathLike]) -> None:
    """Delete files of a run and their manifest entries (e.g. training states no longer needed)."""
    by_root: dict[Path, list[Path]] = {}
    for path in map(Path, paths):
        root = run_root(path)
        path.unlink(missing_ok=True)
        if root is not None:
            by_root.setdefault(root, []).append(path)
    for root, removed in by_root.items():
        with _locked(root):
            manifest = _read_manifest(root)
            for path in removed:
                manifest["files"].pop(path.relative_to(root).as_posix(), None)
            _write_manifest(root, manifest)


def verify_file(path: str | os.PathLike) -> None:
    """Refuse ``path`` if it lies in a run folder and is not the file dpaudit recorded there.

    Raises:
        DPAuditError: the file's SHA-256 differs from the one recorded when dpaudit wrote it, or the run's manifest
            does not list it (dpaudit did not write it, or its write was interrupted before it was recorded).
    """
    path = Path(path)
    root = run_root(path)
    if root is None or path.name in (MANIFEST, _LOCK) or not path.is_file():
        return
    relative = path.relative_to(root).as_posix()
    recorded = _read_manifest(root)["files"].get(relative)
    if recorded is None:
        raise DPAuditError(
            f"{path} is not recorded in {root / MANIFEST} (dpaudit did not write it, or its write was cut short); "
            "delete it and rerun the step that writes it"
        )
    if sha256(path) != recorded:
        raise DPAuditError(
            f"{path} changed after dpaudit wrote it (its SHA-256 differs from {root / MANIFEST}'s); "
            "rerun the step that writes it"
        )


def check_complete(run_dir: str | os.PathLike) -> None:
    """Refuse a run whose training did not finish (interrupted, or diverged); runs without a manifest pass.

    Raises:
        DPAuditError: the run's manifest says it is incomplete, naming the epochs its target trained.
    """
    root = Path(run_dir)
    if not (root / MANIFEST).is_file():
        return
    manifest = _read_manifest(root)
    if manifest.get("complete"):
        return
    trained = ""
    metrics = RunDir(root).target.metrics
    with contextlib.suppress(OSError, ValueError, AttributeError):
        epochs = json.loads(metrics.read_text(encoding="utf-8")).get("epoch") or []
        trained = f" (its target trained {len(epochs)} of {manifest['identity']['epochs']} epochs)"
    raise DPAuditError(
        f"{root} is an incomplete run{trained}: its training was interrupted or diverged; run the same "
        "`dpaudit train` again to finish it"
    )


def mark_complete(run_dir: str | os.PathLike, complete: bool = True) -> None:
    """Record in the run's manifest whether every model trained every epoch; a complete run's manifest drops the
    entries of files that are gone (a write a kill cut short between recording and renaming), so that it lists
    the same files however often the run was interrupted."""
    root = Path(run_dir)
    with _locked(root):
        manifest = _read_manifest(root)
        manifest["complete"] = complete
        if complete:
            manifest["files"] = {name: digest for name, digest in manifest["files"].items() if (root / name).is_file()}
        _write_manifest(root, manifest)


def _differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    keys = sorted(key for key in set(old) | set(new) if old.get(key) != new.get(key))
    shown = ", ".join(f"{key}: {old.get(key)!r} → {new.get(key)!r}" for key in keys[:3])
    return shown + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")


def _written_name(name: str) -> str:
    """The file a temporary file of ``replace_file`` was being written for (``name`` itself for any other file)."""
    temp = TEMPORARY.fullmatch(name)
    return temp.group("name") if temp else name


def run_files(root: str | os.PathLike) -> list[Path]:
    """The files of the run in ``root`` that removing it deletes: those its manifest lists and those of the run's
    layout (in ``root`` and its model folders only, never deeper), with dpaudit's temporary files of those names."""
    root = Path(root)
    found: set[Path] = set()
    if (root / MANIFEST).is_file():
        with contextlib.suppress(DPAuditError):
            listed = (root / name for name in _read_manifest(root)["files"])
            found.update(path for path in listed if _owned_name(path.relative_to(root)) and path.is_file())
    folders = [root] + [path for path in root.iterdir() if path.is_dir() and MODEL_FOLDERS.fullmatch(path.name)]
    for folder in folders:
        for path in folder.iterdir():
            name = _written_name(path.name)
            if path.is_file() and not path.is_symlink() and _owned_name((folder / name).relative_to(root)):
                found.add(path)
    if (root / _LOCK).is_file():
        found.add(root / _LOCK)
    return sorted(found)


def remove_run_files(root: str | os.PathLike) -> int:
    """Delete the run in ``root`` (:func:`run_files`) and its emptied model folders; returns how many files."""
    root = Path(root)
    files = run_files(root)
    manifest = root / MANIFEST
    for path in sorted(files, key=lambda path: path == manifest):  # the manifest last: a cut-short removal resumes
        path.unlink(missing_ok=True)
    for folder in root.iterdir():
        if folder.is_dir() and MODEL_FOLDERS.fullmatch(folder.name) and not any(folder.iterdir()):
            folder.rmdir()
    return len(files)


def remove_partial_writes(root: str | os.PathLike) -> int:
    """Delete the temporary files that killed writes of this run's own files left (never anything else)."""
    root = Path(root)
    leftovers = [path for path in run_files(root) if TEMPORARY.fullmatch(path.name)]
    for path in leftovers:
        path.unlink(missing_ok=True)
    return len(leftovers)


def claim_run_folder(out: str | os.PathLike, *, identity: Mapping[str, Any], overwrite: bool = False) -> str:
    """Make ``out`` this run's folder before anything is written, or refuse it.

    Args:
        out: the run's folder.
        identity: the validated configuration (``TrainConfig.to_dict()``): a folder holding a run of another one is
            refused.
        overwrite: remove a run of another configuration found in ``out`` (only its own files) instead of refusing.

    Returns:
        ``"new"`` (a new or empty folder), ``"same"`` (a run of this configuration: resumed or rewritten) or
        ``"replaced"`` (another configuration's run, removed with ``overwrite``).

    Raises:
        DPAuditError: ``out`` is a file or cannot be written; it holds a run of another configuration (without
            ``overwrite``), or files that are not a run's.
    """
    root = Path(out)
    identity = json.loads(json.dumps(dict(identity)))  # as it reads back from JSON
    if root.exists() and not root.is_dir():
        raise DPAuditError(f"--out {root} is a file, not a folder; name a new or empty folder for the run")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DPAuditError(f"cannot create the run folder {root}: {error.strerror or error}") from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise DPAuditError(f"cannot write to the run folder {root}: permission denied")
    if (root / MANIFEST).is_file() and not _read_manifest(root)["files"]:  # a claim that wrote nothing (a train that
        remove_partial_writes(root)  # failed before its first file, e.g. on missing data, or was killed while writing
        for name in (_LOCK, MANIFEST):  # it): no run to keep (the manifest last: a removal cut short is done again)
            (root / name).unlink(missing_ok=True)
    previous = _previous_identity(root)
    status = "new"
    if previous is not None:
        if previous == identity:
            status = "same"
        elif not overwrite:
            raise DPAuditError(
                f"{root} holds a run of another configuration ({_differences(previous, identity)}); "
                "name another --out, or pass --overwrite to replace that run"
            )
        else:
            remove_run_files(root)
            status = "replaced"
    elif any(root.iterdir()):
        strangers = sorted(path.name for path in root.iterdir())
        owned = all(
            _owned_name(Path(_written_name(name))) or (MODEL_FOLDERS.fullmatch(name) and (root / name).is_dir())
            for name in strangers
        )
        if not (owned and overwrite):
            raise DPAuditError(
                f"--out {root} is not empty and holds no dpaudit run of this configuration ({len(strangers)} "
                f"entries, e.g. {strangers[0]!r}); name a new or empty folder"
                + (", or pass --overwrite to remove that run's leftover files" if owned else "")
            )
        remove_run_files(root)
        status = "replaced"
    if status == "same" and (root / MANIFEST).is_file():  # trained again: incomplete until it ends
        mark_complete(root, False)
        return status
    files = {}
    if status == "same":  # a run written before manifests: its files are taken as they are
        files = {
            path.relative_to(root).as_posix(): sha256(path)
            for path in run_files(root)
            if not TEMPORARY.fullmatch(path.name)
        }
    _write_manifest(root, {"format": FORMAT, "identity": identity, "complete": False, "files": files})
    return status


def _previous_identity(root: Path) -> dict[str, Any] | None:
    """The configuration of the run in ``root`` (its manifest's, or a run's config.json from before manifests);
    None where there is none."""
    if (root / MANIFEST).is_file():
        return _read_manifest(root)["identity"]
    config = RunDir(root).config
    if not config.is_file():
        return None
    try:
        payload = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        payload = None
    if not (isinstance(payload, dict) and isinstance(payload.get("config"), dict) and "derived" in payload):
        raise DPAuditError(
            f"{config} is not a dpaudit run's configuration; name a new or empty folder for the run (nothing was "
            "overwritten)"
        )
    return payload["config"]


def check_distinct_runs(runs: Sequence[str | os.PathLike], *, configs: Sequence[Mapping[str, Any]]) -> None:
    """Refuse pooling the same run twice, or runs whose random draws coincide (same seed and trial).

    Args:
        runs: the run folders to pool.
        configs: each run's configuration (``TrainConfig.to_dict()``), in the same order.

    Raises:
        DPAuditError: a folder named twice, or two runs trained with the same seed and trial (their canaries,
            memberships and noise are the same draws: pooling them counts one trial's evidence twice).
    """
    seen_paths: dict[Path, str] = {}
    seen_draws: dict[tuple[Any, Any], str] = {}
    for run, config in zip(runs, configs):
        resolved = Path(run).resolve()
        if resolved in seen_paths:
            raise DPAuditError(f"run {run} is named twice; pooling it counts its evidence twice")
        seen_paths[resolved] = str(run)
        draws = (config.get("seed"), config.get("trial"))
        if draws in seen_draws:
            raise DPAuditError(
                f"runs {seen_draws[draws]} and {run} were trained with the same seed and trial "
                f"({draws[0]}, {draws[1]}): their random draws coincide, so pooling them counts one evidence twice; "
                "pool independent trials"
            )
        seen_draws[draws] = str(run)
