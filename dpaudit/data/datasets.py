"""Image datasets as plain numpy arrays, read from each dataset's native on-disk format.

The embedded default is scikit-learn's bundled ``digits`` (no download). MNIST, Fashion-MNIST, KMNIST,
EMNIST, CIFAR-10 and SVHN live under ``root`` in exactly the layout torchvision 0.29 creates when it
downloads them; with ``download=True`` torchvision fetches them first. The files are then read by the
small readers in this module (an idx-ubyte parser, a restricted unpickler for the CIFAR batches and
``scipy.io.loadmat`` for SVHN), never by torchvision's dataset classes: those verify md5 sums, which
small files written by tests cannot match.

``import dpaudit.data`` imports neither torch nor torchvision; torchvision is imported only inside the
download branch.
"""

from __future__ import annotations

import gzip
import os
import pickle
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from dpaudit._validation import DPAuditError, check_choice

__all__ = [
    "ArrayDataset",
    "DATASET_STATS",
    "DatasetInfo",
    "DatasetNotFoundError",
    "DIGITS_TEST_SIZE",
    "EMNIST_SPLITS",
    "available_datasets",
    "dataset_info",
    "load_dataset",
]

DOWNLOAD_HINT = "pass download=True (command line: --download)"
SPLITS = ("train", "test")


class DatasetNotFoundError(DPAuditError):
    """The files of a dataset are not under ``root`` and downloading was not asked for."""


# --------------------------------------------------------------------------------------------------
# Arrays
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ArrayDataset:
    """A labelled image dataset held in memory.

    Attributes:
        name: Dataset name, e.g. ``"cifar10"``.
        images: float32 array of shape ``(N, C, H, W)``.
        labels: int64 array of shape ``(N,)`` with values in ``[0, num_classes)``.
        num_classes: Number of classes of the dataset (not necessarily all present).
    """

    name: str
    images: np.ndarray
    labels: np.ndarray
    num_classes: int

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise DPAuditError(f"ArrayDataset name must be a non-empty string, got {self.name!r}")
        images, labels = self.images, self.labels
        if not isinstance(images, np.ndarray) or images.ndim != 4:
            got = images.shape if isinstance(images, np.ndarray) else type(images).__name__
            raise DPAuditError(f"ArrayDataset {self.name!r}: expected images of shape (N, C, H, W), got {got}")
        if images.dtype != np.float32:
            raise DPAuditError(f"ArrayDataset {self.name!r}: expected float32 images, got {images.dtype}")
        if not isinstance(labels, np.ndarray) or labels.ndim != 1:
            got = labels.shape if isinstance(labels, np.ndarray) else type(labels).__name__
            raise DPAuditError(f"ArrayDataset {self.name!r}: expected labels of shape (N,), got {got}")
        if labels.dtype != np.int64:
            raise DPAuditError(f"ArrayDataset {self.name!r}: expected int64 labels, got {labels.dtype}")
        if len(labels) != len(images):
            raise DPAuditError(
                f"ArrayDataset {self.name!r}: expected {len(images)} labels (one per image), got {len(labels)}"
            )
        if isinstance(self.num_classes, bool) or not isinstance(self.num_classes, (int, np.integer)):
            raise DPAuditError(f"ArrayDataset {self.name!r}: num_classes must be an integer, got {self.num_classes!r}")
        if self.num_classes <= 0:
            raise DPAuditError(f"ArrayDataset {self.name!r}: num_classes must be > 0, got {self.num_classes}")
        object.__setattr__(self, "num_classes", int(self.num_classes))
        if len(labels) and (labels.min() < 0 or labels.max() >= self.num_classes):
            raise DPAuditError(
                f"ArrayDataset {self.name!r}: expected labels in [0, {self.num_classes}), "
                f"got range [{labels.min()}, {labels.max()}]"
            )

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """Shape ``(C, H, W)`` of one image."""
        channels, height, width = self.images.shape[1:]
        return int(channels), int(height), int(width)

    def subset(self, indices: Sequence[int] | np.ndarray) -> ArrayDataset:
        """Return a new dataset holding the examples at ``indices`` (in that order; copies)."""
        index = np.asarray(indices)
        if index.size == 0:
            index = index.astype(np.int64)
        if index.ndim != 1 or not np.issubdtype(index.dtype, np.integer):
            raise DPAuditError(
                f"subset indices must be a 1-D sequence of integers, got shape {index.shape} dtype {index.dtype}"
            )
        if index.size and (index.min() < 0 or index.max() >= len(self)):
            raise DPAuditError(f"subset indices must lie in [0, {len(self)}), got range [{index.min()}, {index.max()}]")
        return ArrayDataset(self.name, self.images[index], self.labels[index], self.num_classes)


