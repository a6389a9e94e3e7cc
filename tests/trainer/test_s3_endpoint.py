"""A malformed S3 endpoint is a usage error: one line, exit 2, before any request."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a real trainer process

ROOT = Path(__file__).resolve().parents[2]


def test_malformed_endpoint_is_one_line_exit_2(tmp_path):
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": "minio:9000",
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "OMP_NUM_THREADS": "1",
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer",
            "--data=s3://mnist/mnist",
            f"--cache-dir={tmp_path / 'cache'}",
            f"--checkpoint-dir={tmp_path / 'ckpt'}",
            "--epochs=1",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "AWS_ENDPOINT_URL='minio:9000' is not a valid endpoint URL" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
