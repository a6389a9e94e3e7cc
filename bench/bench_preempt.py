"""A preemption of the default 2-rank CPU run, timed: SIGTERM to exit, the checkpoint, the restart.

    python bench/bench_preempt.py --data ../shared/data/mnist [--at 0.5] [--json out.json]

Runs ``python -m trainer.launch -- torchrun --nproc-per-node=2 ... -m trainer`` as a pod does, with
the trainer's default flags (plus ``--log-every=1 --progress-seconds=0``, so that every step rank 0
trains is on stdout), three times in fresh checkpoint directories:

1. uninterrupted, to the end;
2. sent SIGTERM (the launcher, as the kubelet does to PID 1) once rank 0 reports the step at ``--at``
   of the run: the seconds from the signal to the launcher's exit (every rank has exited by then),
   the exit code, the checkpoint's size and write time (rank 0's stop line), the steps lost (the last
   step rank 0 trained minus the checkpoint's step);
3. restarted in 2's directory, to the end.

It prints those figures, the total wall time of 2 + 3 against 1, whether 3's model.pt equals 1's
tensor for tensor, and what one agreement costs (:func:`trainer.preempt.agreed` timed on 2 gloo ranks
under torchrun, ``--agreement-only`` for that alone), to weigh against a step's time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from trainer.preempt import AGREE_EVERY  # noqa: E402 (the repository root first)

PROGRESS = re.compile(r"^trainer: progress step +(\d+)/(\d+) ")
STOP = re.compile(r"^trainer: stop at .*; checkpoint (\S+) \((\d+) bytes, written in ([\d.]+) s\)$")
CHECKPOINT_STEP = re.compile(r"-step-(\d+)\.pt$")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def command(data: str, checkpoint_dir: Path) -> list[str]:
    port = free_port()
    torchrun = ["--nnodes=1", "--nproc-per-node=2", "--master-addr=127.0.0.1", f"--master-port={port}"]
    trainer = [f"--data={data}", f"--checkpoint-dir={checkpoint_dir}", "--log-every=1"]
    trainer.append("--progress-seconds=0")
    launch = [sys.executable, "-m", "trainer.launch", "--", *torchrun, "--max-restarts=0"]
    return [*launch, "-m", "trainer", *trainer]


def environment() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"}


def run_to_end(argv: list[str]) -> float:
    started = time.perf_counter()
    env = environment()
    result = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.exit(f"bench_preempt: run failed with exit code {result.returncode}:\n{result.stderr[-3000:]}")
    return time.perf_counter() - started


def run_preempted(argv: list[str], at: float) -> dict[str, Any]:
    """Start ``argv``, SIGTERM it when rank 0 reports the step at fraction ``at``, wait for its exit."""
    started = time.perf_counter()
    with subprocess.Popen(
        argv, cwd=REPO_ROOT, env=environment(), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    ) as process:
        assert process.stdout is not None
        signalled = 0.0
        lines: list[str] = []
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            found = PROGRESS.match(line)
            if not signalled and found and int(found.group(1)) >= at * int(found.group(2)):
                process.send_signal(signal.SIGTERM)
                signalled = time.perf_counter()
        process.wait()
        exited = time.perf_counter()
    stop = next((m for line in lines if (m := STOP.match(line))), None)
    if not signalled or stop is None:
        sys.exit("bench_preempt: no stop line; output:\n" + "\n".join(lines[-30:]))
    trained = [int(m.group(1)) for line in lines if (m := PROGRESS.match(line))]
    step_in_file = CHECKPOINT_STEP.search(stop.group(1))
    return {
        "exit_code": process.returncode,
        "sigterm_to_exit_s": exited - signalled,
        "wall_s": exited - started,
        "checkpoint": stop.group(1),
        "checkpoint_bytes": int(stop.group(2)),
        "checkpoint_write_s": float(stop.group(3)),
        "last_step_trained": trained[-1],
        "steps_lost": trained[-1] - (int(step_in_file.group(1)) if step_in_file else trained[-1]),
    }


def same_model(first: Path, second: Path) -> bool:
    import torch

    a, b = (torch.load(d / "model.pt", weights_only=True) for d in (first, second))
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def agreement_rank() -> None:
    """One torchrun rank: time :func:`trainer.preempt.agreed` (best of 5 x 2000 calls; rank 0 prints)."""
    import torch
    import torch.distributed as dist

    from trainer import preempt

    dist.init_process_group("gloo")
    cpu = torch.device("cpu")
    for _ in range(200):
        preempt.agreed(cpu)
    rounds = []
    for _ in range(5):
        dist.barrier()
        tick = time.perf_counter()
        for _ in range(2000):
            preempt.agreed(cpu)
        rounds.append((time.perf_counter() - tick) / 2000)
    if dist.get_rank() == 0:
        print(f"{min(rounds) * 1e3:.3f}")
    dist.destroy_process_group()


def agreement_ms() -> float:
    """Milliseconds per agreement between 2 CPU ranks (this script under torchrun)."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2"]
    argv = [*torchrun, f"--master-port={free_port()}", __file__, "--agreement-rank"]
    env = environment()
    result = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.exit(f"bench_preempt: agreement timing failed:\n{result.stderr[-3000:]}")
    return float(result.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="./data/mnist", help="MNIST root (see trainer --help)")
    parser.add_argument("--at", type=float, default=0.5, help="fraction of the run's steps to stop at")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--agreement-only", action="store_true", help="time one agreement, nothing else")
    parser.add_argument("--agreement-rank", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.agreement_rank:
        agreement_rank()
        return
    if options.agreement_only:
        print(f"agreement_ms: {agreement_ms():.3f}")
        return
    with tempfile.TemporaryDirectory(prefix="bench-preempt-") as scratch:
        whole, parts = Path(scratch) / "uninterrupted", Path(scratch) / "preempted"
        uninterrupted_s = run_to_end(command(options.data, whole))
        preempted = run_preempted(command(options.data, parts), options.at)
        restart_s = run_to_end(command(options.data, parts))
        figures = {
            **preempted,
            "restart_wall_s": restart_s,
            "preempted_total_s": preempted["wall_s"] + restart_s,
            "uninterrupted_s": uninterrupted_s,
            "same_model": same_model(whole, parts),
            "agreement_ms": agreement_ms(),
            "agree_every_steps": AGREE_EVERY,
        }
    for key, value in figures.items():
        print(f"{key:>20}: {value:.3f}" if isinstance(value, float) else f"{key:>20}: {value}")
    if options.json:
        options.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
