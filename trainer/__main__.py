"""``python -m trainer``: parse flags, train; a user error becomes one line and an exit code."""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import NoReturn

from trainer.cli import parse_config
from trainer.errors import EXIT_INTERNAL, TrainerError, record_fatal, write_line


def main(argv: list[str] | None = None) -> int:
    """Run the trainer; returns the process exit code (see :mod:`trainer.errors`).

    Any exception other than a :class:`TrainerError` is a bug: it propagates, and
    :func:`run_as_process` prints its traceback and exits 1.
    """
    started = time.perf_counter()
    config = parse_config(argv)
    from trainer.train import run_training

    try:
        run_training(config, started)
    except TrainerError as error:
        sys.stdout.flush()
        write_line(error.one_line())
        record_fatal(error.one_line(), error.exit_code)
        return error.exit_code
    return 0


def exit_process(code: int) -> NoReturn:
    """Flush stdout and stderr, then end the process with ``code`` without interpreter finalization.

    Every output the trainer leaves is complete on disk before this runs (checkpoints, ``model.pt``
    and ``metrics.json`` go through :mod:`trainer.fsio`: fsynced, renamed, directory fsynced) and the
    export has returned, so finalization has nothing left to save. What it would still do is tear
    down what torch's distributed runtime leaves behind, and that teardown can change the exit code:

    - after a finished run, ``destroy_process_group()`` has shut the backend down and dropped the
      default group from torch's registry, but the C++ objects behind it (ProcessGroupGloo and its
      worker threads, the gloo transport's device and pairs, the store client) live on while anything
      still holds them (the DDP module's reducer keeps the group), and are torn down during
      finalization, in an order nobody controls, while other threads may still run. Short 2-rank
      gloo runs ended that way about 3% of the time (5 in 157 on an idle machine;
      ``bench/stress_exit.py``): one rank died in that teardown with libstdc++'s "terminate called
      without an active exception" (what ``std::terminate()`` prints with no exception active, e.g.
      from the destructor of a ``std::thread`` that is still joinable), SIGABRT, exit 134, after it
      had passed the final barrier and rank 0 had written everything. torchrun then stops the other
      ranks and reports the run failed (on a cluster: a failed pod, a restarted or failed job, and an
      export cut short by SIGTERM);
    - after a lost peer the process group is broken, and tearing it down can block on the lost peer
      (NCCL's communicator abort, gloo's pending work), which would turn exit 200 into a hang;
    - after a usage, data, credentials or export error (2-4, 205, 207) the same objects may exist.

    ``os._exit`` skips all of it: no ``atexit`` handlers (the trainer registers none), no object
    finalizers, no C++ static destructors. The exit code is exactly the trainer's, whatever torch's
    teardown would have done. The race itself has no known deterministic trigger; the stress figure
    in ``docs/BENCHMARKS.md`` is the evidence (``tests/trainer/test_exit.py`` pins the mechanism).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def system_exit_code(stop: SystemExit) -> int:
    """The code the interpreter would exit with for ``stop`` (a message is printed, then 1)."""
    if stop.code is None or isinstance(stop.code, int):
        return stop.code or 0
    write_line(str(stop.code))
    return EXIT_INTERNAL


def exit_code(argv: list[str] | None = None) -> int:
    """:func:`main`'s exit code, whatever it raises.

    A bug keeps its traceback (printed by ``sys.excepthook``, as the interpreter would) and exit 1;
    ``SystemExit`` (argparse's exit 2 for bad flags, ``--help``'s 0) keeps its code. SIGTERM is
    recorded from here on (:mod:`trainer.preempt`): the ranks stop at an agreed step and exit 143.
    """
    from trainer import preempt

    preempt.install()
    try:
        return main(argv)
    except SystemExit as stop:
        return system_exit_code(stop)
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    except BaseException:
        sys.excepthook(*sys.exc_info())
        return EXIT_INTERNAL


def run_as_process(argv: list[str] | None = None) -> NoReturn:
    """The process entry point: :func:`exit_code`, then :func:`exit_process` with it."""
    exit_process(exit_code(argv))


if __name__ == "__main__":
    run_as_process()
