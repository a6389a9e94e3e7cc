"""lineage.json: what a finished run's model came from, written by rank 0 beside model.pt.

    {
      "schema": "ddp-mnist.lineage/v1",
      "model":    {"file": "model.pt", "sha256": ...},
      "data":     {"source": --data, "files": {name: {"file": as read, "sha256": ...}},
                   "verified_by": the SHA256SUMS the files were checked against, or null},
      "image":    {"reference", "digest", "source_commit", "build_time"} (null where unknown),
      "stack":    the Pulumi stack that ran the job (null outside one),
      "settings": the flags that shape the result, and "settings_sha256" over their canonical JSON,
      "runtime":  {"torch", "python", "world_size", "backend", "device"},
      "metrics":  the final figures (accuracy and losses, no timings),
      "run":      {"started", "finished", "resumed_from_epoch", "job", "host"}
    }

Everything but ``run`` is fixed by the settings, the data, the image and the stack: two runs of the
same settings on the same data give records that differ in ``run`` only (``tests/trainer/
test_lineage.py`` trains twice and compares). The pod builder (``infra/program/job/env.py``) sets the
``DDP_MNIST_*`` variables read here; the image's build arguments set its source commit and build
time (``Dockerfile``). The file's sha256 is in the SHA256SUMS beside it (:func:`trainer.metrics.
export_results`), so ``sha256sum -c SHA256SUMS`` checks it with model.pt, and the model server
verifies it before it returns it (``trainer/serve/load.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import torch

from trainer.cli import TrainConfig
from trainer.metrics import MODEL_FILE

SCHEMA = "ddp-mnist.lineage/v1"
# Set by the pod builder (infra/program/job/env.py lineage_env) and by the image (Dockerfile).
STACK_ENV = "DDP_MNIST_STACK"
JOB_ENV = "DDP_MNIST_JOB"
IMAGE_ENV = "DDP_MNIST_IMAGE"
SOURCE_COMMIT_ENV = "DDP_MNIST_SOURCE_COMMIT"
BUILD_TIME_ENV = "DDP_MNIST_BUILD_TIME"
# The fields that name one attempt rather than what it produced.
VOLATILE = "run"
_DIGEST = re.compile(r"@(sha256:[0-9a-f]{64})$")


def settings(config: TrainConfig, world_size: int, backend: str) -> dict[str, Any]:
    """The settings that shape the trained model (the backend as resolved, not ``auto``)."""
    return {
        "epochs": config.epochs,
        "batch_size": config.batch_size,
        "scaling": config.scaling,
        "lr": config.lr,
        "lr_scaling": config.lr_scaling,
        "weight_decay": config.weight_decay,
        "label_smoothing": config.label_smoothing,
        "seed": config.seed,
        "train_limit": config.train_limit,
        "world_size": world_size,
        "backend": backend,
    }


def canonical_sha256(value: Any) -> str:
    """sha256 of ``value`` as canonical JSON: sorted keys, no spaces, UTF-8."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def image(environ: Mapping[str, str]) -> dict[str, str | None]:
    """The image as the pod names it (its digest when the reference pins one) and as it was built."""
    reference = environ.get(IMAGE_ENV) or None
    found = _DIGEST.search(reference) if reference else None
    return {
        "reference": reference,
        "digest": found.group(1) if found else None,
        "source_commit": _known(environ.get(SOURCE_COMMIT_ENV)),
        "build_time": _known(environ.get(BUILD_TIME_ENV)),
    }


def _known(value: str | None) -> str | None:
    """A build argument's value; None for one left unset (empty, or the Dockerfile's ``unknown``)."""
    return value if value and value != "unknown" else None


def final_metrics(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The final figures of metrics.json (``trainer.metrics.summary``), without any timing."""
    keys = ("final_test_accuracy", "final_test_loss", "final_train_loss")
    return {key: summary.get(key) for key in keys} | {"epochs_trained": len(summary.get("history", []))}


def iso(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).isoformat(timespec="seconds")


def record(
    config: TrainConfig,
    *,
    model_sha256: str,
    summary: Mapping[str, Any],
    world_size: int,
    backend: str,
    device: str,
    started_unix: float,
    resumed_from_epoch: int,
    data: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """lineage.json's content (see the module docstring); ``data`` is the files as the run loaded them
    (:func:`trainer.mnist_files.data_files`, hashed at load)."""
    env = os.environ if environ is None else environ
    shaping = settings(config, world_size, backend)
    return {
        "schema": SCHEMA,
        "model": {"file": MODEL_FILE, "sha256": model_sha256},
        "data": {"source": config.data, **data},
        "image": image(env),
        "stack": env.get(STACK_ENV) or None,
        "settings": shaping,
        "settings_sha256": canonical_sha256(shaping),
        "runtime": {
            "torch": torch.__version__,
            "python": platform.python_version(),
            "world_size": world_size,
            "backend": backend,
            "device": device,
        },
        "metrics": final_metrics(summary),
        VOLATILE: {
            "started": iso(started_unix),
            "finished": datetime.now(UTC).isoformat(timespec="seconds"),
            "resumed_from_epoch": resumed_from_epoch,
            "job": env.get(JOB_ENV) or None,
            "host": env.get("HOSTNAME") or platform.node() or None,
        },
    }


def encode(lineage: Mapping[str, Any]) -> bytes:
    """The file's bytes: indented JSON with sorted keys, as metrics.json is written."""
    return (json.dumps(lineage, indent=2, sort_keys=True) + "\n").encode()
