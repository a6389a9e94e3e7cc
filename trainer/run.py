"""What one trainer process trains with (`Run`, built once by `trainer.train.setup`), where an attempt
starts (`Start`), and rank 0's progress line."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import torch
from torch import nn

from trainer import dist
from trainer.cli import TrainConfig
from trainer.data import MnistTensors
from trainer.errors import write_line
from trainer.metrics import EpochRecord, Stopwatch
from trainer.optim import AdamW, OneCycle
from trainer.scaling import BatchPlan


@dataclass
class Run:
    """Everything one process trains with; built once by :func:`setup`."""

    config: TrainConfig
    env: dist.DistEnv
    backend: str
    device: torch.device
    data: MnistTensors
    plan: BatchPlan
    lr: float
    module: nn.Module
    optimizer: AdamW
    scheduler: OneCycle
    started: float
    clock: Stopwatch


@dataclass
class Start:
    """Where an attempt starts: after ``epoch`` epochs and ``step`` steps of the next one."""

    epoch: int = 0
    step: int = 0
    loss_sum: float = 0.0  # this rank's training loss summed over those ``step`` steps
    train_seconds: float = 0.0  # the time they took (rank 0's)
    history: list[EpochRecord] = field(default_factory=list)


def log(env: dist.DistEnv, message: str) -> None:
    """Rank 0 alone prints progress, on stdout."""
    if env.is_main:
        write_line(f"trainer: {message}", sys.stdout)
