"""The launcher reads the dataset while it imports torch, so that the ranks it forks find it in memory.

``python -m trainer.launch`` spends seconds importing torch before it can fork a rank (torch's CUDA
build: 2-4 s), on one core. Each rank then read, hashed and decoded MNIST's four files itself (0.3 s on
our CPUs, 0.4-0.6 s on a GPU machine's, per rank). Here a thread of the launcher does that during the
import (:func:`trainer.mnist_files.read_ahead`: the bytes, their sha256 and the decoded arrays); the
ranks forked afterwards inherit the result, copy-on-write, and use it for every file whose identity and
change time are still those it was read with. Anything else (a file changed since, an s3:// dataset, a
read that failed or has not finished) the rank reads itself, as it always did, and reports any problem
itself.

Only the launcher's memory is used: nothing is written, and a rank started by exec reads as before.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

from trainer.cli import build_parser
from trainer.mnist_files import read_ahead

# How long the launcher waits for the read before it forks the ranks anyway (they then read for
# themselves what it has not read: nothing is lost but the time).
WAIT_S = 60.0
TRAINER_MODULE = "trainer"


def data_root(torchrun_args: Sequence[str]) -> Path | None:
    """The local dataset root of the trainer that ``torchrun_args`` run (``-m trainer``), from its last
    ``--data`` flag as argparse would take it, else the trainer's default; None for an S3 dataset or a
    command that is not the trainer's."""
    args = list(torchrun_args)
    if TRAINER_MODULE not in args:
        return None
    trainer_args = args[args.index(TRAINER_MODULE) + 1 :]
    data: str = build_parser().get_default("data")
    for index, arg in enumerate(trainer_args):
        if arg == "--data" and index + 1 < len(trainer_args):
            data = trainer_args[index + 1]
        elif arg.startswith("--data="):
            data = arg.removeprefix("--data=")
    if data.startswith("s3://"):
        return None
    return Path(data)


class ReadAhead:
    """The read in a daemon thread, started at once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.paths: list[str] = []
        self._thread = threading.Thread(target=self._read, name="read-ahead", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        self.paths = read_ahead(self.root)

    def wait(self, timeout: float = WAIT_S) -> list[str]:
        """The paths read ahead so far, after waiting (at most ``timeout`` s) for the read to end."""
        self._thread.join(timeout)
        return list(self.paths)


def start(torchrun_args: Sequence[str]) -> ReadAhead | None:
    """A read-ahead of the dataset that ``torchrun_args``' trainer will read, if it reads a local one."""
    root = data_root(torchrun_args)
    return None if root is None else ReadAhead(root)
