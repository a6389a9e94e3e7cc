"""Atomic, self-verifying checkpoints.

File format: one ASCII header line ``TRAINER-CKPT 1 <sha256 of payload> <payload bytes>\\n``
followed by the payload, a ``torch.save`` archive. A reader checks length and sha256 before it
unpickles anything, so a truncated or corrupted file is rejected, never loaded.
Files are named ``ckpt-epoch-NNNN.pt`` after epoch NNNN, and ``ckpt-epoch-NNNN-step-SSSSSS.pt``
when a stop (SIGTERM: :mod:`trainer.preempt`) came SSSSSS steps into the epoch after NNNN. They are
ordered by (epoch, step): the newest valid one wins, the last :data:`KEEP` stay, mid-epoch or not.

A directory holds one schedule (total optimizer steps) at a time. When a run starts with another
schedule than its newest checkpoint's (an edit of epochs, batch size or, under weak scaling, the
world size under the same run id), :func:`supersede` moves that schedule's checkpoints, results
and TensorBoard curves into ``superseded-<UTC time>-<steps>steps/`` beside them and the run starts
afresh: nothing is deleted, and the old files are never resumed with a schedule they were not
written for. A checkpoint of another model (parameter names or shapes differ: written before the
model's layout changed) is moved aside the same way.
"""

from __future__ import annotations

import hashlib
import io
import re
import shutil
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from trainer.fsio import atomic_write_bytes

KEEP = 3
MAGIC = b"TRAINER-CKPT"
VERSION = 1
_NAME = re.compile(r"^ckpt-epoch-(\d{4,})(?:-step-(\d{6,}))?\.pt$")


class CorruptCheckpointError(Exception):
    """The file is not a complete checkpoint written by this trainer."""


def checkpoint_path(directory: Path, epoch: int, step: int = 0) -> Path:
    """The file of a checkpoint ``step`` steps into the epoch after ``epoch`` (0: at the epoch's end)."""
    if step:
        return directory / f"ckpt-epoch-{epoch:04d}-step-{step:06d}.pt"
    return directory / f"ckpt-epoch-{epoch:04d}.pt"


def encode(state: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    digest = hashlib.sha256(payload).hexdigest()
    return MAGIC + f" {VERSION} {digest} {len(payload)}\n".encode() + payload


def verified_payload(blob: bytes) -> bytes:
    """The payload of an encoded checkpoint, after checking header, length and sha256."""
    header, newline, payload = blob.partition(b"\n")
    fields = header.split(b" ")
    if not newline or len(fields) != 4 or fields[0] != MAGIC or fields[1] != str(VERSION).encode():
        raise CorruptCheckpointError("bad header")
    digest = fields[2].decode(errors="replace")
    length = int(fields[3]) if fields[3].isdigit() else -1
    if len(payload) != length:
        raise CorruptCheckpointError(f"{len(payload)} payload bytes, header says {length}")
    if hashlib.sha256(payload).hexdigest() != digest:
        raise CorruptCheckpointError("sha256 mismatch")
    return payload


def decode(payload: bytes, device: torch.device) -> dict[str, Any]:
    """Unpickle a verified payload (tensors only and plain containers: ``weights_only``)."""
    state = torch.load(io.BytesIO(payload), map_location=device, weights_only=True)
    if not isinstance(state, dict):
        raise CorruptCheckpointError("payload is not a dict")
    return state


def save_checkpoint(
    directory: Path, epoch: int, state: dict[str, Any], keep: int = KEEP, step: int = 0
) -> Path:
    """Write :func:`checkpoint_path` atomically, then delete all but the newest ``keep``."""
    path = checkpoint_path(directory, epoch, step)
    atomic_write_bytes(path, encode(state))
    for old in list_checkpoints(directory)[keep:]:
        old.unlink(missing_ok=True)
    return path


def list_checkpoints(directory: Path) -> list[Path]:
    """Checkpoint files in ``directory``, newest (epoch, step) first."""
    if not directory.is_dir():
        return []
    matches = [(m, p) for p in directory.iterdir() if (m := _NAME.match(p.name))]
    found = [((int(m.group(1)), int(m.group(2) or 0)), p) for m, p in matches]
    return [path for _, path in sorted(found, reverse=True)]


def newest_valid(directory: Path, report: Callable[[str], None]) -> tuple[Path, bytes] | None:
    """The newest checkpoint whose payload verifies; each one skipped is reported in one line."""
    for path in list_checkpoints(directory):
        try:
            return path, verified_payload(path.read_bytes())
        except (CorruptCheckpointError, OSError) as error:
            report(f"skipping corrupt checkpoint {path}: {error}")
    return None


def supersede(directory: Path, total_steps: int, results: Iterable[Path] = ()) -> Path:
    """Move every checkpoint of ``directory`` and the ``results`` that exist (metrics.json, model.pt,
    the TensorBoard directory) into a new ``superseded-<UTC time>-<total_steps>steps/`` there; returns it.

    Checkpoints go first: once they are gone, a start that crashed halfway finds only what is left
    and, with the schedule still changed, moves that too.
    """
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    archive = directory / f"superseded-{stamp}-{total_steps}steps"
    suffix = 1
    while archive.exists():
        suffix += 1
        archive = directory / f"superseded-{stamp}-{total_steps}steps-{suffix}"
    archive.mkdir(parents=True)
    for path in [*reversed(list_checkpoints(directory)), *results]:
        if path.exists():
            shutil.move(str(path), str(archive / path.name))
    return archive
