"""Training curves as TensorBoard event files, written by rank 0.

    <checkpoint dir>/tensorboard/events.out.tfevents.*

Tags, each against the run's global optimizer step (:mod:`trainer.progress`):

    train/loss            rank 0's mean training loss over the steps since the previous point
    train/lr              the learning rate of the point's last step
    train/samples_per_s   global samples per second over those steps
    test/loss             plain cross-entropy over the whole test set, at each epoch's last step
    test/accuracy         fraction in [0, 1], at each epoch's last step
    train/epoch_loss      the epoch's mean training loss over all ranks, at its last step

A resumed run appends: its file opens with a purge at one past the checkpoint's step, so
TensorBoard's readers drop whatever an earlier attempt wrote after that checkpoint and show each step
once. A fresh run (step 0) purges everything before it in the directory the same way.

The file is what ``torch.utils.tensorboard.SummaryWriter(purge_step=...)`` writes, event for event
(torch 2.13.0 ``torch/utils/tensorboard/writer.py``, ``_get_file_writer`` and ``add_scalar``;
tensorboard 2.20.0 ``tensorboard/summary/writer/event_file_writer.py`` and ``record_writer.py``): the
same ``Event`` protos from ``tensorboard.compat.proto``, framed as TFRecords (the first event names this
module as its writer). Importing that writer cost rank 0 about 0.15 s of start-up (it pulls in
TensorBoard's summary ops, its TensorFlow stub, fsspec and boto3); the protos alone about 0.05 s. Each
event is written and flushed as it comes, so a board shows a long epoch's points while it runs.
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import time
from pathlib import Path
from typing import Any

from trainer.metrics import EpochRecord
from trainer.progress import Point, RunInfo


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return table


_CRC32C = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum of TFRecord framing."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC: rotated right by 15 bits plus a constant."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def framed(data: bytes) -> bytes:
    """One TFRecord: little-endian length, its masked CRC, the data, the data's masked CRC."""
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc32c(header)) + data + struct.pack("<I", masked_crc32c(data))


class EventFile:
    """One TensorBoard event file, opened with a purge at ``purge_step``."""

    _opened = itertools.count()  # tensorboard's _global_uid: two files of one process differ

    def __init__(self, directory: Path, purge_step: int) -> None:
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog, SourceMetadata
        from tensorboard.compat.proto.summary_pb2 import Summary

        self._event, self._summary = Event, Summary
        stamp, host, uid = int(time.time()), socket.gethostname(), next(self._opened)
        name = f"events.out.tfevents.{stamp:010d}.{host}.{os.getpid()}.{uid}"
        self.path = directory / name
        self._file = self.path.open("ab")  # a same-named file (a restart within its second) is kept
        writer = SourceMetadata(writer="trainer.curves")
        self._write(Event(wall_time=time.time(), file_version="brain.Event:2", source_metadata=writer))
        self._write(Event(wall_time=time.time(), step=purge_step, file_version="brain.Event:2"))
        self._write(
            Event(wall_time=time.time(), step=purge_step, session_log=SessionLog(status=SessionLog.START))
        )
        self.flush()

    def scalars(self, values: dict[str, float], step: int) -> None:
        """Each value its own event at ``step``, as ``add_scalar`` writes them."""
        for tag, value in values.items():
            summary = self._summary(value=[self._summary.Value(tag=tag, simple_value=float(value))])
            self._write(self._event(wall_time=time.time(), step=step, summary=summary))
        self.flush()

    def _write(self, event: Any) -> None:
        self._file.write(framed(event.SerializeToString()))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class TensorBoardSink:
    name = "tensorboard"

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.file: EventFile | None = None

    def started(self, info: RunInfo) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.file = EventFile(self.directory, purge_step=info.start_step + 1)

    def point(self, point: Point) -> None:
        assert self.file is not None
        self.file.scalars(
            {
                "train/loss": point.train_loss,
                "train/lr": point.lr,
                "train/samples_per_s": point.samples_per_s,
            },
            point.step,
        )

    def epoch(self, record: EpochRecord, step: int) -> None:
        assert self.file is not None
        self.file.scalars(
            {
                "test/loss": record.test_loss,
                "test/accuracy": record.test_accuracy,
                "train/epoch_loss": record.train_loss,
            },
            step,
        )

    def finished(self, succeeded: bool) -> None:
        # The process ends with os._exit (trainer.__main__.exit_process): nothing flushes after this.
        if self.file is not None:
            self.file.close()
