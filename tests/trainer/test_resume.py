"""Resume: a rank SIGKILLed after a checkpoint, a truncated checkpoint, a finished run restarted."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import torch

from trainer import checkpoint
from trainer.checkpoint import checkpoint_path, list_checkpoints

pytestmark = pytest.mark.slow  # real trainer processes

EPOCH = re.compile(r"^trainer: epoch (\d+)/(\d+) ", re.MULTILINE)
RESUMED = re.compile(r"^trainer: resumed from (\S+) \(epoch (\d+)/(\d+)\)$", re.MULTILINE)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_sigkill_a_rank_then_restart_resumes_from_last_checkpoint(
    procs: Any, mnist_root: Path, tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    trainer_args = [
        f"--data={mnist_root}",
        f"--checkpoint-dir={ckpt}",
        "--epochs=3",
        "--batch-size=64",
        "--train-limit=12800",
        "--checkpoint-every=1",
    ]
    argv = [sys.executable, "-m", "trainer.launch", *procs.launch_args(2, trainer_args)]
    with subprocess.Popen(
        argv,
        cwd=procs.repo_root,
        env=procs.env(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    ) as first:
        deadline = time.monotonic() + 120
        while not checkpoint_path(ckpt, 1).exists():
            assert first.poll() is None, first.stdout.read() if first.stdout else ""
            assert time.monotonic() < deadline, "no checkpoint within 120 s"
            time.sleep(0.02)
        victim = procs.worker_with_rank(first.pid, 1)
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        output, _ = first.communicate(timeout=60)
    # The pod's exit code is the killed rank's (137, retryable): its peer on the same node either saw
    # the connection drop and exited 200 (peer lost) within the same second, which the launcher
    # ranks after the failure it reacted to, or was stopped by torchrun afterwards.
    assert first.returncode == 128 + signal.SIGKILL, output[-3000:]
    # torchrun's own summary names whichever rank its poll found ended first (with forked ranks, maybe
    # the peer's 200); the launcher's line names the killed rank either way.
    assert "launch: worker rank 1 failed with exit code 137 (SIGKILL)" in output
    newest = int(list_checkpoints(ckpt)[0].name[len("ckpt-epoch-") : -3])
    assert 1 <= newest < 3, "the kill came after training had finished"

    second = procs.run("trainer.launch", procs.launch_args(2, trainer_args))
    assert second.returncode == 0, second.stderr[-3000:]
    resumed = RESUMED.search(second.stdout)
    assert resumed, second.stdout
    assert resumed.groups() == (str(checkpoint_path(ckpt, newest)), str(newest), "3")
    assert [int(e) for e, _ in EPOCH.findall(second.stdout)] == list(range(newest + 1, 4))
    metrics = json.loads((ckpt / "metrics.json").read_text())
    assert [h["epoch"] for h in metrics["history"]] == [1, 2, 3]
    assert metrics["resumed_from_epoch"] == newest
    assert metrics["final_test_accuracy"] > 0.95


def test_truncated_checkpoint_is_skipped_then_a_finished_run_trains_nothing(
    procs: Any, mnist_root: Path, tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    args = [f"--data={mnist_root}", f"--checkpoint-dir={ckpt}", "--epochs=2", "--train-limit=2048"]
    first = procs.run("trainer", args)
    assert first.returncode == 0, first.stderr
    assert [p.name for p in list_checkpoints(ckpt)] == ["ckpt-epoch-0002.pt", "ckpt-epoch-0001.pt"]

    newest = checkpoint_path(ckpt, 2)
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    second = procs.run("trainer", args)
    assert second.returncode == 0, second.stderr
    assert f"trainer: skipping corrupt checkpoint {newest}: " in second.stdout
    resumed = RESUMED.search(second.stdout)
    assert resumed and resumed.groups() == (str(checkpoint_path(ckpt, 1)), "1", "2")
    assert [int(e) for e, _ in EPOCH.findall(second.stdout)] == [2]

    model = ckpt / "model.pt"
    before = (model.read_bytes(), model.stat().st_mtime_ns)
    third = procs.run("trainer", args)
    assert third.returncode == 0, third.stderr
    assert "trainer: run already finished (2/2 epochs); nothing to train" in third.stdout
    assert EPOCH.findall(third.stdout) == []
    # No step and no new model: the file the second run wrote is untouched (a wall-time bound against
    # the second run's would measure the machine's load, not the trainer).
    assert (model.read_bytes(), model.stat().st_mtime_ns) == before
    assert json.loads((ckpt / "metrics.json").read_text())["history"][-1]["epoch"] == 2


def test_finished_run_started_again_keeps_its_figures_and_records_the_restart(
    procs: Any, mnist_root: Path, tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    args = [f"--data={mnist_root}", f"--checkpoint-dir={ckpt}", "--epochs=2", "--train-limit=2048"]
    metrics_path, model_path = ckpt / "metrics.json", ckpt / "model.pt"
    assert procs.run("trainer", args).returncode == 0
    original = json.loads(metrics_path.read_text())
    model = (model_path.read_bytes(), model_path.stat().st_mtime_ns)
    assert (original["epochs"], original["resumed_from_epoch"], original["restarts"]) == (2, 0, [])

    started = datetime.now(UTC).replace(microsecond=0)
    trainer = procs.run("trainer", args)
    assert trainer.returncode == 0, trainer.stderr[-3000:]
    assert "trainer: run already finished (2/2 epochs); nothing to train" in trainer.stdout
    assert f"trainer: kept {metrics_path} and model.pt of the finished run; recorded this restart" in (
        trainer.stdout
    )
    # Through the launcher (as in a pod), a finished run starts no torchrun: rank 0 records it alone.
    launched = procs.run("trainer.launch", procs.launch_args(2, args))
    assert launched.returncode == 0, launched.stderr[-3000:]
    assert launched.stdout == ""
    assert (
        f"launch: run already finished ({ckpt / 'ckpt-epoch-0002.pt'}, with metrics.json and model.pt "
        f"in {ckpt}); nothing to train"
    ) in launched.stderr.splitlines()
    metrics = json.loads(metrics_path.read_text())
    restarts = metrics.pop("restarts")
    # Every figure of the run that trained (accuracy, wall time, epochs, history) is as it was.
    assert metrics == {key: value for key, value in original.items() if key != "restarts"}
    assert [(r["world_size"], r["resumed_from_epoch"], r["epochs_trained"]) for r in restarts] == [
        (1, 2, 0),
        (2, 2, 0),
    ]
    assert {r["outcome"] for r in restarts} == {"run already finished; metrics.json and model.pt kept"}
    times = [datetime.fromisoformat(r["at"]) for r in restarts]
    assert started <= times[0] <= times[1] <= datetime.now(UTC)
    assert all(0 < r["wall_time_s"] < original["wall_time_s"] + 60 for r in restarts)
    assert (model_path.read_bytes(), model_path.stat().st_mtime_ns) == model

    # With its metrics.json gone, a finished run exports it again from the final checkpoint.
    metrics_path.unlink()
    assert procs.run("trainer", args).returncode == 0
    exported = json.loads(metrics_path.read_text())
    assert exported["history"] == original["history"]
    assert exported["final_test_accuracy"] == original["final_test_accuracy"] > 0.75
    assert (exported["resumed_from_epoch"], exported["restarts"]) == (2, [])


def test_a_changed_schedule_moves_the_old_one_aside_and_starts_afresh(
    procs: Any, mnist_root: Path, tmp_path: Path
) -> None:
    """The same checkpoint dir with another schedule (an edit of epochs under the same run id) is a
    fresh run that says so, not a crash loop; the old schedule's files are kept, never resumed."""
    ckpt = tmp_path / "ckpt"
    base = [f"--data={mnist_root}", f"--checkpoint-dir={ckpt}", "--train-limit=512", "--batch-size=256"]
    assert procs.run("trainer", [*base, "--epochs=1"]).returncode == 0
    moved = ("ckpt-epoch-0001.pt", "metrics.json", "model.pt", "lineage.json")
    old = {name: (ckpt / name).read_bytes() for name in moved}
    again = procs.run("trainer", [*base, "--epochs=2"])
    assert again.returncode == 0, again.stderr
    (archive,) = [p for p in ckpt.iterdir() if p.name.startswith("superseded-")]
    assert re.fullmatch(r"superseded-\d{8}T\d{6}Z-2steps", archive.name)
    assert {name: (archive / name).read_bytes() for name in old} == old
    assert list((archive / "tensorboard").glob("events.out.tfevents.*")), "the old curves moved too"
    assert (
        f"trainer: schedule changed: {checkpoint_path(ckpt, 1)} was written by a run with 2 total steps "
        f"(--epochs=1), this run has 4; moved that schedule's checkpoints, results and curves "
        f"to {archive}; starting at epoch 1"
    ) in again.stdout.splitlines()
    assert [p.name for p in list_checkpoints(ckpt)] == ["ckpt-epoch-0002.pt", "ckpt-epoch-0001.pt"]
    metrics = json.loads((ckpt / "metrics.json").read_text())
    assert (metrics["epochs"], metrics["resumed_from_epoch"], len(metrics["history"])) == (2, 0, 2)
    # Started again with the new schedule, the run is finished: nothing moves, nothing trains.
    third = procs.run("trainer", [*base, "--epochs=2"])
    assert third.returncode == 0 and "run already finished (2/2 epochs)" in third.stdout
    assert [p for p in ckpt.iterdir() if p.name.startswith("superseded-")] == [archive]


