"""Run the shortest real 2-rank gloo run again and again and count the runs that do not exit 0.

    python bench/stress_exit.py --data ../shared/data/mnist [--runs 300] [--log-dir DIR]

Each run is what a pod runs, through the trainer's own launcher:
``python -m trainer.launch -- --nnodes=1 --nproc-per-node=2 ... -m trainer --epochs=1 --batch-size=64
--train-limit=1024 --backend=gloo`` with a fresh checkpoint directory and a free port. A finished run
must exit 0 every time; a teardown race (a rank aborting at interpreter exit, exit 134) shows up
as a rare non-zero exit, so the figure that matters is the count over many runs. The output of
every failed run is kept in ``--log-dir`` (default: a temporary directory, printed at the end).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def command(data: str, checkpoint_dir: Path, port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "trainer.launch",
        "--",
        "--nnodes=1",
        "--nproc-per-node=2",
        "--master-addr=127.0.0.1",
        f"--master-port={port}",
        "--max-restarts=0",
        "-m",
        "trainer",
        f"--data={data}",
        f"--checkpoint-dir={checkpoint_dir}",
        "--epochs=1",
        "--batch-size=64",
        "--train-limit=1024",
        "--backend=gloo",
    ]


def one_run(data: str, work: Path, index: int, timeout_s: float) -> tuple[int, str, float]:
    """(exit code, combined output, seconds) of one run in its own checkpoint directory."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            command(data, work / f"run-{index}", free_port()),
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        code, output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as error:
        code = -1
        output = f"timed out after {timeout_s:g} s\n{error.stdout or ''}{error.stderr or ''}"
    return code, output, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="MNIST directory (e.g. ../shared/data/mnist)")
    parser.add_argument("--runs", type=int, default=300, help="how many runs (default 300)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds one run may take")
    parser.add_argument("--log-dir", type=Path, default=None, help="where failed runs' output goes")
    args = parser.parse_args(argv)
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="stress-exit-logs-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    failures: list[tuple[int, int]] = []
    durations: list[float] = []
    with tempfile.TemporaryDirectory(prefix="stress-exit-") as tmp:
        for index in range(1, args.runs + 1):
            code, output, seconds = one_run(args.data, Path(tmp), index, args.timeout)
            durations.append(seconds)
            if code != 0:
                failures.append((index, code))
                (log_dir / f"run-{index}.log").write_text(output)
                print(f"run {index}: exit {code} ({seconds:.1f} s), output in {log_dir}/run-{index}.log")
            if index % 25 == 0 or index == args.runs:
                print(f"{index} runs, {len(failures)} non-zero exits", flush=True)
    mean = sum(durations) / len(durations)
    print(
        f"stress_exit: {args.runs} runs, {len(failures)} non-zero exits "
        f"({', '.join(f'run {i}: {c}' for i, c in failures) or 'none'}), mean {mean:.1f} s per run"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
