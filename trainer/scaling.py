"""Batch and learning-rate arithmetic for strong and weak scaling (pure functions)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainer.errors import UsageError

SCALING_MODES = ("strong", "weak")
LR_SCALING_MODES = ("none", "linear", "sqrt")


@dataclass(frozen=True)
class BatchPlan:
    """How one epoch is cut into steps for a given world size.

    Every rank takes the same number of steps; the incomplete last global batch is dropped
    (like ``DistributedSampler(drop_last=True)`` over global batches).
    """

    world_size: int
    per_rank_batch: int
    global_batch: int
    steps_per_epoch: int

    @property
    def samples_per_epoch(self) -> int:
        return self.global_batch * self.steps_per_epoch


def plan_batches(batch_size: int, scaling: str, world_size: int, train_size: int) -> BatchPlan:
    """Strong scaling: ``batch_size`` is global, split across ranks. Weak: it is per rank."""
    if scaling not in SCALING_MODES:
        raise UsageError(f"--scaling={scaling!r}: expected one of {', '.join(SCALING_MODES)}")
    if batch_size < 1 or world_size < 1:
        raise UsageError(f"--batch-size={batch_size} and world size {world_size} must be >= 1")
    if scaling == "strong":
        if batch_size % world_size:
            raise UsageError(
                f"--batch-size={batch_size} is not divisible by the world size {world_size} "
                f"under --scaling=strong; use a multiple of {world_size} or --scaling=weak"
            )
        per_rank = batch_size // world_size
    else:
        per_rank = batch_size
    global_batch = per_rank * world_size
    steps = train_size // global_batch
    if steps < 1:
        raise UsageError(
            f"global batch {global_batch} exceeds the {train_size} training images; lower --batch-size"
        )
    return BatchPlan(world_size, per_rank, global_batch, steps)


def scaled_lr(lr: float, lr_scaling: str, world_size: int) -> float:
    """``lr`` scaled relative to world size 1: unchanged, times N (linear) or times sqrt(N)."""
    if lr_scaling == "none":
        return lr
    if lr_scaling == "linear":
        return lr * world_size
    if lr_scaling == "sqrt":
        return lr * math.sqrt(world_size)
    raise UsageError(f"--lr-scaling={lr_scaling!r}: expected one of {', '.join(LR_SCALING_MODES)}")
