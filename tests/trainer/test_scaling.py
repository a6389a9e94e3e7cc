"""Strong vs weak scaling: the pure batch plan, and the start line of real runs."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

from trainer.errors import UsageError
from trainer.scaling import BatchPlan, plan_batches, scaled_lr


@pytest.mark.parametrize(
    ("batch", "scaling", "world", "expected"),
    [
        (256, "strong", 1, BatchPlan(1, 256, 256, 234)),
        (256, "strong", 2, BatchPlan(2, 128, 256, 234)),
        (256, "weak", 1, BatchPlan(1, 256, 256, 234)),
        (256, "weak", 2, BatchPlan(2, 256, 512, 117)),
        (100, "strong", 4, BatchPlan(4, 25, 100, 600)),
        (100, "weak", 4, BatchPlan(4, 100, 400, 150)),
    ],
)
def test_plan_batches_on_full_mnist(batch: int, scaling: str, world: int, expected: BatchPlan) -> None:
    plan = plan_batches(batch, scaling, world, 60000)
    assert plan == expected
    assert plan.samples_per_epoch == expected.global_batch * expected.steps_per_epoch


def test_strong_scaling_rejects_indivisible_batch() -> None:
    with pytest.raises(UsageError) as caught:
        plan_batches(255, "strong", 2, 60000)
    assert str(caught.value) == (
        "--batch-size=255 is not divisible by the world size 2 under --scaling=strong; "
        "use a multiple of 2 or --scaling=weak"
    )


def test_global_batch_larger_than_dataset_is_rejected() -> None:
    with pytest.raises(UsageError, match="global batch 2048 exceeds the 1000 training images"):
        plan_batches(1024, "weak", 2, 1000)


@pytest.mark.parametrize(
    ("mode", "world", "expected"),
    [("none", 4, 0.01), ("linear", 4, 0.04), ("sqrt", 4, 0.02), ("linear", 1, 0.01)],
)
def test_scaled_lr(mode: str, world: int, expected: float) -> None:
    assert math.isclose(scaled_lr(0.01, mode, world), expected)


START = re.compile(
    r"trainer: start world_size=(\d+) backend=(\w+) device=(\w+) scaling=(\w+) "
    r"per_rank_batch=(\d+) global_batch=(\d+) steps_per_epoch=(\d+) epochs=(\d+) lr=(\S+) "
)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("nproc", "scaling", "expected"),
    [
        (1, "strong", ("1", "gloo", "cpu", "strong", "64", "64", "16")),
        (2, "strong", ("2", "gloo", "cpu", "strong", "32", "64", "16")),
        (2, "weak", ("2", "gloo", "cpu", "weak", "64", "128", "8")),
    ],
)
def test_start_line_of_real_run(
    procs: Any,
    mnist_root: Path,
    tmp_path: Path,
    nproc: int,
    scaling: str,
    expected: tuple[str, ...],
) -> None:
    trainer_args = [
        f"--data={mnist_root}",
        f"--checkpoint-dir={tmp_path / 'ckpt'}",
        "--epochs=1",
        "--batch-size=64",
        f"--scaling={scaling}",
        "--train-limit=1024",
        "--backend=auto",
    ]
    result = procs.run("trainer.launch", procs.launch_args(nproc, trainer_args))
    assert result.returncode == 0, result.stderr[-3000:]
    match = START.search(result.stdout)
    assert match, result.stdout
    assert match.groups()[:7] == expected
    assert result.stdout.count("trainer: start ") == 1  # rank 0 alone logs
