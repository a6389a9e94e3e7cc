"""The training run: setup, automatic resume, the epoch loop, checkpoints and the final export."""

from __future__ import annotations

import os
import random
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

import torch

from trainer import checkpoint, dist, engine, peers, preempt
from trainer.cli import TrainConfig
from trainer.data import load_mnist
from trainer.errors import OutputError, PeerLostError, PreemptedError, StoppedWithPeersError
from trainer.finish import finish
from trainer.fsio import writable_dir
from trainer.metrics import (
    EpochRecord,
    Stopwatch,
)
from trainer.model import build_model
from trainer.optim import AdamW, OneCycle
from trainer.progress import ConsoleSink, Progress, RunInfo, Sink
from trainer.resume import mid_epoch, resume, snapshot
from trainer.run import Run, Start, log
from trainer.scaling import plan_batches, scaled_lr

# The one-cycle schedule (trainer.optim.OneCycle, torch's OneCycleLR): warm up over PCT_START of the steps
# from max_lr / DIV_FACTOR to max_lr, then anneal (cosine) to max_lr / (DIV_FACTOR * FINAL_DIV_FACTOR).
PCT_START = 0.25
DIV_FACTOR = 25.0
FINAL_DIV_FACTOR = 1e4


def warmup_fraction(total_steps: int) -> float:
    """OneCycleLR's pct_start; it divides by ``pct_start * total_steps - 1``, so avoid exactly 1."""
    if abs(PCT_START * total_steps - 1) < 1e-9:
        return 1.5 / total_steps
    return PCT_START


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def data_root(config: TrainConfig, env: dist.DistEnv) -> Path:
    if not config.data_is_s3:
        return Path(config.data)
    from trainer.s3 import S3Location, fetch_dataset

    return fetch_dataset(S3Location.parse(config.data), config.cache_dir, env.local_rank)


def setup(config: TrainConfig, started: float) -> Run:
    """Everything before the first epoch; ``started`` is when :func:`trainer.__main__.main` began, so
    the ``imports`` phase is the time to import torch and the trainer."""
    clock = Stopwatch.since(started, "imports")
    env = dist.dist_env_from(os.environ)
    if env.is_main:
        check_writable(config.checkpoint_dir, config.output_dir)
    cuda = torch.cuda.is_available()
    backend = dist.choose_backend(config.backend, cuda)
    device = dist.choose_device(env, cuda)
    with clock.phase("data_load"):
        data = load_mnist(data_root(config, env), device, config.train_limit)
    clock.mark("data")
    plan = plan_batches(config.batch_size, config.scaling, env.world_size, len(data.train_y))
    with clock.phase("rendezvous"):
        try:
            dist.init_process_group(env, backend, device, config.dist_timeout)
        except Exception as error:
            lost = peers.joining_error(error, env.rank, config.dist_timeout, config.checkpoint_dir)
            if lost is None:
                raise
            raise lost from error
    clock.mark("rendezvous")
    with clock.phase("setup"):
        seed_everything(config.seed)
        module = build_model(device)
        # Every rank starts from rank 0's weights, as DistributedDataParallel's constructor makes them;
        # the gradients are averaged over the ranks after each backward (trainer.dist.average_gradients).
        dist.broadcast_module_from_main(module)
        lr = scaled_lr(config.lr, config.lr_scaling, env.world_size)
        optimizer = AdamW(module.parameters(), lr=lr, weight_decay=config.weight_decay)
        total_steps = plan.steps_per_epoch * config.epochs
        scheduler = OneCycle(
            optimizer,
            max_lr=lr,
            total_steps=total_steps,
            pct_start=warmup_fraction(total_steps),
            div_factor=DIV_FACTOR,
            final_div_factor=FINAL_DIV_FACTOR,
        )
    clock.mark("model")
    return Run(config, env, backend, device, data, plan, lr, module, optimizer, scheduler, started, clock)


def check_writable(*directories: Path) -> None:
    """Fail before any training, not at the first checkpoint, when rank 0 cannot write where it must."""
    for directory in dict.fromkeys(directories):
        error = writable_dir(directory)
        if error is not None:
            raise OutputError(
                f"cannot write {directory}: {error.strerror or error}; it must be writable by uid "
                f"{os.getuid()} gid {os.getgid()} (the volume's owner or mode, or the pod's fsGroup "
                "where its volume type applies one)"
            )


def describe(run: Run) -> str:
    plan = run.plan
    return (
        f"start world_size={run.env.world_size} backend={run.backend} device={run.device} "
        f"scaling={run.config.scaling} per_rank_batch={plan.per_rank_batch} "
        f"global_batch={plan.global_batch} steps_per_epoch={plan.steps_per_epoch} "
        f"epochs={run.config.epochs} lr={run.lr:g} train_images={len(run.data.train_y)}"
    )


