"""Checkpoints of a run and its resumption: the state a checkpoint holds (`snapshot`), the newest valid
one loaded on every rank (`resume`), and a checkpoint of another schedule or model moved aside
(`superseded`)."""

from __future__ import annotations

import random
from typing import Any

import torch
from torch import nn

from trainer import checkpoint, dist
from trainer.metrics import LINEAGE_FILE, METRICS_FILE, MODEL_FILE, EpochRecord
from trainer.run import Run, Start, log


def snapshot(
    run: Run,
    epoch: int,
    history: list[EpochRecord],
    step: int = 0,
    loss_sums: list[float] | None = None,
    train_seconds: float = 0.0,
) -> dict[str, Any]:
    """A checkpoint's state after ``epoch`` epochs and ``step`` steps of the next; ``loss_sums`` are
    each rank's training loss summed over those steps, ``train_seconds`` the time they took."""
    cuda_rng = torch.cuda.get_rng_state_all() if run.device.type == "cuda" else []
    return {
        "epoch": epoch,
        "step": step,
        "loss_sums": loss_sums or [],
        "train_seconds": train_seconds,
        "epochs": run.config.epochs,
        "total_steps": run.plan.steps_per_epoch * run.config.epochs,
        "model": run.module.state_dict(),
        "optimizer": run.optimizer.state_dict(),
        "scheduler": run.scheduler.state_dict(),
        "rng": {"torch": torch.get_rng_state(), "cuda": cuda_rng, "python": random.getstate()},
        "history": [record.as_dict() for record in history],
    }


def resume(run: Run) -> Start:
    """Rank 0 picks the newest valid checkpoint and sends its bytes to all ranks; all load it."""
    message = b""
    if run.env.is_main:
        found = checkpoint.newest_valid(run.config.checkpoint_dir, lambda line: log(run.env, line))
        message = b"" if found is None else str(found[0]).encode() + b"\n" + found[1]
    message = dist.broadcast_bytes(message, run.device)
    if not message:
        log(run.env, f"no checkpoint in {run.config.checkpoint_dir}; starting at epoch 1")
        return Start()
    raw_path, _, payload = message.partition(b"\n")
    path = raw_path.decode()
    state = checkpoint.decode(payload, run.device)
    total_steps = run.plan.steps_per_epoch * run.config.epochs
    if state["total_steps"] != total_steps:
        why = (
            f"schedule changed: {path} was written by a run with {state['total_steps']} total steps "
            f"(--epochs={state['epochs']}), this run has {total_steps}"
        )
        return superseded(run, state, why, "that schedule's")
    if not model_fits(run.module, state["model"]):
        why = f"model changed: {path} holds parameters of another model (names or shapes differ)"
        return superseded(run, state, why, "that model's")
    run.module.load_state_dict(state["model"])
    run.optimizer.load_state_dict(state["optimizer"])
    run.scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"]["torch"].cpu())
    if state["rng"]["cuda"]:
        torch.cuda.set_rng_state_all([s.cpu() for s in state["rng"]["cuda"]])
    random.setstate(state["rng"]["python"])
    start = Start(
        state["epoch"],
        state.get("step", 0),
        rank_loss_sum(state.get("loss_sums", []), run.env),
        state.get("train_seconds", 0.0),
        [EpochRecord(**record) for record in state["history"]],
    )
    within = f", {mid_epoch(run, start.epoch, start.step)}" if start.step else ""
    log(run.env, f"resumed from {path} (epoch {start.epoch}/{run.config.epochs}{within})")
    return start


def mid_epoch(run: Run, epoch: int, step: int) -> str:
    """``step 13/50 of epoch 2``: where a run is ``step`` steps after ``epoch`` epochs."""
    return f"step {step}/{run.plan.steps_per_epoch} of epoch {epoch + 1}"


def rank_loss_sum(loss_sums: list[float], env: dist.DistEnv) -> float:
    """This rank's share of a mid-epoch checkpoint's loss sums: its own under the same world size
    (the epoch's mean loss is then the uninterrupted run's, bit for bit); else rank 0 takes the total."""
    if len(loss_sums) == env.world_size:
        return loss_sums[env.rank]
    return sum(loss_sums) if env.is_main else 0.0


def model_fits(module: nn.Module, saved: dict[str, torch.Tensor]) -> bool:
    """Whether a checkpoint's ``saved`` state_dict has this model's names and shapes (a checkpoint
    written before the model's layout changed has not)."""
    current = module.state_dict()
    return saved.keys() == current.keys() and all(saved[k].shape == v.shape for k, v in current.items())


def superseded(run: Run, state: dict[str, Any], why: str, whose: str) -> Start:
    """The newest checkpoint has another schedule or model: rank 0 moves its files aside, and every
    rank starts at epoch 1 (all ranks decoded the same checkpoint, so all agree)."""
    config = run.config
    moved = "its files"
    if run.env.is_main:
        results = [config.output_dir / name for name in (METRICS_FILE, MODEL_FILE, LINEAGE_FILE)]
        if config.tensorboard_dir is not None:
            results.append(config.tensorboard_dir)
        moved = str(checkpoint.supersede(config.checkpoint_dir, state["total_steps"], results))
    log(
        run.env,
        f"{why}; moved {whose} checkpoints, results and curves to {moved}; starting at epoch 1",
    )
    return Start()
