"""lineage.json: the same settings and data give the same record but for its ``run`` section, a resumed
run's record is the uninterrupted run's, a restart of a finished run leaves it and its sums alone, and
``sha256sum -c`` checks it with the model."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from trainer import lineage
from trainer.checkpoint import checkpoint_path
from trainer.cli import parse_config
from trainer.mirrors import CANONICAL_SHA256
from trainer.mnist_files import data_files

IMAGE = "registry.example.com/team/ddp-mnist/trainer:0.2.0@sha256:" + "ab" * 32
POD_ENV = {
    lineage.IMAGE_ENV: IMAGE,
    lineage.STACK_ENV: "dev",
    lineage.JOB_ENV: "mnist-r1",
    lineage.SOURCE_COMMIT_ENV: "0123456789abcdef0123456789abcdef01234567",
    lineage.BUILD_TIME_ENV: "2026-11-27T06:00:00Z",
}


def _read(directory: Path) -> dict[str, Any]:
    return dict(json.loads((directory / "lineage.json").read_text()))


def _without_run(record: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in record.items() if key != lineage.VOLATILE}


def _stat(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


@pytest.fixture
def verified_root(mnist_root: Path, tmp_path: Path) -> Path:
    """The raw MNIST files beside a SHA256SUMS of MNIST's canonical sums (links, no copies)."""
    root = tmp_path / "data"
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for path in (mnist_root / "MNIST" / "raw").iterdir():
        (raw / path.name).symlink_to(path)
    (raw / "SHA256SUMS").write_text("".join(f"{s}  {n}\n" for n, s in sorted(CANONICAL_SHA256.items())))
    return root


@pytest.mark.slow  # four trainer processes
def test_same_settings_give_the_same_lineage_and_a_resume_gives_the_uninterrupted_one(
    procs: Any, verified_root: Path, tmp_path: Path
) -> None:
    def train(ckpt: Path) -> subprocess.CompletedProcess[str]:
        args = [f"--data={verified_root}", f"--checkpoint-dir={ckpt}", "--epochs=2", "--train-limit=1024"]
        return procs.run(
            "trainer", [*args, "--batch-size=64", "--tensorboard-dir=none"], env=procs.env(**POD_ENV)
        )

    first, second = tmp_path / "first", tmp_path / "second"
    assert train(first).returncode == 0
    assert train(second).returncode == 0
    one, two = _read(first), _read(second)
    assert _without_run(one) == _without_run(two)
    assert one["run"]["resumed_from_epoch"] == two["run"]["resumed_from_epoch"] == 0

    model = hashlib.sha256((first / "model.pt").read_bytes()).hexdigest()
    assert one["model"] == {"file": "model.pt", "sha256": model}
    assert one["data"] == {
        "source": str(verified_root),
        "files": {name: {"file": name, "sha256": digest} for name, digest in CANONICAL_SHA256.items()},
        "verified_by": "SHA256SUMS",
    }
    assert one["image"] == {
        "reference": IMAGE,
        "digest": "sha256:" + "ab" * 32,
        "source_commit": POD_ENV[lineage.SOURCE_COMMIT_ENV],
        "build_time": POD_ENV[lineage.BUILD_TIME_ENV],
    }
    assert one["stack"] == "dev" and one["run"]["job"] == "mnist-r1"
    assert one["settings"] == {
        "epochs": 2,
        "batch_size": 64,
        "scaling": "strong",
        "lr": 0.01,
        "lr_scaling": "none",
        "weight_decay": 0.0005,
        "label_smoothing": 0.1,
        "seed": 0,
        "train_limit": 1024,
        "world_size": 1,
        "backend": "gloo",
    }
    canonical = json.dumps(one["settings"], sort_keys=True, separators=(",", ":"))
    assert one["settings_sha256"] == hashlib.sha256(canonical.encode()).hexdigest()
    metrics = json.loads((first / "metrics.json").read_text())
    assert one["metrics"] == {
        "final_test_accuracy": metrics["final_test_accuracy"],
        "final_test_loss": metrics["final_test_loss"],
        "final_train_loss": metrics["final_train_loss"],
        "epochs_trained": 2,
    }
    assert one["runtime"]["world_size"] == 1 and one["runtime"]["backend"] == "gloo"
    assert one["run"]["started"] <= one["run"]["finished"]
    checked = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=first, capture_output=True, text=True)
    assert checked.stdout.splitlines() == ["lineage.json: OK", "model.pt: OK"], checked.stderr

    # A crash after epoch 1's checkpoint: the restart resumes there and ends with the same record.
    checkpoint_path(second, 2).unlink()
    for name in ("model.pt", "lineage.json", "metrics.json", "SHA256SUMS"):
        (second / name).unlink()
    resumed = train(second)
    assert "trainer: resumed from" in resumed.stdout, resumed.stdout
    after = _read(second)
    assert _without_run(after) == _without_run(one)
    assert after["run"]["resumed_from_epoch"] == 1

    # A restart of the finished run keeps lineage.json and SHA256SUMS, bytes and mtime.
    kept = {name: _stat(second / name) for name in ("lineage.json", "SHA256SUMS", "model.pt")}
    again = train(second)
    assert "recorded this restart" in again.stdout, again.stdout
    assert {name: _stat(second / name) for name in kept} == kept


@pytest.mark.parametrize(
    ("reference", "digest"),
    [
        (IMAGE, "sha256:" + "ab" * 32),
        ("ghcr.io/ddp-mnist/trainer:0.1.0", None),
        ("ghcr.io/ddp-mnist/trainer@sha256:" + "0" * 63, None),
        ("", None),
    ],
)
def test_the_image_digest_is_read_from_a_pinned_reference_only(reference: str, digest: str | None) -> None:
    found = lineage.image({lineage.IMAGE_ENV: reference, lineage.SOURCE_COMMIT_ENV: "unknown"})
    assert found == {
        "reference": reference or None,
        "digest": digest,
        "source_commit": None,
        "build_time": None,
    }


def test_the_settings_sum_is_over_canonical_json_and_ignores_flags_that_do_not_shape_the_model() -> None:
    base = ["--data=/d", "--checkpoint-dir=/c"]
    plain = lineage.settings(parse_config(base), 2, "gloo")
    noisy = lineage.settings(parse_config([*base, "--log-every=5", "--dist-timeout=30"]), 2, "gloo")
    assert plain == noisy
    assert lineage.canonical_sha256(plain) == lineage.canonical_sha256(dict(reversed(plain.items())))
    other = lineage.settings(parse_config([*base, "--seed=1"]), 2, "gloo")
    assert lineage.canonical_sha256(other) != lineage.canonical_sha256(plain)


def test_files_not_listed_in_a_sums_file_are_not_called_verified(tmp_path: Path, mnist_gz_dir: Path) -> None:
    for path in mnist_gz_dir.glob("*.gz"):
        shutil.copy(path, tmp_path / path.name)
    found = data_files(tmp_path)
    assert found["verified_by"] is None
    assert found["files"]["t10k-labels-idx1-ubyte"]["file"] == "t10k-labels-idx1-ubyte.gz"
    digest = hashlib.sha256((tmp_path / "t10k-labels-idx1-ubyte.gz").read_bytes()).hexdigest()
    assert found["files"]["t10k-labels-idx1-ubyte"]["sha256"] == digest
