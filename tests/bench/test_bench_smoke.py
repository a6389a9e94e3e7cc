"""Each benchmark script runs at its smallest size (a benchmark nothing runs rots): it exits 0 and
prints its figures. The figures themselves are not judged here; docs/BENCHMARKS.md records them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer.conftest import SHARED_MNIST

REPO_ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)}

pytestmark = pytest.mark.slow


def _run(*args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=REPO_ROOT, env=ENV, capture_output=True, text=True, timeout=timeout
    )


def test_bench_serve_runs_at_its_smallest_size(tmp_path):
    figures = tmp_path / "serve.json"
    done = _run(
        "bench/bench_serve.py", f"--data={SHARED_MNIST}", "--requests=5", "--rounds=1", f"--json={figures}"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(figures.read_text())
    for key in (
        "http_b1_p50_ms",
        "inprocess_b1_p50_ms",
        "binary_b1_p50_ms",
        "http_b256_images_per_s",
        "binary_b256_images_per_s",
        "inprocess_b256_images_per_s",
    ):
        assert results[key] > 0, key
    assert "batch 256 (images/s)" in done.stdout


def test_bench_trainer_runs_at_its_smallest_size(tmp_path):
    figures = tmp_path / "trainer.json"
    done = _run(
        "bench/bench_trainer.py",
        f"--data={SHARED_MNIST}",
        "--only=1 CPU process, 1 thread",
        f"--json={figures}",
        "--epochs=1",
        "--train-limit=512",
        "--batch-size=64",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (result,) = json.loads(figures.read_text())
    assert result["config"] == "1 CPU process, 1 thread, fork" and result["wall_s"] > 0
    # Each milestone of the one rank's start-up, in order, within the run.
    (marks,) = result["milestones_per_rank"]
    order = ["process", "main", "imports", "data", "rendezvous", "model", "first_step"]
    assert sorted(marks) == sorted(order), marks
    times = [marks[name] for name in order]
    assert times[0] >= 0 and times == sorted(times) and times[-1] <= result["wall_s"], marks
    assert "seconds from launch, per rank" in done.stdout


def test_stress_exit_runs_at_its_smallest_size(tmp_path):
    done = _run("bench/stress_exit.py", f"--data={SHARED_MNIST}", "--runs=1", f"--log-dir={tmp_path}")
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    assert "stress_exit: 1 runs, 0 non-zero exits" in done.stdout


def test_pytest_cpu_summarises_what_its_plugin_wrote(tmp_path):
    (tmp_path / "cpu.1.tsv").write_text(
        "tests/a.py::test_x\t1.5\t2.5\t3.0\ntests/b.py::test_y\t0.5\t0.0\t1.0\n"
    )
    done = _run("bench/pytest_cpu.py", str(tmp_path), timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "tests/a.py" in done.stdout


def test_bench_trainer_shows_why_a_run_failed(tmp_path):
    done = _run(
        "bench/bench_trainer.py",
        f"--data={tmp_path / 'no-such-mnist'}",
        "--only=1 CPU process, 1 thread",
        "--epochs=1",
    )
    assert done.returncode != 0
    assert "trainer exited" in done.stderr
    assert "no-such-mnist" in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("ranks", [1, 2])
def test_bench_step_runs_at_its_smallest_size(ranks):
    done = _run(
        "bench/bench_step.py",
        f"--data={SHARED_MNIST}",
        f"--ranks={ranks}",
        "--batch=8",
        "--steps=2",
        "--warmup=1",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    if ranks == 1:
        assert "1 process, 1 thread, batch 8: " in done.stdout
        assert "aten::conv2d  [8, 1, 28, 28]" in done.stdout
    else:
        for rank in range(2):
            for comm in ("none", "average_gradients", "barrier"):
                assert f"rank {rank}, {comm:>17}: compute " in done.stdout, done.stdout