# --------------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------------

# Per-channel (mean, std) of pixel values scaled to [0, 1], used by ``normalize=True``. They are fixed
# constants (never recomputed from the loaded data), so a subset normalises exactly like the full set.
DATASET_STATS: Mapping[str, tuple[tuple[float, ...], tuple[float, ...]]] = MappingProxyType(
    {
        # Mean/std of all 1,797 scikit-learn digits (values / 16, all pixels pooled, float64, population
        # std). Hard-coded; tests/data/test_data.py recomputes them from load_digits() and checks the match.
        "digits": ((0.30526028624095713,), (0.3760492217920148,)),
        # The PyTorch MNIST example's constants (training set, 60,000 images).
        "mnist": ((0.1307,), (0.3081,)),
        # Commonly published Fashion-MNIST training-set statistics.
        "fashion-mnist": ((0.2860,), (0.3530,)),
        # Commonly published KMNIST training-set statistics.
        "kmnist": ((0.1918,), (0.3483,)),
        # Commonly published EMNIST (balanced) training-set statistics; used for every EMNIST split, whose
        # pixel statistics differ only in the third decimal.
        "emnist": ((0.1751,), (0.3332,)),
        # The constants of the widely used pytorch-cifar training scripts (and of the DPSGD-GC/DC authors' code).
        "cifar10": ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)),
        # Commonly published SVHN (train_32x32) per-channel statistics.
        "svhn": ((0.4377, 0.4438, 0.4728), (0.1980, 0.2010, 0.1970)),
        # UCI Adult's features are scaled by fixed transforms (``_adult_features``), not standardised.
        "adult": ((0.0,), (1.0,)),
    }
)


@dataclass(frozen=True)
class DatasetInfo:
    """What a dataset looks like, known without loading it.

    Attributes:
        name: Dataset name.
        input_shape: ``(C, H, W)`` of one image.
        num_classes: Number of classes (labels lie in ``[0, num_classes)``).
        train_size: Number of training images.
        test_size: Number of test images.
        mean: Per-channel mean used by ``normalize=True`` (see ``DATASET_STATS``).
        std: Per-channel standard deviation used by ``normalize=True``.
    """

    name: str
    input_shape: tuple[int, int, int]
    num_classes: int
    train_size: int
    test_size: int
    mean: tuple[float, ...] = ()
    std: tuple[float, ...] = ()


# The digits split: a fixed stratified split of the 1,797 images (there is no official one).
DIGITS_SIZE = 1797
DIGITS_TEST_SIZE = 599
DIGITS_SPLIT_SEED = 0
# Its test images as a bit mask (np.packbits, hex): the split `train_test_split(arange(1797), test_size=599,
# stratify=labels, random_state=0)` gives (tests/data/test_data.py recomputes it), stored so that loading digits
# does not import scikit-learn (≈ 1.4 s in every pipeline job).
_DIGITS_TEST_MASK_HEX = (
    "482004c8b52630c009166121d742450c5a000c1122a40028062c1e081108960a009019320430fca092c396e442284adab044"
    "1724c942c8e24a2130806004d82140eba02000588dc58010420ea09000054ae801f01000328ecc09005a36840083b8053ca3"
    "a69e4e0224000fcbd42804a499dd02124061e540812c604e9c376ba592174154c8404842a0a4980a5000b64b8561ee891388"
    "cf126c82c02205068f422109f202c141bd8813c809190101948e21028410a8f52033283920c944c8c8688a21029322920309"
    "32a6402da6862108aa608198c8a0141286124a12853cb41d20"
)

# EMNIST split -> (num_classes, train_size, test_size). torchvision keeps the "letters" labels 1..26 with
# an unused class 0 ("N/A"), hence 27 classes; the labels are returned as stored.
EMNIST_SPLITS: Mapping[str, tuple[int, int, int]] = MappingProxyType(
    {
        "byclass": (62, 697_932, 116_323),
        "bymerge": (47, 697_932, 116_323),
        "balanced": (47, 112_800, 18_800),
        "letters": (27, 124_800, 20_800),
        "digits": (10, 240_000, 40_000),
        "mnist": (10, 60_000, 10_000),
    }
)

