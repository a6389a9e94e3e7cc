"""A small CNN with BatchNorm: about 29k parameters, ~99.2% MNIST test accuracy in one epoch.

A first stage of a 3x3 conv with stride 2, BatchNorm and ReLU (28x28 to 14x14, 16 channels), then two
stages of 3x3 conv, 2x2 max-pool, BatchNorm and ReLU (32, 64 channels) and one linear layer.

- The strided first conv never holds the 28x28x16 map a stride-1 conv and a pool would. On a CPU
  that map's writes, its pool and the gradient the pool's backward zeroes were over a quarter of a
  step (``bench/bench_step.py``); a step now takes about 11% less, the 2-rank epoch about 10%, at the
  same accuracy over 3 seeds (``docs/BENCHMARKS.md``, "Where a 2-CPU step goes, and a strided first
  stage").
- In the later stages pooling comes before BatchNorm and ReLU, which then normalise and rectify a
  quarter of the values a conv/BN/ReLU/pool stage would: about 20% less CPU time per training
  sample, and no worse one-epoch accuracy.

With channels-last memory format, one epoch (global batch 128, label smoothing 0.1; see
:mod:`trainer.cli`) is what makes the 2-process CPU run reach 99% within its first and only epoch.
"""

from __future__ import annotations

import hashlib

import torch
from torch import nn

WIDTHS = (16, 32, 64)


def _first_stage(out_channels: int) -> list[nn.Module]:
    return [
        nn.Conv2d(1, out_channels, kernel_size=3, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
    ]


def _stage(in_channels: int, out_channels: int) -> list[nn.Module]:
    return [
        nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1, bias=False),
        nn.MaxPool2d(2),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
    ]


class MnistCNN(nn.Module):
    """28x28 -> 14 (strided conv) -> 7 -> 3 (pools), then a linear classifier over 64 * 3 * 3 features."""

    def __init__(self, widths: tuple[int, int, int] = WIDTHS, classes: int = 10) -> None:
        super().__init__()
        first, second, third = widths
        self.features = nn.Sequential(*_first_stage(first), *_stage(first, second), *_stage(second, third))
        self.classifier = nn.Linear(third * 3 * 3, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(images), 1))


def build_model(device: torch.device) -> nn.Module:
    """The model on ``device`` in channels-last format (about 2x faster convolutions on CPU)."""
    model = MnistCNN().to(device)
    return model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]


def state_dict_sha256(model: nn.Module) -> str:
    """A checksum of every parameter and buffer (names and bytes), independent of memory format."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        flat = tensor.detach().cpu().reshape(-1).clone().view(torch.uint8)
        digest.update(bytes(flat.untyped_storage()))
    return digest.hexdigest()
