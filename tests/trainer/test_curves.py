"""Progress and curves of a real run: progress lines with an ETA, TensorBoard event files read back
with TensorBoard's own reader, and a resumed run that appends its steps instead of repeating them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.test_event_file import scalars
from trainer.checkpoint import checkpoint_path

pytestmark = pytest.mark.slow  # real trainer processes

TRAIN_TAGS = ("train/loss", "train/lr", "train/samples_per_s")
EPOCH_TAGS = ("test/loss", "test/accuracy", "train/epoch_loss")
PROGRESS = re.compile(
    r"^trainer: progress step +(\d+)/(\d+) +(\d+\.\d)% epoch (\d+)/(\d+) loss=\d+\.\d{4} lr=\S+ "
    r"samples/s=\d+ eta=(\d+s|\d+m\d\ds|\d+h\d\dm)$"
)


def run_args(mnist_root: Path, ckpt: Path) -> list[str]:
    # 1280 images at batch 128: 10 steps an epoch, a point every 4 steps and at each epoch's end.
    return [
        f"--data={mnist_root}",
        f"--checkpoint-dir={ckpt}",
        "--train-limit=1280",
        "--epochs=2",
        "--log-every=4",
        "--progress-seconds=0",
    ]


@pytest.fixture(scope="module")
def first_run(procs: Any, mnist_root: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    ckpt = tmp_path_factory.mktemp("curves") / "ckpt"
    result = procs.run("trainer", run_args(mnist_root, ckpt))
    assert result.returncode == 0, result.stderr
    return ckpt, result.stdout


def test_progress_lines_count_steps_to_the_end_with_an_eta(first_run: tuple[Path, str]) -> None:
    _, stdout = first_run
    found = [PROGRESS.match(line) for line in stdout.splitlines() if line.startswith("trainer: progress")]
    assert found and all(found), stdout
    steps = [(int(m.group(1)), int(m.group(2)), float(m.group(3)), int(m.group(4))) for m in found if m]
    assert steps == [
        (4, 20, 20.0, 1),
        (8, 20, 40.0, 1),
        (10, 20, 50.0, 1),
        (14, 20, 70.0, 2),
        (18, 20, 90.0, 2),
        (20, 20, 100.0, 2),
    ]
    assert found[-1] and found[-1].group(6) == "0s"


def test_event_files_hold_the_scalars_read_back_by_tensorboard(first_run: tuple[Path, str]) -> None:
    ckpt, _ = first_run
    series = scalars(ckpt / "tensorboard")
    assert set(series) == {*TRAIN_TAGS, *EPOCH_TAGS}
    for tag in TRAIN_TAGS:
        assert [step for step, _ in series[tag]] == [4, 8, 10, 14, 18, 20], tag
    metrics = json.loads((ckpt / "metrics.json").read_text())
    for tag, key in (("test/accuracy", "test_accuracy"), ("test/loss", "test_loss")):
        expected = [(10 * r["epoch"], r[key]) for r in metrics["history"]]
        assert [(s, pytest.approx(v, rel=1e-6)) for s, v in expected] == series[tag]
    # the one-cycle schedule: up during warm-up, then down to almost nothing
    lrs = [value for _, value in series["train/lr"]]
    assert lrs[-1] < 1e-5 < max(lrs) <= 0.01 * 1.0001
    assert all(value > 0 for _, value in series["train/samples_per_s"])


def test_a_resumed_run_appends_its_steps_once(
    procs: Any, mnist_root: Path, first_run: tuple[Path, str], tmp_path: Path
) -> None:
    """The run lost its last checkpoint after writing epoch 2's curves (a crash before the save):
    the restart resumes at epoch 1 and TensorBoard shows epoch 2 once, the restart's."""
    ckpt = tmp_path / "ckpt"
    first, _ = first_run
    ckpt.mkdir()
    for path in first.iterdir():
        target = ckpt / path.name
        if path.is_dir():
            target.mkdir()
            for inner in path.iterdir():
                (target / inner.name).write_bytes(inner.read_bytes())
        else:
            target.write_bytes(path.read_bytes())
    checkpoint_path(ckpt, 2).unlink()
    before = scalars(ckpt / "tensorboard")["test/accuracy"]
    # another seed: epoch 2 trains on another order, so the restart's figures differ from the first's
    again = procs.run("trainer", [*run_args(mnist_root, ckpt), "--seed=1"])
    assert again.returncode == 0, again.stderr
    assert f"trainer: resumed from {checkpoint_path(ckpt, 1)} (epoch 1/2)" in again.stdout.splitlines()
    series = scalars(ckpt / "tensorboard")
    for tag in TRAIN_TAGS:
        assert [step for step, _ in series[tag]] == [4, 8, 10, 14, 18, 20], tag
    metrics = json.loads((ckpt / "metrics.json").read_text())
    accuracy = metrics["history"][-1]["test_accuracy"]
    assert series["test/accuracy"] == [before[0], (20, pytest.approx(accuracy, rel=1e-6))]
    assert before[1][1] != pytest.approx(accuracy, rel=1e-6)
    assert len(list((ckpt / "tensorboard").glob("events.out.tfevents.*"))) == 2