# UCI Adult (``adult.names``): the categories of each categorical column, in the order of its one-hot code. Rows with
# a missing value ("?") are dropped, as is usual (30,162 train and 15,060 test rows remain).
ADULT_CATEGORIES: Mapping[int, tuple[str, ...]] = MappingProxyType(
    {
        1: ("Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov", "State-gov", "Without-pay",
            "Never-worked"),
        3: ("Bachelors", "Some-college", "11th", "HS-grad", "Prof-school", "Assoc-acdm", "Assoc-voc", "9th", "7th-8th",
            "12th", "Masters", "1st-4th", "10th", "Doctorate", "5th-6th", "Preschool"),
        5: ("Married-civ-spouse", "Divorced", "Never-married", "Separated", "Widowed", "Married-spouse-absent",
            "Married-AF-spouse"),
        6: ("Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial", "Prof-specialty",
            "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical", "Farming-fishing", "Transport-moving",
            "Priv-house-serv", "Protective-serv", "Armed-Forces"),
        7: ("Wife", "Own-child", "Husband", "Not-in-family", "Other-relative", "Unmarried"),
        8: ("White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"),
        9: ("Female", "Male"),
        13: ("United-States", "Cambodia", "England", "Puerto-Rico", "Canada", "Germany", "Outlying-US(Guam-USVI-etc)",
             "India", "Japan", "Greece", "South", "China", "Cuba", "Iran", "Honduras", "Philippines", "Italy", "Poland",
             "Jamaica", "Vietnam", "Mexico", "Portugal", "Ireland", "France", "Dominican-Republic", "Laos", "Ecuador",
             "Taiwan", "Haiti", "Columbia", "Hungary", "Guatemala", "Nicaragua", "Scotland", "Thailand", "Yugoslavia",
             "El-Salvador", "Trinadad&Tobago", "Peru", "Hong", "Holand-Netherlands"),
    }
)
# The numeric columns and the fixed transform of each (no statistic of the data): age/90, log(fnlwgt)/15,
# education-num/16, log1p(capital-gain)/12, log1p(capital-loss)/9, hours-per-week/99.
ADULT_NUMERIC = (0, 2, 4, 10, 11, 12)
ADULT_FEATURES = len(ADULT_NUMERIC) + sum(len(values) for values in ADULT_CATEGORIES.values())

_SHAPES_CLASSES_SIZES: Mapping[str, tuple[tuple[int, int, int], int, int, int]] = MappingProxyType(
    {
        "digits": ((1, 8, 8), 10, DIGITS_SIZE - DIGITS_TEST_SIZE, DIGITS_TEST_SIZE),
        "mnist": ((1, 28, 28), 10, 60_000, 10_000),
        "fashion-mnist": ((1, 28, 28), 10, 60_000, 10_000),
        "kmnist": ((1, 28, 28), 10, 60_000, 10_000),
        "emnist": ((1, 28, 28), *EMNIST_SPLITS["balanced"]),
        "cifar10": ((3, 32, 32), 10, 50_000, 10_000),
        "svhn": ((3, 32, 32), 10, 73_257, 26_032),
        "adult": ((1, 1, ADULT_FEATURES), 2, 30_162, 15_060),
    }
)

# The folder torchvision names after its dataset class: {root}/{folder}/raw/...
_IDX_FOLDERS = {"mnist": "MNIST", "fashion-mnist": "FashionMNIST", "kmnist": "KMNIST", "emnist": "EMNIST"}
_CIFAR_FOLDER = "cifar-10-batches-py"
_CIFAR_FILES = {"train": tuple(f"data_batch_{i}" for i in range(1, 6)), "test": ("test_batch",)}
_SVHN_FILES = {"train": "train_32x32.mat", "test": "test_32x32.mat"}
_ADULT_FILES = {"train": "adult/adult.data", "test": "adult/adult.test"}
_FETCHABLE = ("mnist", "fashion-mnist", "adult")  # dpaudit.data.fetch.FETCHABLE's names (imported there lazily)


def available_datasets() -> list[str]:
    """Names accepted by :func:`load_dataset`, the embedded default ``digits`` first."""
    return list(_SHAPES_CLASSES_SIZES)


