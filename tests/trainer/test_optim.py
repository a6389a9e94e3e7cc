"""trainer.optim against torch.optim: the same updates, learning rates and betas bit for bit, each
other's state dicts, and a trainer run that no longer imports torch._dynamo."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from trainer.engine import normalise
from trainer.model import build_model
from trainer.optim import AdamW, OneCycle
from trainer.train import DIV_FACTOR, FINAL_DIV_FACTOR, warmup_fraction

STEPS = 24  # both phases of the schedule, to its end
LR, WEIGHT_DECAY = 0.01, 5e-4


def _batches(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [
        (
            torch.randint(0, 256, (16, 1, 28, 28), generator=generator, dtype=torch.uint8),
            torch.randint(0, 10, (16,), generator=generator),
        )
        for _ in range(STEPS)
    ]


def _schedule_args() -> dict[str, Any]:
    return {
        "max_lr": LR,
        "total_steps": STEPS,
        "pct_start": warmup_fraction(STEPS),
        "div_factor": DIV_FACTOR,
        "final_div_factor": FINAL_DIV_FACTOR,
    }


def _torch_pair(model: nn.Module) -> tuple[Any, Any]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    return optimizer, torch.optim.lr_scheduler.OneCycleLR(optimizer, **_schedule_args())


def _ours(model: nn.Module) -> tuple[AdamW, OneCycle]:
    optimizer = AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    return optimizer, OneCycle(optimizer, **_schedule_args())


def _train(model: nn.Module, optimizer: Any, scheduler: Any, batches: list, start: int, stop: int) -> list:
    """Steps ``start``..``stop`` as the trainer's epoch loop takes them; the (lr, beta1) of each."""
    seen = []
    for images, labels in batches[start:stop]:
        loss = nn.functional.cross_entropy(model(normalise(images)), labels, label_smoothing=0.1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        group = optimizer.param_groups[0] if hasattr(optimizer, "param_groups") else None
        seen.append((group["lr"], group["betas"][0]) if group else (optimizer.lr, optimizer.beta1))
        scheduler.step()
    return seen


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return build_model(torch.device("cpu"))


def _equal(a: nn.Module, b: nn.Module) -> bool:
    return all(
        torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )


def test_updates_learning_rates_and_betas_are_torchs_bit_for_bit() -> None:
    batches = _batches(1)
    theirs, ours = _model(), _model()
    seen_theirs = _train(theirs, *_torch_pair(theirs), batches, 0, STEPS)
    seen_ours = _train(ours, *_ours(ours), batches, 0, STEPS)
    assert seen_ours == seen_theirs
    assert len({beta for _, beta in seen_ours}) > 2, "beta1 cycles"
    assert _equal(ours, theirs)
    assert not _equal(ours, _model()), "the steps changed the model"


@pytest.mark.parametrize("saved_by", ["torch", "ours"])
def test_a_run_resumes_from_either_state_dict_as_if_never_stopped(saved_by: str) -> None:
    batches, half = _batches(2), STEPS // 2
    straight = _model()
    _train(straight, *_ours(straight), batches, 0, STEPS)

    first = _model()
    optimizer, scheduler = _torch_pair(first) if saved_by == "torch" else _ours(first)
    _train(first, optimizer, scheduler, batches, 0, half)
    saved = (first.state_dict(), optimizer.state_dict(), scheduler.state_dict())
    resumed = _model(seed=7)
    optimizer, scheduler = _ours(resumed)
    resumed.load_state_dict(saved[0])
    optimizer.load_state_dict(saved[1])
    scheduler.load_state_dict(saved[2])
    _train(resumed, optimizer, scheduler, batches, half, STEPS)
    assert _equal(resumed, straight)


def test_state_for_another_schedule_or_model_is_refused() -> None:
    model = _model()
    optimizer, scheduler = _ours(model)
    with pytest.raises(ValueError, match="schedule of 12 steps, not 24"):
        scheduler.load_state_dict({"last_epoch": 3, "total_steps": 12})
    state = optimizer.state_dict()
    state["param_groups"][0]["params"] = [0, 1]
    with pytest.raises(ValueError, match="optimizer state for 2 parameters, not 11"):
        optimizer.load_state_dict(state)


@pytest.mark.slow  # two real ranks under torchrun
def test_a_two_rank_run_never_imports_torch_dynamo(procs: Any, mnist_root: Path, tmp_path: Path) -> None:
    """``torch._dynamo`` costs a rank 2-3 s of imports (docs/BENCHMARKS.md); no rank of a run loads it.
    Each rank's ``-X importtime`` list goes to its own file (torchrun's ``--redirects``)."""
    logs = tmp_path / "logs"
    args = [
        *procs.torchrun_args(2, procs.free_port())[:-2],
        "--redirects=2",
        f"--log-dir={logs}",
        "-m",
        "trainer",
        f"--data={mnist_root}",
        f"--checkpoint-dir={tmp_path / 'ckpt'}",
        f"--output-dir={tmp_path / 'out'}",
        "--epochs=1",
        "--train-limit=512",
    ]
    result = procs.run("torch.distributed.run", args, env=procs.env(PYTHONPROFILEIMPORTTIME="1"), timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    stderrs = sorted(logs.rglob("stderr.log"))
    assert len(stderrs) == 2, stderrs
    for stderr in stderrs:
        imported = [
            line.rsplit("|", 1)[-1].strip() for line in stderr.read_text().splitlines() if "|" in line
        ]
        assert "trainer.optim" in imported and "torch.distributed" in imported, stderr
        assert [name for name in imported if name.startswith("torch._dynamo")] == [], stderr