def run_info(run: Run, start: Start) -> RunInfo:
    config, plan = run.config, run.plan
    return RunInfo(
        total_steps=plan.steps_per_epoch * config.epochs,
        start_step=plan.steps_per_epoch * start.epoch + start.step,
        steps_per_epoch=plan.steps_per_epoch,
        epochs=config.epochs,
        global_batch=plan.global_batch,
        world_size=run.env.world_size,
        backend=run.backend,
        params=run_params(run),
    )


def run_params(run: Run) -> dict[str, Any]:
    """The settings that shape the result, as an experiment tracker records them."""
    config, plan = run.config, run.plan
    return {
        "data": config.data,
        "train_limit": config.train_limit,
        "epochs": config.epochs,
        "batch_size": config.batch_size,
        "scaling": config.scaling,
        "per_rank_batch": plan.per_rank_batch,
        "global_batch": plan.global_batch,
        "steps_per_epoch": plan.steps_per_epoch,
        "lr": config.lr,
        "lr_scaling": config.lr_scaling,
        "peak_lr": run.lr,
        "weight_decay": config.weight_decay,
        "label_smoothing": config.label_smoothing,
        "seed": config.seed,
        "world_size": run.env.world_size,
        "backend": run.backend,
        "device": str(run.device),
    }


def progress_sinks(config: TrainConfig) -> list[Sink]:
    """Where rank 0's progress goes (see :mod:`trainer.progress`)."""
    sinks: list[Sink] = [ConsoleSink(config.progress_seconds)]
    if config.tensorboard_dir is not None:
        from trainer.curves import TensorBoardSink

        sinks.append(TensorBoardSink(config.tensorboard_dir))
    from trainer.trainjob_status import sinks_from_env

    sinks.extend(sinks_from_env())  # a TrainJob whose Trainer has the TrainJobStatus gate on
    from trainer.mlflow_sink import mlflow_sinks

    sinks.extend(
        mlflow_sinks(os.environ, config.output_dir, config.checkpoint_dir)
    )  # MLFLOW_TRACKING_URI set
    return sinks


def train(run: Run) -> bool:
    """Resume, train the epochs left, write the results; True if the run had already finished."""
    config, env = run.config, run.env
    log(env, describe(run))
    if run.data.read_ahead:
        log(env, "data: read ahead by the launcher before it started the ranks (files unchanged since)")
    start = resume(run)
    finished_before = start.epoch >= config.epochs
    if finished_before:
        log(env, f"run already finished ({start.epoch}/{config.epochs} epochs); nothing to train")
        train_epochs(run, start, None)
        return True
    if preempt.agreed(run.device):  # SIGTERM during start-up: nothing new to checkpoint
        stopped = PreemptedError if preempt.REQUEST.requested else StoppedWithPeersError
        raise stopped(f"{preempt.STOP_SIGNAL.name} before training; a restart resumes where this one began")
    progress = None
    if env.is_main:
        progress = Progress(progress_sinks(config), run_info(run, start), run.started)
    succeeded = False
    try:
        train_epochs(run, start, progress)
        succeeded = True
    finally:
        if progress is not None:
            progress.finished(succeeded)
    return False