def dataset_info(name: str, *, emnist_split: str = "balanced") -> DatasetInfo:
    """Describe dataset ``name`` without loading anything (EMNIST: the ``emnist_split`` split)."""
    check_choice("dataset", name, _SHAPES_CLASSES_SIZES)
    shape, num_classes, train_size, test_size = _SHAPES_CLASSES_SIZES[name]
    if name == "emnist":
        check_choice("EMNIST split", emnist_split, EMNIST_SPLITS)
        num_classes, train_size, test_size = EMNIST_SPLITS[emnist_split]
    mean, std = DATASET_STATS[name]
    return DatasetInfo(name, shape, num_classes, train_size, test_size, mean, std)


# --------------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------------


def load_dataset(
    name: str,
    *,
    split: str = "train",
    root: str | os.PathLike = "data",
    download: bool = False,
    normalize: bool = True,
    emnist_split: str = "balanced",
) -> ArrayDataset:
    """Load one split of a dataset as float32 ``(N, C, H, W)`` images and int64 labels.

    Pixels are scaled to [0, 1]; with ``normalize=True`` each channel is then standardised with the
    fixed constants in :data:`DATASET_STATS`.

    ``digits`` (scikit-learn's bundled 8×8 digits, values 0..16 divided by 16) has no official split; a
    fixed stratified one is used: ``train_test_split(arange(1797), test_size=599, stratify=labels,
    random_state=0)``, each part sorted back into the original order, giving 1,198 train and 599 test
    images. ``root`` and ``download`` do not apply to it.

    The other datasets are read from ``root`` in torchvision's layout:

    - ``mnist``, ``fashion-mnist``, ``kmnist``: ``{root}/{MNIST|FashionMNIST|KMNIST}/raw/``
      ``{train|t10k}-{images-idx3|labels-idx1}-ubyte`` (a ``.gz`` of it is accepted too);
    - ``emnist``: ``{root}/EMNIST/raw/emnist-{emnist_split}-{train|test}-{images-idx3|labels-idx1}-ubyte``
      (images are stored transposed and are transposed back);
    - ``cifar10``: ``{root}/cifar-10-batches-py/data_batch_1`` … ``data_batch_5`` and ``test_batch``;
    - ``svhn``: ``{root}/train_32x32.mat`` and ``{root}/test_32x32.mat`` (label 10 means digit 0).

    Args:
        name: One of :func:`available_datasets`.
        split: ``"train"`` or ``"test"``.
        root: Folder holding the downloaded datasets.
        download: Fetch missing files through torchvision first.
        normalize: Standardise each channel with the dataset's fixed mean and std.
        emnist_split: EMNIST split (``balanced``, ``byclass``, ``bymerge``, ``letters``, ``digits``,
            ``mnist``); ignored for the other datasets.

    Raises:
        DatasetNotFoundError: The files are missing and ``download`` is False.
        DPAuditError: A bad argument, or a file whose contents do not fit the dataset.
    """
    check_choice("dataset", name, _SHAPES_CLASSES_SIZES)
    check_choice("split", split, SPLITS)
    if name == "emnist":
        check_choice("EMNIST split", emnist_split, EMNIST_SPLITS)
    for flag_name, flag in (("download", download), ("normalize", normalize)):
        if not isinstance(flag, (bool, np.bool_)):
            raise DPAuditError(f"{flag_name} must be True or False, got {flag!r}")
    info = dataset_info(name, emnist_split=emnist_split)

    if name == "digits":
        images, labels = _load_digits(split)
    else:
        root_path = Path(root)
        missing = _missing_file(name, root_path, split, emnist_split)
        if missing is not None and download:
            _download(name, root_path, split, emnist_split)
            missing = _missing_file(name, root_path, split, emnist_split)
        if missing is not None:
            what = f"{name} ({emnist_split})" if name == "emnist" else name
            if download:
                raise DatasetNotFoundError(
                    f"dataset {what} ({split}) still missing after download: looked for {missing}"
                )
            hint = f"run `dpaudit data fetch {name} --root {root_path}`" if name in _FETCHABLE else DOWNLOAD_HINT
            raise DatasetNotFoundError(f"dataset {what} ({split}) not found: looked for {missing}; {hint}")
        if name in _IDX_FOLDERS:
            images, labels = _load_idx_dataset(name, root_path, split, emnist_split, info)
        elif name == "adult":
            images, labels = _load_adult(root_path / _ADULT_FILES[split])
        elif name == "cifar10":
            images, labels = _load_cifar10(root_path, split)
        else:
            images, labels = _load_svhn(root_path, split)

    if normalize:
        mean = np.asarray(info.mean, dtype=np.float32).reshape(1, -1, 1, 1)
        std = np.asarray(info.std, dtype=np.float32).reshape(1, -1, 1, 1)
        images = (images - mean) / std
    return ArrayDataset(name, np.ascontiguousarray(images, dtype=np.float32), labels, info.num_classes)


