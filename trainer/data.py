"""MNIST from IDX files into uint8 tensors, loaded once; each batch is normalised as it is used.

The files themselves (names, layouts, ``SHA256SUMS``, the IDX header check) are
:mod:`trainer.mnist_files`, which needs no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from trainer.mnist_files import (
    TEST_IMAGES,
    TEST_LABELS,
    TRAIN_IMAGES,
    TRAIN_LABELS,
    data_files,
    decode_idx,
    file_paths,
    is_read_ahead,
    resolve_data_dir,
    verify_sums,
)

# Mean and std of the MNIST training pixels scaled to [0, 1].
MNIST_MEAN = 0.1307
MNIST_STD = 0.3081


@dataclass(frozen=True)
class MnistTensors:
    """Raw images ``[N, 1, 28, 28]`` (uint8) and labels ``[N]`` (int64), both splits.

    The images stay uint8 (a quarter of float32's memory: 47 MiB instead of 188 MiB for the training
    split); :func:`normalise` turns the rows a step uses into float32.
    """

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    # The files as read, each with its sha256 (trainer.mnist_files.data_files): lineage.json's data.
    files: dict[str, Any] = field(default_factory=dict)
    # Whether all four came from the launcher's read-ahead (trainer.read_ahead), not this process's read.
    read_ahead: bool = False


def read_idx(path: Path) -> torch.Tensor:
    """Decode one IDX file (gzipped or raw) into a uint8 tensor, checking header and size."""
    raw, header, dims = decode_idx(path)
    return torch.frombuffer(raw, dtype=torch.uint8, offset=header).reshape(dims)


def normalise(images: torch.Tensor) -> torch.Tensor:
    """uint8 images (any shape) to float32 scaled to [0, 1], then standardised with the MNIST mean/std."""
    return images.float().div_(255.0).sub_(MNIST_MEAN).div_(MNIST_STD)


def load_mnist(root: Path, device: torch.device, train_limit: int = 0) -> MnistTensors:
    """Both splits from ``root``; ``train_limit`` > 0 keeps only the first N training images."""
    directory = resolve_data_dir(root)
    paths = file_paths(directory)
    ahead = all(is_read_ahead(path) for path in paths.values())
    files = data_files(directory, paths)  # hashed once, here: the bytes this run trains on
    verify_sums(directory, {entry["file"]: entry["sha256"] for entry in files["files"].values()})
    arrays = {name: read_idx(path) for name, path in paths.items()}
    train_x, train_y = arrays[TRAIN_IMAGES], arrays[TRAIN_LABELS]
    if train_limit > 0:
        train_x, train_y = train_x[:train_limit], train_y[:train_limit]
    return MnistTensors(
        train_x=train_x.unsqueeze(1).to(device),
        train_y=train_y.to(device=device, dtype=torch.long),
        test_x=arrays[TEST_IMAGES].unsqueeze(1).to(device),
        test_y=arrays[TEST_LABELS].to(device=device, dtype=torch.long),
        files=files,
        read_ahead=ahead,
    )
