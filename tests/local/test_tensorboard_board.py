"""The TensorBoard Deployment's command line (`infra.program.job.tensorboard`), run here as a real process:
it serves every run's curves under the claim, on loopback, and its readiness check passes once it does."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from infra.local.ports import free_port
from infra.program.job.tensorboard import PORT, READY, board_args
from trainer.curves import EventFile

pytestmark = pytest.mark.slow  # a real tensorboard process


def test_the_boards_command_serves_each_runs_curves_and_reports_ready(tmp_path: Path) -> None:
    claim = tmp_path / "checkpoints"
    for run, accuracy in (("mnist-r1", 0.98), ("mnist-r2", 0.99)):
        (claim / run / "tensorboard").mkdir(parents=True)
        curves = EventFile(claim / run / "tensorboard", purge_step=1)  # the trainer's writer
        curves.scalars({"test/accuracy": accuracy}, 468)
        curves.close()
    port = free_port()
    args = [
        f"--logdir={claim}"
        if a.startswith("--logdir=")
        else f"--port={port}"
        if a.startswith("--port=")
        else a
        for a in board_args()
    ]
    assert f"--port={port}" in args and "--host=127.0.0.1" in args
    tensorboard = Path(sys.executable).with_name("tensorboard")
    board = subprocess.Popen([str(tensorboard), *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    probe = [sys.executable, "-c", READY.replace(f":{PORT}/", f":{port}/")]
    try:
        deadline = time.monotonic() + 60
        while subprocess.run(probe, capture_output=True, check=False).returncode != 0:
            assert board.poll() is None, board.stderr.read().decode() if board.stderr else ""
            assert time.monotonic() < deadline, "tensorboard never answered"
            time.sleep(0.5)
        base = f"http://127.0.0.1:{port}/data"
        runs = json.load(urllib.request.urlopen(f"{base}/runs", timeout=10))
        assert sorted(runs) == ["mnist-r1/tensorboard", "mnist-r2/tensorboard"]
        query = "run=mnist-r2/tensorboard&tag=test/accuracy"
        points = json.load(urllib.request.urlopen(f"{base}/plugin/scalars/scalars?{query}", timeout=10))
        assert [(step, pytest.approx(value)) for _, step, value in points] == [(468, 0.99)]
    finally:
        board.terminate()
        board.wait(timeout=30)
