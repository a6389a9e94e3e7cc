"""What loading cuDNN's libraries in a launcher, before it forks a rank, saves the rank's first step.

    python bench/bench_device_fork.py [--rounds 2]

A forked rank (``python -m trainer.launch``'s default start) inherits the launcher's memory: torch is
imported, but CUDA must not be initialized before the fork. cuDNN loads its sub-libraries (graph,
engines, heuristics, cnn, ops) with ``dlopen`` at its first use, in the rank, during the first forward
pass. This script times, in fresh launcher-like processes, alternating: ``import torch``; with
``--preload``, ``dlopen`` of every ``libcudnn*.so.9`` beside the one torch loaded (CUDA still not
initialized: checked); then a forked child's CUDA context, the trainer's model on the device, and its
first forward, backward and update on a batch of 128 zeros. Needs a CUDA device.
A script that prints, never a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def cudnn_libraries() -> list[Path]:
    """The cuDNN libraries beside the ``libcudnn.so.9`` this process has mapped (after ``import torch``)."""
    with open("/proc/self/maps") as maps:
        mapped = {line.split()[-1] for line in maps if "libcudnn.so" in line}
    if not mapped:
        return []
    directory = Path(sorted(mapped)[0]).parent
    return sorted(path for path in directory.glob("libcudnn*.so.9") if path.name != "libcudnn.so.9")


def child(report: int) -> None:
    import torch

    from trainer.model import build_model
    from trainer.optim import AdamW

    times: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        torch.cuda.synchronize()
        now = time.perf_counter()
        times[name] = round(now - clock, 3)
        clock = now

    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")
    lap("context")
    model = build_model(torch.device("cuda"))
    optimizer = AdamW(model.parameters(), lr=0.01, weight_decay=0.0)
    lap("model")
    images = torch.zeros(128, 1, 28, 28, device="cuda")
    labels = torch.zeros(128, dtype=torch.long, device="cuda")
    loss = torch.nn.functional.cross_entropy(model(images), labels)
    lap("first forward")
    loss.backward()
    lap("first backward")
    optimizer.step()
    lap("first update")
    os.write(report, json.dumps(times).encode())


def parent(preload: bool) -> dict[str, float]:
    started = time.perf_counter()
    import ctypes

    import torch

    times = {"import torch": round(time.perf_counter() - started, 3)}
    clock = time.perf_counter()
    if preload:
        for library in cudnn_libraries():
            ctypes.CDLL(str(library))
        times["preload cuDNN"] = round(time.perf_counter() - clock, 3)
        times["libraries"] = len(cudnn_libraries())
    if torch.cuda.is_initialized():
        raise SystemExit("CUDA was initialized before the fork")
    read, write = os.pipe()
    forked = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        child(write)
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        times.update(json.loads(pipe.read() or "{}"))
    os.waitpid(pid, 0)
    times["fork to first update"] = round(time.perf_counter() - forked, 3)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--one", choices=("plain", "preload"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO_ROOT))
    if args.one:
        print(json.dumps(parent(args.one == "preload")))
        return
    for round_ in range(1, args.rounds + 1):
        for kind in ("plain", "preload"):
            out = subprocess.run(
                [sys.executable, __file__, "--one", kind], capture_output=True, text=True, check=False
            )
            line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr.strip()[-300:]
            print(f"round {round_} {kind:8} {line}", flush=True)


if __name__ == "__main__":
    main()
