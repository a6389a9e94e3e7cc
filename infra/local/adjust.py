"""What a local run may change in the stack's training job, each change said in one `[local]` line:
`--cpu` (a GPU stack's job on CPU with gloo) and `--train-limit` (the trainer on the first N training
images); and the check that a GPU stack without `--cpu` has the GPUs it asks for, before any work.
"""

from __future__ import annotations

import subprocess
import sys
from typing import TextIO

from infra.local.plan import JobPlan, PlanError
from infra.program.settings import Settings

# The MNIST training set's size (trainer.finished.MNIST_TRAIN_IMAGES; a test keeps them equal), named
# here because the scheduler never imports the trainer.
MNIST_TRAIN_IMAGES = 60000


def visible_gpus() -> int:
    """CUDA devices this project's torch sees (asked in a subprocess: the scheduler never imports torch)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return int(probe.stdout.strip()) if probe.returncode == 0 and probe.stdout.strip().isdigit() else 0


def check_gpus(stack: str, settings: Settings) -> None:
    """A GPU stack runs here only with the GPUs it asks for (else --cpu): one line, before any work."""
    need = settings.job_nodes * settings.job_gpus_per_node
    if need == 0 and settings.backend != "nccl":
        return
    have = visible_gpus()
    if have < max(need, 1):
        raise PlanError(
            f"stack {stack} needs {need} GPUs ({settings.job_nodes} nodes x {settings.job_gpus_per_node}, "
            f"backend {settings.backend}) and this machine has {have}: add --cpu for a wiring check on CPU "
            "with gloo (same nodes and processes, no GPUs)"
        )


def on_cpu(job: JobPlan, settings: Settings, out: TextIO) -> None:
    """--cpu: the same pods and processes, on CPU with gloo and no GPU visible; says so."""
    for pod in job.pods:
        pod.argv = ["--backend=gloo" if a.startswith("--backend=") else a for a in pod.argv]
        pod.env["CUDA_VISIBLE_DEVICES"] = ""
    print(
        f"[local] --cpu: a wiring check on CPU with gloo, not a GPU run: {settings.job_nodes} nodes x "
        f"{settings.job_procs_per_node} processes, no GPUs (the stack asks for "
        f"{settings.job_gpus_per_node} per node, backend {settings.backend})",
        file=out,
        flush=True,
    )


def limit_training(job: JobPlan, train_limit: int, out: TextIO) -> None:
    """--train-limit N: every pod of the training job passes the trainer's own `--train-limit=N` (its
    last flag, so it wins over one the stack renders); says so."""
    if train_limit < 1:
        raise ValueError(f"train_limit {train_limit}: must be at least 1 (0 leaves the job as rendered)")
    for pod in job.pods:
        pod.argv.append(f"--train-limit={train_limit}")
    print(
        f"[local] --train-limit: the trainer uses only the first {train_limit} of {MNIST_TRAIN_IMAGES} "
        "training images (a quick wiring check), so its accuracy is not the stack's",
        file=out,
        flush=True,
    )
