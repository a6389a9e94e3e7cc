"""Per-epoch records, the final metrics.json and the exported model (with a SHA256SUMS of it)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import resource
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer.fsio import atomic_write_bytes, atomic_write_json
from trainer.mnist_files import SUMS_FILE, format_sums

METRICS_FILE = "metrics.json"
MODEL_FILE = "model.pt"
LINEAGE_FILE = "lineage.json"  # trainer.lineage writes its content


@dataclass(frozen=True)
class EpochRecord:
    """One epoch as logged and stored (accuracy is a fraction in [0, 1])."""

    epoch: int
    train_loss: float
    test_loss: float
    test_accuracy: float
    samples_per_s: float
    train_seconds: float
    elapsed_s: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self, epochs: int) -> str:
        return (
            f"epoch {self.epoch}/{epochs} loss={self.train_loss:.4f} "
            f"test_loss={self.test_loss:.4f} test_acc={100 * self.test_accuracy:.2f}% "
            f"samples/s={self.samples_per_s:.0f} elapsed={self.elapsed_s:.1f}s"
        )


@dataclass
class Lap:
    """The length of one timed phase, set when its ``with`` block ends."""

    seconds: float = 0.0


@dataclass
class Stopwatch:
    """Seconds this process spent in each named phase, summed over repeats (e.g. every epoch).

    ``started_unix`` is the wall-clock time the process's trainer began, which another process
    (the benchmark) can compare with its own launch time.
    """

    started_unix: float
    seconds: dict[str, float] = field(default_factory=dict)
    # When this process reached each milestone of its start-up (``mark``), as wall-clock times.
    marks: dict[str, float] = field(default_factory=dict)

    def mark(self, name: str) -> None:
        """Record that this process reached ``name`` now (the first time only)."""
        self.marks.setdefault(name, time.time())

    @classmethod
    def since(cls, started: float, phase: str) -> Stopwatch:
        """A stopwatch whose first phase ran from ``started`` (a ``perf_counter`` reading) until now."""
        elapsed = time.perf_counter() - started
        now = time.time()
        marks = {"process": process_started_unix(), "main": now - elapsed, phase: now}
        return cls(
            started_unix=now - elapsed,
            seconds={phase: elapsed},
            marks={name: at for name, at in marks.items() if at is not None},
        )

    @contextmanager
    def phase(self, name: str) -> Iterator[Lap]:
        lap = Lap()
        tick = time.perf_counter()
        try:
            yield lap
        finally:
            lap.seconds = time.perf_counter() - tick
            self.seconds[name] = self.seconds.get(name, 0.0) + lap.seconds

    def line(self) -> str:
        return " ".join(f"{name}={seconds:.2f}s" for name, seconds in self.seconds.items())


def process_started_unix() -> float | None:
    """When the kernel started this process, as a wall-clock time (to its clock tick, 10 ms), or None
    where there is no ``/proc``: its ``starttime`` (the 22nd field of ``/proc/self/stat``, clock ticks
    since boot, proc(5)) against ``CLOCK_BOOTTIME`` now."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        since_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - since_boot
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return time.time() - age


def peak_rss_mib() -> float:
    """This process's peak resident set size (``ru_maxrss`` is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024


def summary(history: list[EpochRecord], extra: dict[str, Any]) -> dict[str, Any]:
    """metrics.json content: final figures, throughput over the epochs trained, history."""
    final = history[-1] if history else None
    train_seconds = sum(record.train_seconds for record in history)
    samples = sum(record.samples_per_s * record.train_seconds for record in history)
    return {
        "final_test_accuracy": final.test_accuracy if final else None,
        "final_test_loss": final.test_loss if final else None,
        "final_train_loss": final.train_loss if final else None,
        "samples_per_s": samples / train_seconds if train_seconds else None,
        "train_time_s": train_seconds,
        "history": [record.as_dict() for record in history],
        **extra,
    }


def export_results(
    output_dir: Path,
    module: nn.Module,
    history: list[EpochRecord],
    extra: dict[str, Any],
    lineage: Callable[[str, dict[str, Any]], bytes] | None = None,
) -> None:
    """Write ``model.pt`` (the unwrapped module's state_dict), lineage.json, SHA256SUMS and
    metrics.json, each atomically, in that order.

    ``lineage`` makes lineage.json's bytes from model.pt's sha256 and metrics.json's content
    (:mod:`trainer.lineage`); without it no lineage.json is written. SHA256SUMS (``sha256sum``
    format) lists model.pt and lineage.json, so ``sha256sum -c`` and ``python -m trainer.serve
    --model-uri <output dir>`` can verify them; metrics.json is left out because a restart of the
    finished run appends to it. metrics.json goes last: a run is finished only once it is there
    (:mod:`trainer.finished`), so a crash before it exports everything again.
    """
    buffer = io.BytesIO()
    torch.save({name: t.contiguous() for name, t in module.state_dict().items()}, buffer)
    model_bytes = buffer.getvalue()
    atomic_write_bytes(output_dir / MODEL_FILE, model_bytes)
    sums = {MODEL_FILE: hashlib.sha256(model_bytes).hexdigest()}
    metrics = summary(history, extra)
    if lineage is not None:
        lineage_bytes = lineage(sums[MODEL_FILE], metrics)
        atomic_write_bytes(output_dir / LINEAGE_FILE, lineage_bytes)
        sums[LINEAGE_FILE] = hashlib.sha256(lineage_bytes).hexdigest()
    atomic_write_bytes(output_dir / SUMS_FILE, format_sums(sums).encode())
    atomic_write_json(output_dir / METRICS_FILE, metrics)


def record_restart(output_dir: Path, history: list[EpochRecord], restart: dict[str, Any]) -> bool:
    """Append ``restart`` to the ``restarts`` list of this run's ``metrics.json``, keeping its figures.

    The file is this run's when its history is the checkpoint's ``history``. Returns False (and
    writes nothing) when there is no such file, so the caller exports the results instead.
    """
    path = output_dir / METRICS_FILE
    try:
        metrics = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(metrics, dict) or metrics.get("history") != [record.as_dict() for record in history]:
        return False
    metrics["restarts"] = [*metrics.get("restarts", []), restart]
    atomic_write_json(path, metrics)
    return True
