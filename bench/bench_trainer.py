"""Time the trainer as a user runs it: torchrun subprocesses on local CPU processes (and 1 GPU).

    python bench/bench_trainer.py --data ../shared/data/mnist [--target 0.99] [--seeds 0,1,2]
        [--only "2 CPU"] [--launch fork,exec,torchrun] [--json out.json] [any trainer flag, e.g. --epochs=2]

For each configuration it launches ``python -m trainer.launch --rank-start=fork -- ... -m trainer``
as a pod does, with default trainer flags (except --data, --checkpoint-dir and --backend);
``--launch`` lists the launches to run in turn for each seed: ``fork`` (the default), ``exec``
(the launcher with ``--rank-start=exec``: torchrun starts each rank's interpreter) and ``torchrun``
(plain torchrun, no launcher). It timestamps every stdout line as it arrives, and reports:
seconds from launch to the first epoch whose test accuracy reaches the target, training samples/s,
final test accuracy, total wall time and peak RSS per rank (from metrics.json). With ``--seeds``, each
configuration runs once per seed (``--seed=N``), one row each.

Start-up, per rank: the seconds from launch at which each rank's process started, its ``main()`` began,
its imports were done, its data was ready, the process group was up (rendezvous), its model,
optimizer and schedule were ready, and its first optimizer step had run (``milestones_unix_per_rank``
in metrics.json), then the target and the exit (the launcher's, as seen here).

It also breaks the wall time down (rank 0's figures from metrics.json): start-up (launch to the
trainer's ``main()``: the launcher, torchrun, the ranks' start), imports (torch and the trainer), data load,
rendezvous (the process group), setup (model, DDP, optimizer), training, evaluation, checkpoints, and
the rest (results, exit, torchrun's shutdown) as the wall time left over.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
MILESTONES = ("process", "main", "imports", "data", "rendezvous", "model", "first_step")
PHASES = ("imports", "data_load", "rendezvous", "setup", "train", "evaluate", "checkpoint")
BREAKDOWN = ("startup", *PHASES, "rest")
ERROR_LINES = 15
TORCHRUN_LOG = re.compile(r"^[EWI]\d{4} [\d:.]+ +\d+ .*torch/distributed/elastic/")
EPOCH_LINE = re.compile(r"^trainer: epoch (\d+)/\d+ .* test_acc=([\d.]+)% ")


@dataclass(frozen=True)
class Config:
    name: str
    nproc: int
    threads: int
    backend: str


@dataclass
class Result:
    config: str
    seconds_to_target: float | None
    wall_s: float
    final_accuracy: float
    samples_per_s: float
    peak_rss_mib_per_rank: list[float]
    epochs_to_target: int | None
    seconds_by_phase: dict[str, float]
    # Per rank: seconds from launch to each of MILESTONES (a rank that lacks one: absent).
    milestones_per_rank: list[dict[str, float]]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def configurations() -> list[Config]:
    configs = [
        Config("1 CPU process, 1 thread", 1, 1, "gloo"),
        Config("1 CPU process, 2 threads", 1, 2, "gloo"),
        Config("2 CPU processes, 1 thread each", 2, 1, "gloo"),
    ]
    import torch

    if torch.cuda.is_available():
        configs.append(Config("1 GPU", 1, 4, "nccl"))
    return configs


LAUNCHES = {
    "fork": ["trainer.launch", "--rank-start=fork", "--"],
    "exec": ["trainer.launch", "--rank-start=exec", "--"],
    "torchrun": ["torch.distributed.run"],
}


def run_one(
    config: Config, data: str, target: float, extra: list[str], seed: int | None, launch: str
) -> Result:
    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as tmp:
        command = [
            sys.executable,
            "-m",
            *LAUNCHES[launch],
            "--nnodes=1",
            f"--nproc-per-node={config.nproc}",
            "--master-addr=127.0.0.1",
            f"--master-port={free_port()}",
            "--max-restarts=0",
            "-m",
            "trainer",
            f"--data={data}",
            f"--checkpoint-dir={tmp}",
            f"--backend={config.backend}",
            *([] if seed is None else [f"--seed={seed}"]),
            *extra,
        ]
        env = {**os.environ, "OMP_NUM_THREADS": str(config.threads), "PYTHONPATH": str(REPO_ROOT)}
        launched_unix = time.time()
        started = time.monotonic()
        reached: tuple[float, int] | None = None
        errors = Path(tmp) / "stderr.log"
        with (
            errors.open("w") as stderr,
            subprocess.Popen(
                command,
                cwd=REPO_ROOT,
                env=env,
                text=True,
                stdout=subprocess.PIPE,
                stderr=stderr,
            ) as process,
        ):
            assert process.stdout is not None
            for line in process.stdout:
                now = time.monotonic() - started
                print(f"  [{now:6.1f}s] {line.rstrip()}", flush=True)
                match = EPOCH_LINE.match(line)
                if match and reached is None and float(match.group(2)) / 100 >= target:
                    reached = (now, int(match.group(1)))
        wall = time.monotonic() - started
        if process.returncode != 0:
            sys.stderr.write(last_lines(errors.read_text(errors="replace"), ERROR_LINES))
            raise SystemExit(f"{config.name}: trainer exited {process.returncode}")
        metrics = json.loads((Path(tmp) / "metrics.json").read_text())
    return Result(
        config=f"{config.name}, {launch}" + ("" if seed is None else f", seed {seed}"),
        seconds_to_target=round(reached[0], 1) if reached else None,
        wall_s=round(wall, 1),
        final_accuracy=metrics["final_test_accuracy"],
        samples_per_s=round(metrics["samples_per_s"]),
        peak_rss_mib_per_rank=metrics["peak_rss_mib_per_rank"],
        epochs_to_target=reached[1] if reached else None,
        seconds_by_phase=breakdown(metrics, launched_unix, wall),
        milestones_per_rank=[
            {name: round(at - launched_unix, 2) for name, at in marks.items()}
            for marks in metrics.get("milestones_unix_per_rank", [])
        ],
    )


def last_lines(text: str, count: int) -> str:
    """The workers' last ``count`` lines of stderr: what they wrote before torchrun's own report."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if TORCHRUN_LOG.match(line):
            lines = lines[:index] or lines
            break
    return "".join(f"{line}\n" for line in lines[-count:])


