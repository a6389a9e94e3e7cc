"""SIGTERM: the ranks stop at one step, rank 0 checkpoints it, all exit (143 where SIGTERM was received,
201 on the job's other pods); the restart ends with the model of a run never stopped (bitwise, on
CPU/gloo) and loses no step."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from trainer import engine
from trainer.checkpoint import checkpoint_path, list_checkpoints
from trainer.errors import EXIT_PREEMPTED, EXIT_STOPPED_WITH_PEERS
from trainer.model import build_model
from trainer.optim import AdamW, OneCycle

STEPS_PER_EPOCH = 50  # --train-limit=6400 at the default global batch of 128
PROGRESS = re.compile(r"^trainer: progress step +(\d+)/", re.MULTILINE)
MID_EPOCH = re.compile(r"^ckpt-epoch-0000-step-(\d{6})\.pt$")
REPO_ROOT = Path(__file__).resolve().parents[2]
DETERMINED = ("epoch", "train_loss", "test_loss", "test_accuracy")  # metrics that are not timings


def trainer_args(checkpoint_dir: Path, data: Path) -> list[str]:
    return [
        f"--data={data}",
        f"--checkpoint-dir={checkpoint_dir}",
        "--epochs=2",
        "--train-limit=6400",
        "--log-every=1",  # a progress line per step: the test sees each step rank 0 trained
        "--progress-seconds=0",
    ]


def test_epoch_stopped_then_resumed_at_that_step_ends_as_if_never_stopped() -> None:
    """The engine's part, in-process: stop after step 3 of 8, resume there with the loss sum."""
    torch.manual_seed(0)
    images = torch.randint(0, 256, (64, 1, 28, 28), dtype=torch.uint8)
    labels = torch.randint(0, 10, (64,))
    batches = engine.epoch_indices(64, 1, 0, 0, 1, 8, 8)

    def fresh() -> tuple[torch.nn.Module, AdamW, OneCycle]:
        torch.manual_seed(1)
        model = build_model(torch.device("cpu"))
        optimizer = AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        schedule = OneCycle(optimizer, 1e-3, 8, pct_start=0.3, div_factor=25, final_div_factor=1e4)
        return model, optimizer, schedule

    model, optimizer, scheduler = fresh()
    whole = engine.train_one_epoch(model, optimizer, scheduler, images, labels, batches)
    reference = {k: v.clone() for k, v in model.state_dict().items()}

    model, optimizer, scheduler = fresh()
    asked: list[int] = []
    with pytest.raises(engine.EpochStopped) as stopped:
        engine.train_one_epoch(
            model, optimizer, scheduler, images, labels, batches, stop=lambda n: asked.append(n) or n == 3
        )
    assert (stopped.value.steps, asked) == (3, [1, 2, 3])
    assert scheduler.last_epoch == 3  # the stopped step's schedule step was taken
    resumed = engine.train_one_epoch(
        model, optimizer, scheduler, images, labels, batches, start=3, loss_sum_before=stopped.value.loss_sum
    )
    assert resumed == whole
    assert all(torch.equal(reference[k], v) for k, v in model.state_dict().items())


@pytest.mark.slow
def test_sigterm_is_recorded_not_fatal_once_installed(procs: Any) -> None:
    code = (
        "import os, signal; from trainer import preempt; preempt.install(); "
        "os.kill(os.getpid(), signal.SIGTERM); print(preempt.REQUEST.requested)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=procs.repo_root, env=procs.env(), capture_output=True, text=True
    )
    assert (result.returncode, result.stdout) == (0, "True\n")


Stop = Callable[[int], None]


def preempt_at(argv: list[str], env: dict[str, str], step: int, stop: Stop) -> tuple[int, str]:
    """Run ``argv``; once rank 0 reports ``step``, call ``stop`` with the process id; (exit code, output)."""
    with subprocess.Popen(
        argv, cwd=REPO_ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    ) as process:
        assert process.stdout is not None
        seen: list[str] = []
        for line in process.stdout:
            seen.append(line)
            found = PROGRESS.match(line)
            if found and int(found.group(1)) >= step:
                stop(process.pid)
                break
        seen.append(process.stdout.read())
        process.wait(timeout=60)
    return process.returncode, "".join(seen)


def assert_same_end(reference: Path, resumed: Path) -> None:
    """model.pt tensor for tensor, and every metric that is not a timing."""
    expected, got = (torch.load(d / "model.pt", weights_only=True) for d in (reference, resumed))
    assert expected.keys() == got.keys()
    assert [k for k in expected if not torch.equal(expected[k], got[k])] == []
    histories = [json.loads((d / "metrics.json").read_text())["history"] for d in (reference, resumed)]
    expected_figures, figures = ([[h[k] for k in DETERMINED] for h in history] for history in histories)
    assert figures == expected_figures


def mid_epoch_step(checkpoint_dir: Path) -> int:
    newest = list_checkpoints(checkpoint_dir)[0]
    found = MID_EPOCH.match(newest.name)
    assert found, newest.name
    return int(found.group(1))