def _digits_test_mask() -> np.ndarray:
    """Boolean mask over the 1,797 digits images: True for the 599 of the fixed test split."""
    bits = np.unpackbits(np.frombuffer(bytes.fromhex(_DIGITS_TEST_MASK_HEX), dtype=np.uint8))
    return bits[:DIGITS_SIZE].astype(bool)


def _load_digits(split: str) -> tuple[np.ndarray, np.ndarray]:
    # scikit-learn's own file (what `sklearn.datasets.load_digits` reads), located without importing sklearn
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    locations = spec.submodule_search_locations if spec else None  # the package's folder(s)
    path = Path(locations[0]) / "datasets" / "data" / "digits.csv.gz" if locations else None
    if path is None or not path.is_file():
        raise DatasetNotFoundError(f"scikit-learn's digits file not found ({path}); reinstall scikit-learn")
    with gzip.open(path, "rt") as stream:
        table = np.loadtxt(stream, delimiter=",")
    if table.shape != (DIGITS_SIZE, 65):
        raise DPAuditError(f"{path}: expected a 1797 × 65 table (64 pixels + label), got {table.shape}")
    images = (table[:, :-1].reshape(DIGITS_SIZE, 8, 8) / 16.0).astype(np.float32)
    labels = table[:, -1].astype(np.int64)
    index = np.flatnonzero(_digits_test_mask() if split == "test" else ~_digits_test_mask())
    return images[index][:, None, :, :], labels[index]


# ---- file locations ------------------------------------------------------------------------------


def _idx_paths(name: str, root: Path, split: str, emnist_split: str) -> tuple[Path, Path]:
    raw = root / _IDX_FOLDERS[name] / "raw"
    if name == "emnist":
        prefix = f"emnist-{emnist_split}-{split}"
    else:
        prefix = "train" if split == "train" else "t10k"
    return raw / f"{prefix}-images-idx3-ubyte", raw / f"{prefix}-labels-idx1-ubyte"


def _existing_idx(path: Path) -> Path | None:
    if path.is_file():
        return path
    packed = path.with_name(path.name + ".gz")
    return packed if packed.is_file() else None


def _missing_file(name: str, root: Path, split: str, emnist_split: str) -> str | None:
    """The first expected file that is absent (as text for the message), or None."""
    if name in _IDX_FOLDERS:
        for path in _idx_paths(name, root, split, emnist_split):
            if _existing_idx(path) is None:
                return f"{path} (or {path.name}.gz)"
        return None
    if name == "adult":
        path = root / _ADULT_FILES[split]
        return None if path.is_file() else str(path)
    if name == "cifar10":
        for file_name in _CIFAR_FILES[split]:
            path = root / _CIFAR_FOLDER / file_name
            if not path.is_file():
                return str(path)
        return None
    path = root / _SVHN_FILES[split]
    return None if path.is_file() else str(path)


def _download(name: str, root: Path, split: str, emnist_split: str) -> None:
    """Fetch one split into ``root`` with torchvision (imported here only)."""
    try:
        from torchvision import datasets as tv_datasets
    except ImportError as error:  # pragma: no cover - torchvision is a core dependency
        raise DPAuditError(f"download=True needs torchvision, which failed to import: {error}") from None
    root.mkdir(parents=True, exist_ok=True)
    train = split == "train"
    if name == "adult":
        raise DPAuditError(f"torchvision has no {name}: run `dpaudit data fetch {name} --root {root}`")
    try:
        if name == "mnist":
            tv_datasets.MNIST(str(root), train=train, download=True)
        elif name == "fashion-mnist":
            tv_datasets.FashionMNIST(str(root), train=train, download=True)
        elif name == "kmnist":
            tv_datasets.KMNIST(str(root), train=train, download=True)
        elif name == "emnist":
            tv_datasets.EMNIST(str(root), split=emnist_split, train=train, download=True)
        elif name == "cifar10":
            tv_datasets.CIFAR10(str(root), train=train, download=True)
        elif name == "svhn":
            tv_datasets.SVHN(str(root), split=split, download=True)
        else:  # pragma: no cover - guarded by check_choice
            raise DPAuditError(f"dataset {name!r} cannot be downloaded")
    except DPAuditError:
        raise
    except Exception as error:  # network, disk or checksum failure: report it on one line
        detail = " ".join(str(error).split()) or type(error).__name__
        raise DPAuditError(f"downloading {name} ({split}) into {root} failed: {detail}") from error