def breakdown(metrics: dict[str, Any], launched_unix: float, wall: float) -> dict[str, float]:
    """Seconds per phase, :data:`BREAKDOWN` order; they add up to ``wall``."""
    measured = metrics["phase_seconds"]
    seconds = {"startup": metrics["started_unix"] - launched_unix}
    seconds.update({phase: measured.get(phase, 0.0) for phase in PHASES})
    seconds["rest"] = wall - sum(seconds.values())
    return {phase: round(value, 2) for phase, value in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default="./data/mnist", help="MNIST root (see trainer --help)")
    parser.add_argument("--target", type=float, default=0.99, help="test accuracy to time")
    parser.add_argument("--only", help="run only configurations whose name contains this")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--seeds", help="comma-separated trainer seeds, one run each (default: the trainer's default)"
    )
    parser.add_argument(
        "--launch",
        default="fork",
        help=f"comma-separated launches, run in turn for each seed: {', '.join(LAUNCHES)} (default: fork)",
    )
    args, extra = parser.parse_known_args()
    seeds: list[int | None] = [int(s) for s in args.seeds.split(",")] if args.seeds else [None]
    launches = args.launch.split(",")
    unknown = [name for name in launches if name not in LAUNCHES]
    if unknown:
        parser.error(f"--launch: {unknown[0]!r} is not one of {', '.join(LAUNCHES)}")
    results = []
    for config in configurations():
        if args.only and args.only not in config.name:
            continue
        for seed in seeds:
            for launch in launches:
                print(f"== {config.name}, {launch}" + ("" if seed is None else f", seed {seed}"), flush=True)
                results.append(run_one(config, args.data, args.target, extra, seed, launch))
    print(
        f"\n{'configuration':50} {'to ' + str(args.target):>9} {'wall':>7} {'final':>7} "
        f"{'samples/s':>9}  peak RSS MiB/rank"
    )
    for r in results:
        to_target = f"{r.seconds_to_target:.1f}s" if r.seconds_to_target is not None else "never"
        print(
            f"{r.config:50} {to_target:>9} {r.wall_s:6.1f}s {100 * r.final_accuracy:6.2f}% "
            f"{r.samples_per_s:>9}  {r.peak_rss_mib_per_rank}"
        )
    print(f"\n{'seconds by phase':50} " + " ".join(f"{phase:>10}" for phase in BREAKDOWN))
    for r in results:
        print(f"{r.config:50} " + " ".join(f"{r.seconds_by_phase[phase]:10.2f}" for phase in BREAKDOWN))
    columns = (*MILESTONES, "target", "exit")
    print(f"\n{'seconds from launch, per rank':50} " + " ".join(f"{name:>10}" for name in columns))
    for r in results:
        for rank, marks in enumerate(r.milestones_per_rank):
            figures = {**marks, "exit": r.wall_s}
            if rank == 0 and r.seconds_to_target is not None:
                figures["target"] = r.seconds_to_target
            cells = [f"{figures[name]:10.2f}" if name in figures else f"{'-':>10}" for name in columns]
            print(f"{r.config + f', rank {rank}':50} " + " ".join(cells))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")


if __name__ == "__main__":
    main()