@pytest.fixture(scope="module")
def uninterrupted_2_ranks(procs: Any, mnist_gz_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("reference-2")
    result = procs.run("trainer.launch", procs.launch_args(2, trainer_args(directory, mnist_gz_dir)))
    assert result.returncode == 0, result.stderr[-3000:]
    return directory


@pytest.mark.slow
def test_sigterm_mid_epoch_on_two_ranks_checkpoints_that_step_and_the_restart_ends_identical(
    procs: Any, mnist_gz_dir: Path, tmp_path: Path, uninterrupted_2_ranks: Path
) -> None:
    """The kubelet's SIGTERM to PID 1, which torchrun's agent passes to both ranks of the pod."""
    args = trainer_args(tmp_path, mnist_gz_dir)
    argv = [sys.executable, "-m", "trainer.launch", *procs.launch_args(2, args)]
    code, output = preempt_at(argv, procs.env(), 10, lambda launcher: os.kill(launcher, signal.SIGTERM))
    assert code == EXIT_PREEMPTED, output[-3000:]
    step = mid_epoch_step(tmp_path)
    assert 10 <= step < STEPS_PER_EPOCH
    # No step lost: the last step rank 0 trained is the checkpoint's.
    assert int(PROGRESS.findall(output)[-1]) == step
    where = f"step {step}/{STEPS_PER_EPOCH} of epoch 1"
    stopped = f"trainer: preempted: SIGTERM: stopped at {where}; a restart resumes from {tmp_path}/"
    assert sum(line.startswith(stopped) for line in output.splitlines()) == 2, output[-3000:]
    assert "launch: torchrun stopped by SIGTERM: exit code 143 (retryable)" in output

    again = procs.run("trainer.launch", procs.launch_args(2, args))
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"(epoch 0/2, {where})" in again.stdout
    assert int(PROGRESS.findall(again.stdout)[0]) == step + 1
    assert_same_end(uninterrupted_2_ranks, tmp_path)


def node(procs: Any, node_rank: int, port: int, args: list[str]) -> list[str]:
    return [sys.executable, "-m", "trainer.launch", *procs.node_launch_args(node_rank, port, args)]


@pytest.mark.slow
def test_sigterm_to_one_pod_of_two_stops_both_and_the_other_exits_201(
    procs: Any, mnist_gz_dir: Path, tmp_path: Path, uninterrupted_2_ranks: Path
) -> None:
    """Two pods of one rank each, as a two-node job runs; the kubelet preempts node 1's pod alone. Its
    rank exits 143; node 0's, never told, stops at the same step and exits 201, the code the Job kinds'
    podFailurePolicy ignores; the restart of both ends with the uninterrupted run's model."""
    args, env, port = trainer_args(tmp_path, mnist_gz_dir), procs.env(), procs.free_port()
    with subprocess.Popen(
        node(procs, 1, port, args),
        cwd=REPO_ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    ) as preempted:
        try:
            code, output = preempt_at(
                node(procs, 0, port, args), env, 10, lambda _: os.kill(preempted.pid, signal.SIGTERM)
            )
            told, _ = preempted.communicate(timeout=60)
        finally:
            preempted.kill()
    assert (code, preempted.returncode) == (EXIT_STOPPED_WITH_PEERS, EXIT_PREEMPTED), output + told
    step = mid_epoch_step(tmp_path)
    where = f"step {step}/{STEPS_PER_EPOCH} of epoch 1"
    assert f"trainer: stopped with the job: SIGTERM on another rank: stopped at {where}" in output
    assert f"trainer: preempted: SIGTERM: stopped at {where}" in told
    assert int(PROGRESS.findall(output)[-1]) == step  # no step lost
    with subprocess.Popen(
        node(procs, 1, port, args),
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) as other:
        again = subprocess.run(
            node(procs, 0, port, args),
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert other.wait(timeout=60) == 0
    assert again.returncode == 0, again.stderr[-3000:]
    assert int(PROGRESS.findall(again.stdout)[0]) == step + 1
    assert_same_end(uninterrupted_2_ranks, tmp_path)


@pytest.fixture(scope="module")
def uninterrupted_1_process(procs: Any, mnist_gz_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("reference-1")
    result = procs.run("trainer", trainer_args(directory, mnist_gz_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    return directory


@pytest.mark.slow
@pytest.mark.parametrize("at_step", [10, STEPS_PER_EPOCH])
def test_sigterm_to_one_process_mid_epoch_or_in_evaluation_then_restart_ends_identical(
    procs: Any, mnist_gz_dir: Path, tmp_path: Path, uninterrupted_1_process: Path, at_step: int
) -> None:
    """Step 50's progress line comes before epoch 1's evaluation: that signal lands in it."""
    args = trainer_args(tmp_path, mnist_gz_dir)
    argv = [sys.executable, "-m", "trainer", *args]
    code, output = preempt_at(argv, procs.env(), at_step, lambda pid: os.kill(pid, signal.SIGTERM))
    assert code == EXIT_PREEMPTED, output[-3000:]
    if at_step == STEPS_PER_EPOCH:
        assert "trainer: stop at the end of epoch 1: SIGTERM on a rank (on this one " in output, output
        assert list_checkpoints(tmp_path)[0] == checkpoint_path(tmp_path, 1)
        resumed_from = "(epoch 1/2)"
    else:
        step = mid_epoch_step(tmp_path)
        assert int(PROGRESS.findall(output)[-1]) == step
        resumed_from = f"(epoch 0/2, step {step}/{STEPS_PER_EPOCH} of epoch 1)"
    again = procs.run("trainer", args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert resumed_from in again.stdout
    assert_same_end(uninterrupted_1_process, tmp_path)
