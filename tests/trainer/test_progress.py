"""The progress layer on its own: points, the ETA, the console's cadence, a failing sink dropped."""

from __future__ import annotations

from typing import Any

import pytest

from trainer import progress
from trainer.metrics import EpochRecord
from trainer.progress import ConsoleSink, Point, Progress, RunInfo, format_seconds, progress_line

INFO = RunInfo(
    total_steps=100,
    start_step=20,
    steps_per_epoch=50,
    epochs=2,
    global_batch=64,
    world_size=2,
    backend="gloo",
)


class Recorder:
    name = "recorder"

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def started(self, info: RunInfo) -> None:
        self.calls.append(("started", info))

    def point(self, point: Point) -> None:
        self.calls.append(("point", point))

    def epoch(self, record: EpochRecord, step: int) -> None:
        self.calls.append(("epoch", step))

    def finished(self, succeeded: bool) -> None:
        self.calls.append(("finished", succeeded))


class Broken(Recorder):
    name = "broken"

    def point(self, point: Point) -> None:
        raise OSError(28, "No space left on device")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(progress.time, "perf_counter", fake)
    return fake


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "?"), (0.4, "0s"), (42, "42s"), (185, "3m05s"), (3720, "1h02m"), (-3, "0s")],
)
def test_format_seconds(seconds: float | None, text: str) -> None:
    assert format_seconds(seconds) == text


def test_points_count_global_steps_from_the_resumed_step_with_rate_and_eta(clock: Clock) -> None:
    sink = Recorder()
    tracker = Progress([sink], INFO, started=990.0)
    clock.now += 5.0  # 10 steps of epoch 1 after the resumed 20: 30 of 100
    tracker.steps_done(1, 30, 0.5, 0.01)
    (_, point) = sink.calls[-1]
    assert (point.step, point.total_steps, point.percent, point.epoch) == (30, 100, 30.0, 1)
    assert point.samples_per_s == pytest.approx(10 * 64 / 5.0)
    assert point.eta_s == pytest.approx(70 * 5.0 / 10)  # this attempt's pace: 0.5 s a step
    assert point.elapsed_s == pytest.approx(15.0)
    assert progress_line(point) == (
        "progress step  30/100  30.0% epoch 1/2 loss=0.5000 lr=0.01 samples/s=128 eta=35s"
    )
    # Evaluation between epochs does not count against the next window's samples/s.
    record = EpochRecord(1, 0.5, 0.4, 0.9, 100.0, 10.0, 20.0)
    clock.now += 3.0
    tracker.epoch_done(record)
    assert sink.calls[-1] == ("epoch", 50)
    clock.now += 2.0
    tracker.steps_done(2, 4, 0.3, 0.005)
    (_, point) = sink.calls[-1]
    assert point.step == 54 and point.samples_per_s == pytest.approx(24 * 64 / 2.0)


def test_a_failing_sink_is_dropped_with_one_line_and_the_others_go_on(
    clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    good, broken = Recorder(), Broken()
    tracker = Progress([broken, good], INFO, started=990.0)
    for step in (25, 30):
        clock.now += 1.0
        tracker.steps_done(1, step, 0.5, 0.01)
    tracker.finished(True)
    assert capsys.readouterr().out == "trainer: broken progress stopped: [Errno 28] No space left on device\n"
    assert [name for name, _ in good.calls] == ["started", "point", "point", "finished"]
    assert [name for name, _ in broken.calls] == ["started"]


def test_the_console_prints_at_its_interval_and_at_every_epoch_end(
    clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    tracker = Progress([ConsoleSink(10.0)], INFO, started=990.0)
    for step in range(25, 51, 5):  # a point every 5 steps, 3 s apart; the epoch ends at step 50
        clock.now += 3.0
        tracker.steps_done(1, step, 0.5, 0.01)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[3] for line in lines] == ["40/100", "50/100"]
