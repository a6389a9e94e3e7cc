"""``python -m trainer``: parse flags, train; a user error becomes one line and an exit code."""

from __future__ import annotations

import os
import sys
import time
from typing import NoReturn

from trainer.cli import parse_config
from trainer.errors import EXIT_PEER_LOST, TrainerError, write_line


def main(argv: list[str] | None = None) -> int:
    """Run the trainer; returns the process exit code (see :mod:`trainer.errors`).

    Any exception other than a :class:`TrainerError` is a bug: it propagates, and Python prints its
    traceback and exits 1.
    """
    started = time.perf_counter()
    config = parse_config(argv)
    from trainer.train import run_training

    try:
        run_training(config, started)
    except TrainerError as error:
        sys.stdout.flush()
        write_line(error.one_line())
        return error.exit_code
    return 0


def exit_process(code: int) -> NoReturn:
    """Exit with ``code``; after a lost peer, without the interpreter's teardown.

    The broken process group is still alive then, and destroying it at interpreter exit can block on
    the lost peer (NCCL's communicator abort, gloo's pending work) or abort the process ("terminate
    called ..."), which would turn exit code 200 into 134. The one line is already written.
    """
    if code == EXIT_PEER_LOST:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    exit_process(main())
