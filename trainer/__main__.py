"""``python -m trainer``: parse flags, train; a user error becomes one line and an exit code."""

from __future__ import annotations

import sys
import time

from trainer.cli import parse_config
from trainer.errors import TrainerError, write_line


def main(argv: list[str] | None = None) -> int:
    """Run the trainer; returns the process exit code (see :mod:`trainer.errors`)."""
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


if __name__ == "__main__":
    sys.exit(main())
