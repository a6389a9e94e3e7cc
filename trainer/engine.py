"""One epoch of training and one sharded evaluation, on uint8 tensors already in memory."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from trainer.data import normalise
from trainer.dist import all_reduce_sum, average_gradients
from trainer.optim import AdamW, OneCycle

# Test images per forward pass: small enough that the activations stay in cache (1000 took ~1.5x the time).
EVAL_CHUNK = 256


# (steps done in this epoch, mean loss since the previous report, learning rate now)
StepReport = Callable[[int, float, float], None]
# Called with the steps done in this epoch after each optimizer step but the epoch's last; True stops
# the epoch there (every rank must answer the same for the same step: see :mod:`trainer.preempt`).
StopCheck = Callable[[int], bool]


class EpochStopped(Exception):
    """The epoch stopped after ``steps`` of its steps; ``loss_sum`` is this rank's training loss
    summed over them (what a resumed epoch starts from to end with the same mean)."""

    def __init__(self, steps: int, loss_sum: float) -> None:
        super().__init__(f"epoch stopped after {steps} steps")
        self.steps = steps
        self.loss_sum = loss_sum


@dataclass(frozen=True)
class EvalResult:
    loss: float
    accuracy: float
    correct: int
    count: int


def epoch_indices(
    train_size: int,
    epoch: int,
    seed: int,
    rank: int,
    world_size: int,
    per_rank_batch: int,
    steps: int,
) -> torch.Tensor:
    """This rank's sample indices for ``epoch`` as ``[steps, per_rank_batch]``.

    The same arithmetic as ``DistributedSampler`` with ``set_epoch(epoch)``: one permutation
    seeded by ``seed + epoch`` shared by all ranks, rank r taking every world_size-th index from r.
    Disjoint across ranks, reshuffled every epoch, identical on every restart.
    """
    generator = torch.Generator()
    generator.manual_seed(seed + epoch)
    permutation = torch.randperm(train_size, generator=generator)
    used = permutation[: steps * per_rank_batch * world_size]
    return used[rank::world_size].reshape(steps, per_rank_batch)


def test_shard(test_size: int, rank: int, world_size: int) -> torch.Tensor:
    """Rank r evaluates test images r, r + N, r + 2N, ...; together the ranks cover all of them."""
    return torch.arange(rank, test_size, world_size)


def train_one_epoch(
    model: nn.Module,
    optimizer: AdamW,
    scheduler: OneCycle,
    images: torch.Tensor,
    labels: torch.Tensor,
    batches: torch.Tensor,
    label_smoothing: float = 0.0,
    report: StepReport | None = None,
    every: int = 1,
    start: int = 0,
    loss_sum_before: float = 0.0,
    stop: StopCheck | None = None,
    first_step: Callable[[], None] | None = None,
) -> float:
    """Train over ``batches`` (rows of indices); returns the mean training loss over all ranks
    (smoothed as trained on, with ``label_smoothing`` > 0).

    A resumed epoch skips its first ``start`` rows, already trained with this rank's loss summing to
    ``loss_sum_before``. When ``stop`` answers True after a step, :class:`EpochStopped` is raised with
    the steps done and this rank's loss sum; the optimizer and scheduler have taken that step.

    After each backward the gradients are averaged over the ranks
    (:func:`trainer.dist.average_gradients`, what DistributedDataParallel does inside ``backward()``),
    so every rank takes the same step. With ``report``, every ``every`` steps and after the last one
    it is called with the steps done in this epoch, this rank's mean loss over the steps since the
    previous call, and the learning rate of the step just taken. Only then is the loss read from the
    device; ranks without ``report`` never wait. ``first_step`` is called once, after this call's
    first step (a start-up milestone).
    """
    model.train()
    batches = batches.to(images.device)
    loss_sum = torch.tensor(loss_sum_before, dtype=torch.float32, device=images.device)
    steps = len(batches)
    reported_sum, reported_at = loss_sum_before, start
    for index, batch in enumerate(batches[start:], start=start + 1):
        logits = model(normalise(images[batch]))
        loss = nn.functional.cross_entropy(logits, labels[batch], label_smoothing=label_smoothing)
        optimizer.zero_grad()
        loss.backward()
        average_gradients(optimizer.params)
        optimizer.step()
        if first_step is not None and index == start + 1:
            first_step()
        loss_sum += loss.detach()
        if report is not None and (index % every == 0 or index == steps):
            total = loss_sum.item()
            report(index, (total - reported_sum) / (index - reported_at), float(scheduler.get_last_lr()[0]))
            reported_sum, reported_at = total, index
        scheduler.step()
        if stop is not None and index < steps and stop(index):
            raise EpochStopped(index, loss_sum.item())
    total, count = all_reduce_sum([loss_sum.item(), float(len(batches))], images.device)
    return total / count


@torch.inference_mode()
def evaluate(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, shard: torch.Tensor) -> EvalResult:
    """Loss and accuracy over the whole test set: each rank its shard, counts all-reduced.

    ``model`` is the unwrapped module: evaluation needs no gradient sync, and the ranks' BatchNorm
    statistics are already rank 0's (see :func:`trainer.dist.broadcast_buffers_from_main`).
    """
    model.eval()
    shard = shard.to(images.device)
    loss_sum = torch.zeros((), dtype=torch.float64, device=images.device)
    correct = torch.zeros((), dtype=torch.int64, device=images.device)
    for chunk in shard.split(EVAL_CHUNK):
        logits = model(normalise(images[chunk]))
        loss_sum += nn.functional.cross_entropy(logits, labels[chunk], reduction="sum").double()
        correct += (logits.argmax(dim=1) == labels[chunk]).sum()
    total_loss, total_correct, total = all_reduce_sum(
        [loss_sum.item(), float(correct.item()), float(len(shard))], images.device
    )
    return EvalResult(total_loss / total, total_correct / total, int(total_correct), int(total))
