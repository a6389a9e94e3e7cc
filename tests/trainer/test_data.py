"""Data loading from real MNIST: layouts, normalisation, and one-line errors for bad data."""

from __future__ import annotations

import gzip
import hashlib
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from trainer.data import load_mnist, normalise
from trainer.errors import DataError
from trainer.mnist_files import SUMS_FILE, resolve_data_dir


def test_loads_real_mnist_as_uint8_that_normalises_to_zero_mean_unit_std(mnist_root: Path) -> None:
    data = load_mnist(mnist_root, torch.device("cpu"))
    assert data.train_x.shape == (60000, 1, 28, 28)
    assert data.test_x.shape == (10000, 1, 28, 28)
    assert data.train_x.dtype == data.test_x.dtype == torch.uint8
    assert int(data.train_x.max()) == 255
    train = normalise(data.train_x)
    assert train.dtype == torch.float32 and train.shape == (60000, 1, 28, 28)
    assert abs(train.mean().item()) < 1e-3
    assert abs(train.std().item() - 1.0) < 1e-3
    assert data.test_y[:10].tolist() == [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]
    assert torch.bincount(data.train_y).tolist()[:3] == [5923, 6742, 5958]


def test_directory_that_directly_holds_gz_files(mnist_gz_dir: Path) -> None:
    assert resolve_data_dir(mnist_gz_dir) == mnist_gz_dir
    data = load_mnist(mnist_gz_dir, torch.device("cpu"), train_limit=1000)
    assert len(data.train_y) == 1000 and len(data.test_y) == 10000


def test_the_loader_records_each_file_it_read_with_its_sha256(mnist_gz_dir: Path) -> None:
    """lineage.json's data section comes from the load: the bytes this run trains on."""
    files = load_mnist(mnist_gz_dir, torch.device("cpu"), train_limit=1000).files["files"]
    assert sorted(files) == [
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
    ]
    for entry in files.values():
        assert entry["sha256"] == hashlib.sha256((mnist_gz_dir / entry["file"]).read_bytes()).hexdigest()


def test_missing_files_name_the_expected_path(tmp_path: Path) -> None:
    with pytest.raises(DataError) as caught:
        load_mnist(tmp_path, torch.device("cpu"))
    assert caught.value.one_line() == (
        f"trainer: data: {tmp_path}/MNIST/raw/train-images-idx3-ubyte(.gz) not found; "
        "seed it with 'python -m trainer.seed --from DIR --to ROOT' (or --mirror URL)"
    )


def _copy_gz(source: Path, target: Path) -> Path:
    raw = target / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for path in source.glob("*.gz"):
        shutil.copy(path, raw / path.name)
    return raw


def test_truncated_idx_is_reported(mnist_gz_dir: Path, tmp_path: Path) -> None:
    raw = _copy_gz(mnist_gz_dir, tmp_path)
    labels = raw / "t10k-labels-idx1-ubyte.gz"
    labels.write_bytes(gzip.compress(gzip.decompress(labels.read_bytes())[:5000]))
    with pytest.raises(DataError, match=r"5000 bytes, expected 10008; the file is truncated"):
        load_mnist(tmp_path, torch.device("cpu"))


@pytest.mark.slow
def test_checksum_mismatch_is_reported(procs: Any, mnist_gz_dir: Path, tmp_path: Path) -> None:
    raw = _copy_gz(mnist_gz_dir, tmp_path)
    (raw / SUMS_FILE).write_text(f"{'0' * 64}  train-labels-idx1-ubyte.gz\n")
    result = procs.run("trainer", [f"--data={tmp_path}", f"--checkpoint-dir={tmp_path / 'c'}"])
    assert result.returncode == 3
    assert result.stderr.splitlines() == [
        f"trainer: data: {raw}/train-labels-idx1-ubyte.gz: sha256 does not match "
        f"{raw}/{SUMS_FILE}; the file is corrupt, re-seed it"
    ]


@pytest.mark.slow
def test_seed_directory_then_train_reads_it(procs: Any, mnist_gz_dir: Path, tmp_path: Path) -> None:
    seeded = procs.run("trainer.seed", [f"--from={mnist_gz_dir}", f"--to={tmp_path / 'root'}"])
    assert seeded.returncode == 0, seeded.stderr
    raw = tmp_path / "root" / "MNIST" / "raw"
    assert sorted(p.name for p in raw.iterdir()) == sorted(
        [SUMS_FILE] + [p.name for p in mnist_gz_dir.glob("*.gz")]
    )
    data = load_mnist(tmp_path / "root", torch.device("cpu"), train_limit=10)
    assert data.train_y.tolist() == [5, 0, 4, 1, 9, 2, 1, 3, 1, 4]


@pytest.mark.slow
def test_a_checkpoint_dir_it_cannot_write_fails_before_loading_the_data(procs: Any, tmp_path: Path) -> None:
    """Rank 0 checks where it will write before anything else (the real node tier's read-only volume
    trained a whole epoch and then died with a traceback, exit 1). A file in the directory's place
    stops even root, as a volume the pod's uid cannot write stops the trainer."""
    blocker = tmp_path / "checkpoints"
    blocker.write_text("a file where the volume's directory should be")
    result = procs.run("trainer", [f"--data={tmp_path / 'no-data'}", f"--checkpoint-dir={blocker / 'run'}"])
    assert result.returncode == 5, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"trainer: output: cannot write {blocker / 'run'}: "), line
    assert line.endswith("where its volume type applies one)"), line
