"""Training curves as TensorBoard event files (``torch.utils.tensorboard``), written by rank 0.

    <checkpoint dir>/tensorboard/events.out.tfevents.*

Tags, each against the run's global optimizer step (:mod:`trainer.progress`):

    train/loss            rank 0's mean training loss over the steps since the previous point
    train/lr              the learning rate of the point's last step
    train/samples_per_s   global samples per second over those steps
    test/loss             plain cross-entropy over the whole test set, at each epoch's last step
    test/accuracy         fraction in [0, 1], at each epoch's last step
    train/epoch_loss      the epoch's mean training loss over all ranks, at its last step

A resumed run appends: its writer opens with ``purge_step`` one past the checkpoint's step, so
TensorBoard's readers drop whatever an earlier attempt wrote after that checkpoint and show each step
once. A fresh run (step 0) purges everything before it in the directory the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainer.metrics import EpochRecord
from trainer.progress import Point, RunInfo


class TensorBoardSink:
    name = "tensorboard"

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.writer: Any = None

    def started(self, info: RunInfo) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.directory.mkdir(parents=True, exist_ok=True)
        self.writer = SummaryWriter(log_dir=str(self.directory), purge_step=info.start_step + 1)

    def point(self, point: Point) -> None:
        self.writer.add_scalar("train/loss", point.train_loss, point.step)
        self.writer.add_scalar("train/lr", point.lr, point.step)
        self.writer.add_scalar("train/samples_per_s", point.samples_per_s, point.step)

    def epoch(self, record: EpochRecord, step: int) -> None:
        self.writer.add_scalar("test/loss", record.test_loss, step)
        self.writer.add_scalar("test/accuracy", record.test_accuracy, step)
        self.writer.add_scalar("train/epoch_loss", record.train_loss, step)
        self.writer.flush()

    def finished(self, succeeded: bool) -> None:
        # The process ends with os._exit (trainer.__main__.exit_process): nothing flushes after this.
        self.writer.close()
