"""Watching a run while it runs: progress points at a steady cadence, fanned out to sinks.

Rank 0 alone reports. Every ``--log-every`` optimizer steps the epoch loop hands rank 0's mean
training loss over those steps (rank 0's own batches: no collective is added to the step) to
:class:`Progress`, which makes a :class:`Point` (step/total, percent, samples/s, ETA, learning rate)
and gives it to each sink:

- :class:`ConsoleSink`: a short ``progress`` line, at most one per ``--progress-seconds`` and at every
  epoch end, for ``kubectl logs -f`` and ``make run``;
- :mod:`trainer.curves`: TensorBoard event files on the checkpoint volume;
- the TrainJob progress report and MLflow, when configured.

A sink that raises is dropped with one line naming it and the error: watching a run never fails it.
Steps are global optimizer steps counted from the start of the run (a resumed run continues the
count), so every sink sees the same step for the same point.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from trainer.errors import write_line
from trainer.metrics import EpochRecord


@dataclass(frozen=True)
class RunInfo:
    """What a sink knows when the run starts (after resume)."""

    total_steps: int
    start_step: int  # steps already done (a resumed run's checkpoint); 0 for a fresh run
    steps_per_epoch: int
    epochs: int
    global_batch: int
    world_size: int
    backend: str
    params: dict[str, Any] = field(default_factory=dict)  # the settings that shape the result


@dataclass(frozen=True)
class Point:
    """One progress report; ``step`` counts optimizer steps done since the run began."""

    step: int
    total_steps: int
    epoch: int
    epochs: int
    train_loss: float  # rank 0's mean training loss over the steps since the previous point
    lr: float  # the learning rate of the point's last step
    samples_per_s: float  # global samples per second over the steps since the previous point
    elapsed_s: float  # since the trainer started
    eta_s: float | None  # seconds to the end of training at this attempt's pace so far

    @property
    def percent(self) -> float:
        return 100.0 * self.step / self.total_steps if self.total_steps else 100.0


class Sink(Protocol):
    """Where progress goes. Every method may raise; :class:`Progress` then drops the sink."""

    name: str

    def started(self, info: RunInfo) -> None: ...

    def point(self, point: Point) -> None: ...

    def epoch(self, record: EpochRecord, step: int) -> None: ...

    def finished(self, succeeded: bool) -> None: ...


def format_seconds(seconds: float | None) -> str:
    """``1h02m``, ``3m05s``, ``42s``; ``?`` when unknown."""
    if seconds is None:
        return "?"
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def progress_line(point: Point) -> str:
    width = len(str(point.total_steps))
    return (
        f"progress step {point.step:>{width}}/{point.total_steps} {point.percent:5.1f}% "
        f"epoch {point.epoch}/{point.epochs} loss={point.train_loss:.4f} lr={point.lr:.3g} "
        f"samples/s={point.samples_per_s:.0f} eta={format_seconds(point.eta_s)}"
    )


class ConsoleSink:
    """``trainer: progress ...`` lines on stdout, at most one per ``interval_s`` (0: every point)."""

    name = "console"

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.last = time.perf_counter()
        self.steps_per_epoch = 0

    def started(self, info: RunInfo) -> None:
        self.last = time.perf_counter()
        self.steps_per_epoch = info.steps_per_epoch

    def point(self, point: Point) -> None:
        now = time.perf_counter()
        epoch_end = self.steps_per_epoch > 0 and point.step % self.steps_per_epoch == 0
        if now - self.last >= self.interval_s or epoch_end:
            write_line(f"trainer: {progress_line(point)}", sys.stdout)
            self.last = now

    def epoch(self, record: EpochRecord, step: int) -> None:
        pass

    def finished(self, succeeded: bool) -> None:
        pass


class Progress:
    """Turns the epoch loop's reports into :class:`Point` s and hands them to the sinks (rank 0)."""

    def __init__(self, sinks: Iterable[Sink], info: RunInfo, started: float) -> None:
        self.sinks = list(sinks)
        self.info = info
        self.started = started  # perf_counter at process start: elapsed_s is since then
        self.step = info.start_step
        self.window_start = time.perf_counter()
        self.window_step = info.start_step
        self.attempt_start = self.window_start
        self._each("started", info)

    def _each(self, method: str, *args: Any) -> None:
        for sink in list(self.sinks):
            try:
                getattr(sink, method)(*args)
            except Exception as error:  # noqa: BLE001 - a sink never fails the run
                self.sinks.remove(sink)
                text = " ".join(str(error).split()) or type(error).__name__
                write_line(f"trainer: {sink.name} progress stopped: {text}", sys.stdout)

    def steps_done(self, epoch: int, steps_in_epoch: int, mean_loss: float, lr: float) -> None:
        """The epoch loop's report: ``steps_in_epoch`` steps of ``epoch`` are done."""
        now = time.perf_counter()
        info = self.info
        self.step = (epoch - 1) * info.steps_per_epoch + steps_in_epoch
        window_steps = self.step - self.window_step
        window_s = now - self.window_start
        rate = window_steps * info.global_batch / window_s if window_s > 0 else 0.0
        done_this_attempt = self.step - info.start_step
        attempt_s = now - self.attempt_start
        eta = (
            (info.total_steps - self.step) * attempt_s / done_this_attempt if done_this_attempt > 0 else None
        )
        point = Point(
            step=self.step,
            total_steps=info.total_steps,
            epoch=epoch,
            epochs=info.epochs,
            train_loss=mean_loss,
            lr=lr,
            samples_per_s=rate,
            elapsed_s=now - self.started,
            eta_s=eta,
        )
        self.window_start, self.window_step = now, self.step
        self._each("point", point)

    def epoch_done(self, record: EpochRecord) -> None:
        self._each("epoch", record, record.epoch * self.info.steps_per_epoch)
        # Evaluation is not training: the next window's samples/s starts after it.
        self.window_start = time.perf_counter()

    def finished(self, succeeded: bool) -> None:
        self._each("finished", succeeded)
        self.sinks = []
