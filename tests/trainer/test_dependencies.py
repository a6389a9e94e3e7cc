"""The trainer extra's pins: what the venv (and the image) import matches pyproject, and torch is quiet."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest


def trainer_pins(repo_root: Path) -> dict[str, str]:
    project = tomllib.loads((repo_root / "pyproject.toml").read_text())["project"]
    requirements = project["optional-dependencies"]["trainer"]
    return dict(requirement.split("==", 1) for requirement in requirements)


def test_installed_versions_match_the_trainer_extra(procs: Any) -> None:
    pins = trainer_pins(procs.repo_root)
    assert set(pins) == {"torch", "boto3", "numpy", "tensorboard", "setuptools"}
    installed = {name: version(name).split("+")[0] for name in pins}
    assert installed == pins


@pytest.mark.slow
def test_torchrun_prints_no_numpy_warning(procs: Any) -> None:
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.is_file():
        pytest.skip(f"{torchrun} not found")
    result = subprocess.run(
        [str(torchrun), *procs.torchrun_args(1, procs.free_port()), "--help"],
        cwd=procs.repo_root,
        env=procs.env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("usage: python -m trainer ")
    assert "Failed to initialize NumPy" not in result.stderr
    assert "Warning" not in result.stderr, result.stderr
