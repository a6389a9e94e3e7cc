"""A finished run, seen by the launcher before torchrun: no rendezvous, and the export retried alone.

A run is finished when the newest valid checkpoint of its ``--checkpoint-dir`` is the final epoch of
this schedule (the same total steps), and its ``--output-dir`` holds ``model.pt`` and the
``metrics.json`` of that checkpoint's history. Every node decides this from the same files (the
checkpoint volume is shared), and then none of them starts torchrun:

- node rank > 0 exits 0 at once;
- node rank 0 appends the restart to ``metrics.json`` (as the trainer does for a finished run) and,
  with ``--export-to``, checks the destination and uploads what is missing
  (:func:`trainer.export.export_model`), its failure being its own exit code (4, 205, 207).

This is what makes a failed export retryable on every job kind: the restarted rank-0 pod needs no
other rank, where a torchrun would wait for a rendezvous that the other nodes, already done, never
join (a PyTorchJob under ``OnFailure`` restarts only the failed Master; an Indexed Job only the failed
index). A run that is not finished by this test (no checkpoint, an earlier epoch, another schedule,
results missing) goes through torchrun and the trainer as before.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from trainer.errors import TrainerError

MNIST_TRAIN_IMAGES = 60000


@dataclass(frozen=True)
class FinishedRun:
    checkpoint: Path
    epochs: int
    history: list[Any]
    output_dir: Path
    export_to: str | None


def trainer_config(module: bool, script: str, args: Sequence[str]) -> Any | None:
    """The trainer's config when torchrun runs ``-m trainer``; None for anything else or bad flags
    (the trainer reports those itself)."""
    if not module or script != "trainer":
        return None
    from trainer.cli import parse_config

    try:
        # argparse's own output (an error, --help) is the trainer's to print, under torchrun.
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            return parse_config(list(args))
    except (SystemExit, TrainerError):
        return None


def finished_run(config: Any, world_size: int) -> FinishedRun | None:
    """The run, if it is finished with its results in place (see the module docstring)."""
    import torch

    from trainer import checkpoint
    from trainer.metrics import METRICS_FILE, MODEL_FILE
    from trainer.scaling import plan_batches

    train_size = min(config.train_limit, MNIST_TRAIN_IMAGES) if config.train_limit > 0 else MNIST_TRAIN_IMAGES
    try:
        plan = plan_batches(config.batch_size, config.scaling, world_size, train_size)
    except TrainerError:
        return None
    found = checkpoint.newest_valid(config.checkpoint_dir, lambda _: None)
    if found is None:
        return None
    try:
        state = checkpoint.decode(found[1], torch.device("cpu"))
    except Exception:  # noqa: BLE001 (unreadable: the trainer reports it)
        return None
    total_steps = plan.steps_per_epoch * config.epochs
    if state.get("total_steps") != total_steps or state.get("epoch", 0) < config.epochs:
        return None
    history = state.get("history", [])
    try:
        metrics = json.loads((config.output_dir / METRICS_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(metrics, dict) or metrics.get("history") != history:
        return None
    if not (config.output_dir / MODEL_FILE).is_file():
        return None
    return FinishedRun(found[0], config.epochs, history, config.output_dir, config.export_to)


def conclude(run: FinishedRun, node_rank: int, world_size: int, say: Callable[[str], None]) -> None:
    """What a node of a finished run does instead of torchrun; raises the export's TrainerError."""
    started = time.perf_counter()
    if node_rank > 0:
        say(f"run already finished ({run.checkpoint}); node rank {node_rank} has nothing to do")
        return
    from trainer.metrics import EpochRecord, record_restart

    say(
        f"run already finished ({run.checkpoint}, with metrics.json and model.pt in {run.output_dir}); "
        + ("retrying its export alone, without torchrun" if run.export_to else "nothing to train")
    )
    record_restart(
        run.output_dir,
        [EpochRecord(**record) for record in run.history],
        {
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "resumed_from_epoch": run.epochs,
            "epochs_trained": 0,
            "world_size": world_size,
            "wall_time_s": time.perf_counter() - started,
            "outcome": "run already finished; metrics.json and model.pt kept"
            + ("; export checked by the launcher alone" if run.export_to else ""),
        },
    )
    if run.export_to is not None:
        from trainer.export import export_model

        export_model(run.output_dir, run.export_to, True, say)