def train_epochs(run: Run, start: Start, progress: Progress | None) -> None:
    """The epochs after ``start``, each checkpointed per ``--checkpoint-every``, then :func:`finish`.

    The ranks agree whether to stop (:mod:`trainer.preempt`) every ``AGREE_EVERY`` steps and after each
    epoch but the last; a stop checkpoints where they are and raises :class:`PreemptedError`.
    """
    config, env, plan, data = run.config, run.env, run.plan, run.data
    history = start.history
    shard = engine.test_shard(len(data.test_y), env.rank, env.world_size)
    for epoch in range(start.epoch + 1, config.epochs + 1):
        resumed = start if epoch == start.epoch + 1 else Start()
        batches = engine.epoch_indices(
            len(data.train_y),
            epoch,
            config.seed,
            env.rank,
            env.world_size,
            plan.per_rank_batch,
            plan.steps_per_epoch,
        )
        try:
            with run.clock.phase("train") as lap:
                train_loss = engine.train_one_epoch(
                    run.module,
                    run.optimizer,
                    run.scheduler,
                    data.train_x,
                    data.train_y,
                    batches,
                    config.label_smoothing,
                    None if progress is None else partial(progress.steps_done, epoch),
                    config.log_every,
                    start=resumed.step,
                    loss_sum_before=resumed.loss_sum,
                    stop=preempt.at_step(run.device),
                    first_step=partial(first_step_done, run),
                )
        except engine.EpochStopped as stopped:
            seconds = resumed.train_seconds + lap.seconds
            stop_at(run, epoch - 1, history, stopped.steps, stopped.loss_sum, seconds)
        train_seconds = resumed.train_seconds + lap.seconds
        with run.clock.phase("evaluate"):
            dist.broadcast_buffers_from_main(run.module)
            result = engine.evaluate(run.module, data.test_x, data.test_y, shard)
        record = EpochRecord(
            epoch,
            train_loss,
            result.loss,
            result.accuracy,
            plan.samples_per_epoch / train_seconds,
            train_seconds,
            time.perf_counter() - run.started,
        )
        history.append(record)
        log(env, record.line(config.epochs))
        if progress is not None:
            progress.epoch_done(record)
        last = epoch == config.epochs
        every = config.checkpoint_every
        saved = last or bool(every and epoch % every == 0)
        if env.is_main and saved:
            with run.clock.phase("checkpoint"):
                path = checkpoint.save_checkpoint(config.checkpoint_dir, epoch, snapshot(run, epoch, history))
            log(env, f"checkpoint {path}")
        if not last and preempt.agreed(run.device):
            stop_at(run, epoch, history, saved=saved)
    finish(run, history, start.epoch)


def first_step_done(run: Run) -> None:
    """The start-up's last milestone: this rank's first optimizer step has run (on a GPU, finished)."""
    if run.device.type == "cuda":
        torch.cuda.synchronize(run.device)
    run.clock.mark("first_step")


def stop_at(
    run: Run,
    epoch: int,
    history: list[EpochRecord],
    step: int = 0,
    loss_sum: float = 0.0,
    train_seconds: float = 0.0,
    saved: bool = False,
) -> NoReturn:
    """The ranks agreed to stop after ``epoch`` epochs and ``step`` steps of the next: rank 0
    checkpoints there (unless ``saved`` already), every rank waits for it, then raises
    :class:`PreemptedError` (exit 143) where this process was sent SIGTERM, else
    :class:`StoppedWithPeersError` (exit 201: a pod that was not preempted itself)."""
    config, env = run.config, run.env
    sums = [float(raw) for raw in dist.gather_bytes(repr(loss_sum).encode(), run.device)] if step else []
    path = checkpoint.checkpoint_path(config.checkpoint_dir, epoch, step)
    where = mid_epoch(run, epoch, step) if step else f"the end of epoch {epoch}"
    if env.is_main:
        told = preempt.REQUEST.received_at
        line = f"stop at {where}: {preempt.STOP_SIGNAL.name} on a rank"
        line += "" if told is None else f" (on this one {time.perf_counter() - told:.2f} s ago)"
        if not saved:
            with run.clock.phase("checkpoint") as lap:
                state = snapshot(run, epoch, history, step, sums, train_seconds)
                checkpoint.save_checkpoint(config.checkpoint_dir, epoch, state, step=step)
            line += f"; checkpoint {path} ({path.stat().st_size} bytes, written in {lap.seconds:.3f} s)"
        log(env, line)
    dist.wait_for_all_ranks()
    signame = preempt.STOP_SIGNAL.name
    if preempt.REQUEST.requested:
        raise PreemptedError(f"{signame}: stopped at {where}; a restart resumes from {path}")
    raise StoppedWithPeersError(
        f"{signame} on another rank: stopped at {where} with it; a restart resumes from {path}"
    )


def run_training(config: TrainConfig, started: float) -> None:
    """Set up, train, tear down, then (rank 0, with ``--export-to``) export the model.

    A collective broken by a lost peer becomes :class:`PeerLostError`, and then the process group is
    left as it is: tearing it down could wait on the lost peer, and the process is about to exit
    anyway (see :func:`trainer.__main__.exit_process`). The export runs once the group is gone: the
    other ranks have passed the final barrier and exit 0, nothing waits on rank 0's upload, and its
    failure is rank 0's own exit code (4, 205 or 207), never a broken collective.
    """
    lost: PeerLostError | None = None
    try:
        run = setup(config, started)
        finished_before = train(run)
    except Exception as error:
        lost = peers.peer_lost_error(error, config.dist_timeout, config.checkpoint_dir)
        if lost is None:
            raise
        raise lost from error
    finally:
        if lost is None:
            dist.destroy_process_group()
    sys.stdout.flush()
    if config.export_to is not None and run.env.is_main:
        from trainer.export import export_model

        export_model(config.output_dir, config.export_to, finished_before, lambda line: log(run.env, line))
