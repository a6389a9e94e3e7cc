"""Checkpoint files: atomic, verified before loading, rotated; truncated ones are never loaded."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trainer import checkpoint


def _state(epoch: int) -> dict[str, object]:
    return {"epoch": epoch, "model": {"w": torch.full((4,), float(epoch))}, "history": []}


def test_round_trip(tmp_path: Path) -> None:
    path = checkpoint.save_checkpoint(tmp_path, 3, _state(3))
    assert path.name == "ckpt-epoch-0003.pt"
    payload = checkpoint.verified_payload(path.read_bytes())
    state = checkpoint.decode(payload, torch.device("cpu"))
    assert state["epoch"] == 3
    assert torch.equal(state["model"]["w"], torch.full((4,), 3.0))


@pytest.mark.parametrize("keep_bytes", [0, 10, 60, -1])
def test_truncated_file_is_rejected_before_unpickling(tmp_path: Path, keep_bytes: int) -> None:
    path = checkpoint.save_checkpoint(tmp_path, 1, _state(1))
    blob = path.read_bytes()
    with pytest.raises(checkpoint.CorruptCheckpointError):
        checkpoint.verified_payload(blob[:keep_bytes])


def test_flipped_byte_is_rejected(tmp_path: Path) -> None:
    blob = bytearray(checkpoint.save_checkpoint(tmp_path, 1, _state(1)).read_bytes())
    blob[-20] ^= 0xFF
    with pytest.raises(checkpoint.CorruptCheckpointError, match="sha256 mismatch"):
        checkpoint.verified_payload(bytes(blob))


def test_newest_valid_skips_a_truncated_newest_and_reports_it(tmp_path: Path) -> None:
    for epoch in (1, 2):
        checkpoint.save_checkpoint(tmp_path, epoch, _state(epoch))
    newest = checkpoint.checkpoint_path(tmp_path, 2)
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    reports: list[str] = []
    found = checkpoint.newest_valid(tmp_path, reports.append)
    assert found is not None
    assert found[0] == checkpoint.checkpoint_path(tmp_path, 1)
    assert checkpoint.decode(found[1], torch.device("cpu"))["epoch"] == 1
    assert len(reports) == 1
    assert reports[0].startswith(f"skipping corrupt checkpoint {newest}: ")


def test_rotation_keeps_the_newest_three(tmp_path: Path) -> None:
    for epoch in range(1, 6):
        checkpoint.save_checkpoint(tmp_path, epoch, _state(epoch))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["ckpt-epoch-0003.pt", "ckpt-epoch-0004.pt", "ckpt-epoch-0005.pt"]


def test_no_checkpoint_dir_means_fresh_start(tmp_path: Path) -> None:
    assert checkpoint.newest_valid(tmp_path / "absent", print) is None


def test_a_mid_epoch_checkpoint_sits_between_its_epochs_and_counts_towards_keep(tmp_path: Path) -> None:
    checkpoint.save_checkpoint(tmp_path, 1, _state(1))
    checkpoint.save_checkpoint(tmp_path, 1, _state(1), step=7)
    checkpoint.save_checkpoint(tmp_path, 1, _state(1), step=12)
    assert [p.name for p in checkpoint.list_checkpoints(tmp_path)] == [
        "ckpt-epoch-0001-step-000012.pt",
        "ckpt-epoch-0001-step-000007.pt",
        "ckpt-epoch-0001.pt",
    ]
    checkpoint.save_checkpoint(tmp_path, 2, _state(2))  # the epoch the stop came in, finished later
    assert [p.name for p in checkpoint.list_checkpoints(tmp_path)] == [
        "ckpt-epoch-0002.pt",
        "ckpt-epoch-0001-step-000012.pt",
        "ckpt-epoch-0001-step-000007.pt",
    ]
    newest_mid = checkpoint.checkpoint_path(tmp_path, 1, 12)
    checkpoint.checkpoint_path(tmp_path, 2).write_bytes(b"TRAINER-CKPT 1 truncated")
    found = checkpoint.newest_valid(tmp_path, lambda _: None)
    assert found is not None and found[0] == newest_mid
