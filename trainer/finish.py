"""The end of a run: every rank's checksum and memory gathered, then rank 0 writes metrics.json,
model.pt and lineage.json (or, for a finished run started again, records the restart)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from functools import partial
from typing import Any

from trainer import dist
from trainer.metrics import METRICS_FILE, EpochRecord, export_results, peak_rss_mib, record_restart
from trainer.model import state_dict_sha256
from trainer.run import Run, log


def finish(run: Run, history: list[EpochRecord], resumed_from: int) -> None:
    """Gather per-rank checksums and memory, then rank 0 exports model.pt and metrics.json.

    A restart of a finished run trained nothing: it keeps that run's files and figures and only
    appends itself to ``restarts`` in metrics.json.
    """
    dist.broadcast_buffers_from_main(run.module)
    checksums = [
        raw.decode() for raw in dist.gather_bytes(state_dict_sha256(run.module).encode(), run.device)
    ]
    rss = [
        round(float(raw.decode()), 1)
        for raw in dist.gather_bytes(f"{peak_rss_mib():.1f}".encode(), run.device)
    ]
    marks = [json.loads(raw) for raw in dist.gather_bytes(json.dumps(run.clock.marks).encode(), run.device)]
    if run.env.is_main:
        metrics_path = run.config.output_dir / METRICS_FILE
        log(run.env, f"time {run.clock.line()}")
        if resumed_from >= run.config.epochs and record_restart(
            run.config.output_dir, history, restart_record(run, resumed_from)
        ):
            log(run.env, f"kept {metrics_path} and model.pt of the finished run; recorded this restart")
        else:
            export_results(
                run.config.output_dir,
                run.module,
                history,
                results(run, resumed_from, checksums, rss, marks),
                partial(lineage_bytes, run, resumed_from),
            )
            log(run.env, f"wrote {metrics_path} and model.pt")
    dist.wait_for_all_ranks()


def results(
    run: Run, resumed_from: int, checksums: list[str], rss: list[float], marks: list[dict[str, float]]
) -> dict[str, Any]:
    """metrics.json's run-level fields (the per-epoch figures come from the history)."""
    return {
        "world_size": run.env.world_size,
        "backend": run.backend,
        "device": str(run.device),
        "scaling": run.config.scaling,
        "per_rank_batch": run.plan.per_rank_batch,
        "global_batch": run.plan.global_batch,
        "steps_per_epoch": run.plan.steps_per_epoch,
        "lr": run.lr,
        "epochs": run.config.epochs,
        "resumed_from_epoch": resumed_from,
        "wall_time_s": time.perf_counter() - run.started,
        "started_unix": run.clock.started_unix,
        "phase_seconds": run.clock.seconds,
        "state_dict_sha256_per_rank": checksums,
        "peak_rss_mib_per_rank": rss,
        # Each rank's start-up milestones (process, main, imports, data, rendezvous, model, first_step),
        # wall-clock times: bench/bench_trainer.py prints them against its launch.
        "milestones_unix_per_rank": marks,
        "restarts": [],
    }


def lineage_bytes(run: Run, resumed_from: int, model_sha256: str, summary: dict[str, Any]) -> bytes:
    """lineage.json for :func:`trainer.metrics.export_results` (see :mod:`trainer.lineage`)."""
    from trainer import lineage

    return lineage.encode(
        lineage.record(
            run.config,
            model_sha256=model_sha256,
            summary=summary,
            world_size=run.env.world_size,
            backend=run.backend,
            device=str(run.device),
            started_unix=run.clock.started_unix,
            resumed_from_epoch=resumed_from,
            data=run.data.files,
        )
    )


def restart_record(run: Run, resumed_from: int) -> dict[str, Any]:
    """One ``restarts`` entry: when a finished run was started again, and that it trained nothing."""
    return {
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "resumed_from_epoch": resumed_from,
        "epochs_trained": 0,
        "world_size": run.env.world_size,
        "wall_time_s": time.perf_counter() - run.started,
        "outcome": "run already finished; metrics.json and model.pt kept",
    }
