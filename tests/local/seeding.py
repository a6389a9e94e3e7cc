"""A local data volume filled as the seed Job fills it: `python -m trainer.seed` from ../shared's MNIST."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED_MNIST = ROOT.parent / "shared" / "data" / "mnist"
DATA_DIR = "pvc/ddp-mnist-data/mnist"
# The training images a two-node local run needs to prove that its pods train together: 100 steps of
# the global batch, 98.23% with seed 0 on two ranks (docs/BENCHMARKS.md), well above the tests' 97%.
REAL_ACCURACY_IMAGES = 12800


def seed_data_volume(root: Path) -> None:
    """Fill `<root>/pvc/ddp-mnist-data/mnist` (the data claim of a stack run under `root`)."""
    seeded = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer.seed",
            f"--from={SHARED_MNIST}",
            f"--to={root}/pvc/ddp-mnist-data/mnist",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert seeded.returncode == 0, seeded.stderr
