"""Two ranks under torchrun (gloo) on real MNIST: accuracy, identical parameters, exports."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from trainer.model import MnistCNN, state_dict_sha256

pytestmark = pytest.mark.slow  # torchrun with two ranks

# One epoch of the default settings reaches 99.24%, 99.26% and 99.25% on 2 ranks with seeds 0, 1 and 2.
ONE_EPOCH_MIN_ACCURACY = 0.99
# The per-rank memory goal of the default run (issue #19): at most 700 MiB per rank, measured 405-415
# MiB with torch's CPU wheel. PyPI serves torch as its CUDA build, whose libraries stay resident in every
# process even on a CPU (here `import torch` alone is about 500 MiB): a floor the trainer cannot change.
# So the goal is held on what the trainer adds above the floor of the torch in use (docs/BENCHMARKS.md);
# the bound fails when that share grows by half. The ranks no longer import `torch._dynamo` (about 150
# MiB more, trainer/optim.py), so the floor leaves it out too. Ranks forked by the launcher share its
# torch and have only what they touch resident: a rank may stay below the floor.
TRAINER_GROWTH_MIB_LIMIT = 200
# The probe reads its own high-water mark (VmHWM): `ru_maxrss` carries a parent's peak across fork and
# exec, and the test runs in a pytest worker that may already hold a trained model or two.
FLOOR_PROBE = (
    "import torch, torch.distributed;"
    "print(next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:')) / 1024)"
)


def torch_floor_mib() -> float:
    """The peak RSS of a process that only imports what every rank imports from torch."""
    probe = subprocess.run([sys.executable, "-c", FLOOR_PROBE], capture_output=True, text=True, check=True)
    return float(probe.stdout.strip())


EPOCH_LINE = re.compile(
    r"^trainer: epoch (\d+)/(\d+) loss=([\d.]+) test_loss=([\d.]+) test_acc=([\d.]+)% "
    r"samples/s=(\d+) elapsed=([\d.]+)s$",
    re.MULTILINE,
)


@pytest.fixture(scope="module")
def two_rank_run(
    procs: Any, mnist_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path_factory.mktemp("ddp")
    args = [
        f"--data={mnist_root}",
        f"--checkpoint-dir={out / 'ckpt'}",
        f"--output-dir={out}",
        "--epochs=1",
        "--backend=gloo",
    ]
    result = procs.run("trainer.launch", procs.launch_args(2, args))
    assert result.returncode == 0, result.stderr[-4000:]
    return result, out


def test_one_epoch_on_two_ranks_reaches_accuracy(two_rank_run: tuple[Any, Path]) -> None:
    result, out = two_rank_run
    lines = EPOCH_LINE.findall(result.stdout)
    assert len(lines) == 1, result.stdout
    assert float(lines[0][4]) / 100 >= ONE_EPOCH_MIN_ACCURACY
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["final_test_accuracy"] >= ONE_EPOCH_MIN_ACCURACY
    assert metrics["world_size"] == 2
    assert (metrics["per_rank_batch"], metrics["global_batch"]) == (64, 128)
    assert metrics["steps_per_epoch"] == 468
    assert [h["epoch"] for h in metrics["history"]] == [1]
    assert metrics["samples_per_s"] > 0
    assert len(metrics["peak_rss_mib_per_rank"]) == 2
    # Both ranks' start-up milestones, in the order they happen, before the run's end.
    order = ["process", "main", "imports", "data", "rendezvous", "model", "first_step"]
    for marks in metrics["milestones_unix_per_rank"]:
        assert sorted(marks) == sorted(order), marks
        times = [marks[name] for name in order]
        assert times == sorted(times) and times[-1] - times[0] < metrics["wall_time_s"] + 5, marks
    assert len(metrics["milestones_unix_per_rank"]) == 2
    floor = torch_floor_mib()
    assert all(0 < rss <= floor + TRAINER_GROWTH_MIB_LIMIT for rss in metrics["peak_rss_mib_per_rank"]), (
        metrics["peak_rss_mib_per_rank"],
        floor,
    )


def test_forked_ranks_take_the_dataset_the_launcher_read_ahead(two_rank_run: tuple[Any, Path]) -> None:
    """The launcher reads MNIST while it imports torch (trainer.read_ahead); rank 0 says it used that."""
    result, _out = two_rank_run
    line = "trainer: data: read ahead by the launcher before it started the ranks (files unchanged since)"
    assert line in result.stdout.splitlines(), result.stdout[:2000]


def test_metrics_break_the_run_time_down_by_phase(two_rank_run: tuple[Any, Path]) -> None:
    result, out = two_rank_run
    metrics = json.loads((out / "metrics.json").read_text())
    phases = metrics["phase_seconds"]
    assert set(phases) == {"imports", "data_load", "rendezvous", "setup", "train", "evaluate", "checkpoint"}
    assert all(seconds >= 0 for seconds in phases.values())
    assert phases["train"] == pytest.approx(metrics["train_time_s"])
    assert sum(phases.values()) < metrics["wall_time_s"]
    written = (out / "metrics.json").stat().st_mtime  # the trainer's start plus its wall time
    assert metrics["started_unix"] + metrics["wall_time_s"] == pytest.approx(written, abs=2.0)
    assert re.search(r"^trainer: time imports=[\d.]+s .* checkpoint=[\d.]+s$", result.stdout, re.MULTILINE)


def test_parameters_identical_across_ranks_and_exported(two_rank_run: tuple[Any, Path]) -> None:
    _, out = two_rank_run
    metrics = json.loads((out / "metrics.json").read_text())
    rank0, rank1 = metrics["state_dict_sha256_per_rank"]
    assert rank0 == rank1
    model = MnistCNN()
    model.load_state_dict(torch.load(out / "model.pt", weights_only=True))
    assert state_dict_sha256(model) == rank0


def test_evaluation_covers_all_10000_test_images(two_rank_run: tuple[Any, Path], mnist_root: Path) -> None:
    """Re-evaluating the exported model on one process gives the accuracy the ranks reported."""
    from trainer.data import load_mnist, normalise

    _, out = two_rank_run
    metrics = json.loads((out / "metrics.json").read_text())
    model = MnistCNN().eval()
    model.load_state_dict(torch.load(out / "model.pt", weights_only=True))
    data = load_mnist(mnist_root, torch.device("cpu"), train_limit=1)
    with torch.no_grad():
        correct = sum(
            int((model(normalise(x)).argmax(1) == y).sum())
            for x, y in zip(data.test_x.split(2000), data.test_y.split(2000), strict=True)
        )
    assert correct / 10000 == pytest.approx(metrics["final_test_accuracy"], abs=1e-4)


def test_checkpoint_written_by_rank_zero_only_once(two_rank_run: tuple[Any, Path]) -> None:
    result, out = two_rank_run
    assert sorted(p.name for p in (out / "ckpt").glob("ckpt-*")) == ["ckpt-epoch-0001.pt"]
    # rank 0 alone writes the curves too: one event file
    assert len(list((out / "ckpt" / "tensorboard").glob("events.out.tfevents.*"))) == 1
    assert result.stdout.count("trainer: checkpoint ") == 1