# ---- idx-ubyte (MNIST family) --------------------------------------------------------------------

_IDX_UBYTE = 0x08


def read_idx(path: str | os.PathLike, *, ndim: int) -> np.ndarray:
    """Read an idx file of unsigned bytes (``.gz`` compressed when the name ends in ``.gz``).

    The format: two zero bytes, a type byte (0x08: uint8), a byte giving the number of dimensions, one
    big-endian uint32 per dimension, then the data in C order.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as stream:
            raw = stream.read()
    except (OSError, EOFError) as error:
        detail = " ".join(str(error).split())
        raise DPAuditError(f"{path}: cannot read idx file: {detail}") from None
    if len(raw) < 4:
        raise DPAuditError(f"{path}: expected an idx header of at least 4 bytes, got {len(raw)} bytes")
    zero_a, zero_b, type_code, dims = raw[0], raw[1], raw[2], raw[3]
    if zero_a or zero_b or type_code != _IDX_UBYTE:
        raise DPAuditError(
            f"{path}: expected idx magic 0x0000{_IDX_UBYTE:02x}{ndim:02x} (unsigned bytes), got 0x{raw[:4].hex()}"
        )
    if dims != ndim:
        raise DPAuditError(f"{path}: expected an idx file with {ndim} dimension(s), got {dims}")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DPAuditError(f"{path}: expected an idx header of {header} bytes, got {len(raw)} bytes")
    shape = struct.unpack(f">{ndim}I", raw[4:header])
    expected = int(np.prod(shape, dtype=np.int64))
    if len(raw) - header != expected:
        raise DPAuditError(f"{path}: expected {expected} data bytes for shape {shape}, got {len(raw) - header}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)


def _load_idx_dataset(
    name: str, root: Path, split: str, emnist_split: str, info: DatasetInfo
) -> tuple[np.ndarray, np.ndarray]:
    image_name, label_name = _idx_paths(name, root, split, emnist_split)
    image_path, label_path = _existing_idx(image_name), _existing_idx(label_name)
    assert image_path is not None and label_path is not None  # checked by the caller
    images = read_idx(image_path, ndim=3)
    _, height, width = info.input_shape
    if images.shape[1:] != (height, width):
        raise DPAuditError(f"{image_path}: expected {height}×{width} images, got {images.shape[1]}×{images.shape[2]}")
    labels = read_idx(label_path, ndim=1).astype(np.int64)
    if len(labels) != len(images):
        raise DPAuditError(f"{label_path}: expected {len(images)} labels (one per image), got {len(labels)}")
    _check_label_range(label_path, labels, info.num_classes)
    if name == "emnist":  # EMNIST stores each image transposed
        images = images.transpose(0, 2, 1)
    return _to_unit_float(images[:, None, :, :]), labels


# ---- UCI Adult (comma-separated text) -----------------------------------------------------------


def _adult_features(rows: list[list[str]]) -> np.ndarray:
    """[n, ADULT_FEATURES] float32: the numeric columns by their fixed transforms, then each categorical column
    one-hot in :data:`ADULT_CATEGORIES`' order."""
    numeric = np.array([[float(row[column]) for column in ADULT_NUMERIC] for row in rows], dtype=np.float64)
    age, fnlwgt, education, gain, loss, hours = numeric.T
    columns = [age / 90, np.log(fnlwgt) / 15, education / 16, np.log1p(gain) / 12, np.log1p(loss) / 9, hours / 99]
    for column, categories in ADULT_CATEGORIES.items():
        code = {value: k for k, value in enumerate(categories)}
        onehot = np.zeros((len(rows), len(categories)))
        onehot[np.arange(len(rows)), [code[row[column]] for row in rows]] = 1.0
        columns.extend(onehot.T)
    return np.stack(columns, axis=1).astype(np.float32)