def _pooled_first_stage_name(name: str) -> str:
    """A parameter's name in the model before its strided first stage, whose first stage was a conv,
    a max-pool, BatchNorm and ReLU: every layer after the first conv was one index further on."""
    layer, _, rest = name.removeprefix("features.").partition(".")
    if name.startswith("features.") and int(layer) > 0:
        return f"features.{int(layer) + 1}.{rest}"
    return name


def test_a_checkpoint_of_another_model_is_moved_aside_not_loaded(
    procs: Any, mnist_root: Path, tmp_path: Path
) -> None:
    """A checkpoint written by the earlier model with a pooled first stage (same schedule, other
    parameter names) is moved aside like another schedule's, instead of a load_state_dict traceback on
    every restart."""
    ckpt = tmp_path / "ckpt"
    base = [f"--data={mnist_root}", f"--checkpoint-dir={ckpt}", "--train-limit=512"]
    assert procs.run("trainer", base).returncode == 0
    path = checkpoint_path(ckpt, 1)
    state = checkpoint.decode(checkpoint.verified_payload(path.read_bytes()), torch.device("cpu"))
    state["model"] = {_pooled_first_stage_name(name): tensor for name, tensor in state["model"].items()}
    assert "features.2.running_mean" in state["model"] and "features.1.running_mean" not in state["model"]
    checkpoint.save_checkpoint(ckpt, 1, state)
    again = procs.run("trainer", base)
    assert again.returncode == 0, again.stderr
    (archive,) = [p for p in ckpt.iterdir() if p.name.startswith("superseded-")]
    assert re.fullmatch(r"superseded-\d{8}T\d{6}Z-4steps", archive.name)
    assert (
        f"trainer: model changed: {path} holds parameters of another model (names or shapes differ); "
        f"moved that model's checkpoints, results and curves to {archive}; starting at epoch 1"
    ) in again.stdout.splitlines()
    metrics = json.loads((ckpt / "metrics.json").read_text())
    assert (metrics["resumed_from_epoch"], [h["epoch"] for h in metrics["history"]]) == (0, [1])
