"""The curves' event files (`trainer.curves.EventFile`) judged by TensorBoard itself: its own checksum
and its own reader, purges included. No trainer process: the runs' files are `test_curves.py`'s."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.curves import EventFile, masked_crc32c


@pytest.mark.parametrize("data", [b"", b"123456789", bytes(range(256)) * 3])
def test_the_checksum_is_tensorboards(data: bytes) -> None:
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as theirs

    assert masked_crc32c(data) == theirs(data)


def test_the_standard_crc32c_check_value() -> None:
    from trainer.curves import crc32c

    assert crc32c(b"123456789") == 0xE3069283  # CRC-32C's published check value


def scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series in ``directory`` as TensorBoard shows it (purged steps dropped)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(directory), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {
        tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }


def test_a_second_file_purges_the_steps_from_its_start_as_tensorboard_reads_them(tmp_path: Path) -> None:
    first = EventFile(tmp_path, purge_step=1)
    for step in range(1, 6):
        first.scalars({"train/loss": float(step), "test/accuracy": 0.5}, step)
    first.close()
    assert scalars(tmp_path) == {
        "train/loss": [(step, float(step)) for step in range(1, 6)],
        "test/accuracy": [(step, 0.5) for step in range(1, 6)],
    }
    again = EventFile(tmp_path, purge_step=3)  # a restart from the checkpoint at step 2
    assert again.path != first.path
    for step in (3, 4):
        again.scalars({"train/loss": 10.0 * step}, step)
    again.close()
    assert scalars(tmp_path) == {
        "train/loss": [(1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0)],
        "test/accuracy": [(1, 0.5), (2, 0.5)],
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first.path.name, again.path.name])
    assert all(p.name.startswith("events.out.tfevents.") for p in tmp_path.iterdir())