def _load_adult(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """UCI's ``adult.data`` or ``adult.test`` (its first line a comment; labels end in "." there): rows with a missing
    value dropped; label 1 for income >50K."""
    try:
        lines = path.read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeError) as error:
        raise DPAuditError(f"{path}: cannot read the Adult table: {' '.join(str(error).split())}") from None
    rows = [line.split(", ") for line in lines if line.strip() and not line.startswith("|")]
    wrong = next((k for k, row in enumerate(rows) if len(row) != 15), None)
    if wrong is not None:
        raise DPAuditError(f"{path}: expected 15 comma-separated fields per row, got {len(rows[wrong])} in row {wrong + 1}")
    rows = [row for row in rows if "?" not in row]
    labels = [row[14].rstrip(".") for row in rows]
    unknown = sorted(set(labels) - {"<=50K", ">50K"})
    if unknown:
        raise DPAuditError(f"{path}: expected labels <=50K or >50K, got {unknown[0]!r}")
    for column, categories in ADULT_CATEGORIES.items():
        extra = sorted({row[column] for row in rows} - set(categories))
        if extra:
            raise DPAuditError(f"{path}: column {column + 1} has a value outside UCI's categories: {extra[0]!r}")
    try:
        features = _adult_features(rows)
    except ValueError as error:
        raise DPAuditError(f"{path}: a numeric column is not a positive number ({error})") from None
    return features[:, None, None, :], np.array([label == ">50K" for label in labels], dtype=np.int64)


# ---- CIFAR-10 (pickled batches) ------------------------------------------------------------------

