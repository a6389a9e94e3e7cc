"""The launcher's read-ahead of the dataset (trainer.read_ahead): what the forked ranks take from memory,
and what they still read themselves."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
import torch

from trainer import mnist_files
from trainer.data import load_mnist
from trainer.errors import DataError
from trainer.mnist_files import FILES, TEST_LABELS, is_read_ahead, read_ahead
from trainer.read_ahead import ReadAhead, data_root


@pytest.fixture(autouse=True)
def empty_read_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mnist_files, "_READ_AHEAD", {})


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--nproc-per-node=2", "-m", "trainer", "--data=/d/mnist", "--epochs=1"], "/d/mnist"),
        (["-m", "trainer", "--data", "/d/a", "--data=/d/b"], "/d/b"),  # argparse keeps the last
        (["-m", "trainer", "--data=/d/a", "--data", "/d/b"], "/d/b"),
        (["--nproc-per-node=1", "-m", "trainer", "--epochs=1"], "./data/mnist"),  # the trainer's default
        (["-m", "trainer", "--data=s3://bucket/mnist"], None),
        (["-m", "other", "--data=/d/mnist"], None),
    ],
)
def test_the_dataset_is_the_one_the_trainer_will_read(args: list[str], expected: str | None) -> None:
    assert data_root(args) == (None if expected is None else Path(expected))


def _mirror(root: Path, target: Path) -> Path:
    """``target`` as a data root whose files link to ``root``'s, but a copy of the test labels."""
    raw = target / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in FILES:
        if name == TEST_LABELS:
            shutil.copy(root / "MNIST" / "raw" / name, raw / name)
        else:
            (raw / name).symlink_to(root / "MNIST" / "raw" / name)
    return raw


def test_a_forked_rank_reads_no_file_the_launcher_read(
    mnist_gz_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = load_mnist(mnist_gz_dir, torch.device("cpu"))
    ahead = ReadAhead(mnist_gz_dir)
    assert len(ahead.wait()) == 4
    assert all(is_read_ahead(mnist_gz_dir / f"{name}.gz") for name in FILES)

    def refuse(*_args: object, **_kwargs: object) -> bytes:
        raise AssertionError("a file was read again")

    monkeypatch.setattr(Path, "read_bytes", refuse)
    monkeypatch.setattr(Path, "open", refuse)
    data = load_mnist(mnist_gz_dir, torch.device("cpu"))
    assert data.read_ahead
    assert data.files == expected.files  # lineage: the same files and sha256
    for name in ("train_x", "train_y", "test_x", "test_y"):
        assert torch.equal(getattr(data, name), getattr(expected, name)), name
    # Each file is taken from memory once; a second load reads the files again.
    assert not any(is_read_ahead(mnist_gz_dir / f"{name}.gz") for name in FILES)


def test_a_file_changed_after_the_read_ahead_is_read_again(mnist_root: Path, tmp_path: Path) -> None:
    """Same size and the same modification time (set back): only the change time says it changed."""
    raw = _mirror(mnist_root, tmp_path)
    assert len(read_ahead(tmp_path)) == 4
    labels = raw / TEST_LABELS
    before = labels.stat()
    with labels.open("r+b") as handle:  # the first test label, 7, becomes 3, in place
        handle.seek(8)
        handle.write(bytes([3]))
    os.utime(labels, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (labels.stat().st_size, labels.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    data = load_mnist(tmp_path, torch.device("cpu"))
    assert data.test_y[:2].tolist() == [3, 2]
    assert data.files["files"][TEST_LABELS]["sha256"] == hashlib.sha256(labels.read_bytes()).hexdigest()
    assert not data.read_ahead


def test_a_bad_file_is_left_for_the_rank_to_report(mnist_root: Path, tmp_path: Path) -> None:
    raw = _mirror(mnist_root, tmp_path)
    (raw / TEST_LABELS).write_bytes((raw / TEST_LABELS).read_bytes()[:5000])
    read = read_ahead(tmp_path)
    assert [Path(path).name for path in read] == [FILES[0], FILES[1], FILES[2]]
    with pytest.raises(DataError, match=r"5000 bytes, expected 10008; the file is truncated"):
        load_mnist(tmp_path, torch.device("cpu"))


def test_a_missing_dataset_is_left_for_the_rank_to_report(tmp_path: Path) -> None:
    assert ReadAhead(tmp_path / "nothing").wait() == []
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte\(\.gz\) not found"):
        load_mnist(tmp_path / "nothing", torch.device("cpu"))