_NUMPY_CORE = "numpy._core" if hasattr(np, "_core") else "numpy.core"
_PICKLE_ALLOWED: Mapping[tuple[str, str], str] = MappingProxyType(
    {
        # numpy array reconstruction, as written by numpy 1.x (numpy.core) and 2.x (numpy._core)
        ("numpy.core.multiarray", "_reconstruct"): f"{_NUMPY_CORE}.multiarray:_reconstruct",
        ("numpy._core.multiarray", "_reconstruct"): f"{_NUMPY_CORE}.multiarray:_reconstruct",
        ("numpy.core.multiarray", "scalar"): f"{_NUMPY_CORE}.multiarray:scalar",
        ("numpy._core.multiarray", "scalar"): f"{_NUMPY_CORE}.multiarray:scalar",
        # protocol-5 pickles rebuild arrays from a buffer
        ("numpy.core.numeric", "_frombuffer"): f"{_NUMPY_CORE}.numeric:_frombuffer",
        ("numpy._core.numeric", "_frombuffer"): f"{_NUMPY_CORE}.numeric:_frombuffer",
        ("numpy", "ndarray"): "numpy:ndarray",
        ("numpy", "dtype"): "numpy:dtype",
        # protocol-2 pickles written by Python 3 spell bytes as _codecs.encode(text, "latin1")
        ("_codecs", "encode"): "_codecs:encode",
        # plain containers and scalars (Python 2 pickles name the module __builtin__)
        **{
            (module, type_name): f"builtins:{type_name}"
            for module in ("builtins", "__builtin__")
            for type_name in (
                "bool",
                "bytearray",
                "bytes",
                "complex",
                "dict",
                "float",
                "frozenset",
                "int",
                "list",
                "set",
                "str",
                "tuple",
            )
        },
    }
)


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that resolves only what CIFAR batch files need: numpy arrays and builtin values.

    Any other global (``os.system``, ``builtins.eval``, ...) is refused with a :class:`DPAuditError`
    before it is resolved, so loading a hostile file cannot run code.
    """

    def __init__(self, stream: Any, *, source: str = "pickle") -> None:
        super().__init__(stream, encoding="latin1")
        self._source = source

    def find_class(self, module: str, name: str) -> Any:
        target = _PICKLE_ALLOWED.get((module, name))
        if target is None:
            raise DPAuditError(
                f"{self._source}: refusing to unpickle {module}.{name}; "
                "only numpy arrays and builtin values are allowed"
            )
        import importlib

        module_name, attribute = target.split(":")
        return getattr(importlib.import_module(module_name), attribute)

    def persistent_load(self, pid: Any) -> Any:
        raise DPAuditError(f"{self._source}: refusing to unpickle a persistent id")


def restricted_load(path: str | os.PathLike) -> Any:
    """Unpickle ``path`` with :class:`RestrictedUnpickler` (never plain ``pickle.load``)."""
    path = Path(path)
    try:
        with open(path, "rb") as stream:
            return RestrictedUnpickler(stream, source=str(path)).load()
    except DPAuditError:
        raise
    except Exception as error:  # truncated or garbled pickle
        detail = " ".join(str(error).split()) or type(error).__name__
        raise DPAuditError(f"{path}: cannot unpickle: {detail}") from None


def _entry(batch: Mapping[Any, Any], key: str) -> Any:
    for candidate in (key, key.encode("latin1")):
        if candidate in batch:
            return batch[candidate]
    return None


def _load_cifar10(root: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    image_parts, label_parts = [], []
    for file_name in _CIFAR_FILES[split]:
        path = root / _CIFAR_FOLDER / file_name
        batch = restricted_load(path)
        if not isinstance(batch, dict):
            raise DPAuditError(f"{path}: expected a pickled dict, got {type(batch).__name__}")
        data, labels = _entry(batch, "data"), _entry(batch, "labels")
        if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
            got = f"{data.dtype} array of shape {data.shape}" if isinstance(data, np.ndarray) else repr(type(data))
            raise DPAuditError(f"{path}: expected b'data' as a uint8 array of shape (N, 3072), got {got}")
        if labels is None:
            raise DPAuditError(f"{path}: expected a b'labels' entry, got keys {sorted(map(str, batch))}")
        labels = np.asarray(labels)
        integer = labels.size == 0 or np.issubdtype(labels.dtype, np.integer)
        if labels.ndim != 1 or len(labels) != len(data) or not integer:
            raise DPAuditError(
                f"{path}: expected {len(data)} integer labels (one per image), "
                f"got shape {labels.shape} dtype {labels.dtype}"
            )
        labels = labels.astype(np.int64)
        _check_label_range(path, labels, 10)
        image_parts.append(data.reshape(-1, 3, 32, 32))
        label_parts.append(labels)
    return _to_unit_float(np.concatenate(image_parts)), np.concatenate(label_parts)


# ---- SVHN (.mat) ---------------------------------------------------------------------------------


def _load_svhn(root: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    import scipy.io

    path = root / _SVHN_FILES[split]
    try:
        content = scipy.io.loadmat(str(path), variable_names=["X", "y"])
    except Exception as error:
        detail = " ".join(str(error).split()) or type(error).__name__
        raise DPAuditError(f"{path}: cannot read MATLAB file: {detail}") from None
    data, raw_labels = content.get("X"), content.get("y")
    if not isinstance(data, np.ndarray) or data.ndim != 4 or data.shape[:3] != (32, 32, 3):
        got = data.shape if isinstance(data, np.ndarray) else "no X variable"
        raise DPAuditError(f"{path}: expected X of shape (32, 32, 3, N), got {got}")
    if data.dtype != np.uint8:
        raise DPAuditError(f"{path}: expected X of dtype uint8, got {data.dtype}")
    if not isinstance(raw_labels, np.ndarray):
        raise DPAuditError(f"{path}: expected a y variable with {data.shape[3]} labels, got none")
    labels = raw_labels.reshape(-1)
    if len(labels) != data.shape[3] or (labels.size and not np.issubdtype(labels.dtype, np.number)):
        raise DPAuditError(f"{path}: expected {data.shape[3]} labels (one per image), got shape {raw_labels.shape}")
    labels = labels.astype(np.int64)
    if labels.size and (labels.min() < 1 or labels.max() > 10):
        raise DPAuditError(f"{path}: expected labels in [1, 10] (10 = digit 0), got [{labels.min()}, {labels.max()}]")
    labels[labels == 10] = 0
    images = np.transpose(data, (3, 2, 0, 1))  # (H, W, C, N) -> (N, C, H, W)
    return _to_unit_float(images), labels


# ---- shared ---------------------------------------------------------------------------------------


def _check_label_range(path: Path, labels: np.ndarray, num_classes: int) -> None:
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise DPAuditError(f"{path}: expected labels in [0, {num_classes}), got [{labels.min()}, {labels.max()}]")


def _to_unit_float(images: np.ndarray) -> np.ndarray:
    return images.astype(np.float32) / np.float32(255.0)
