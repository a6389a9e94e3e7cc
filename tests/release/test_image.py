"""`make image` and `make image-push`, run through make with a stub `docker` that records its arguments
(and writes the metadata file Buildx writes), or with no docker at all."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from release import image

ROOT = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "9f" * 32
# What `docker buildx build --push --metadata-file` writes (Buildx 0.2x, docker-container driver).
METADATA = {
    "buildx.build.provenance": {"buildType": "https://mobyproject.org/buildkit@v1"},
    "buildx.build.ref": "builder/builder0/k2x8lbn0y4w6rs2ct3xzrbhjo",
    "containerimage.config.digest": "sha256:" + "1a" * 32,
    "containerimage.descriptor": {
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "digest": DIGEST,
        "size": 856,
    },
    "containerimage.digest": DIGEST,
    "image.name": "registry.example.com/team/ddp-mnist/trainer:dev",
}
NO_DOCKER = (
    "image: docker not found on PATH; install Docker with the buildx plugin "
    "(https://docs.docker.com/engine/install/) or let a release tag build it (docs/RELEASE.md)"
)


def _bin(tmp_path: Path, docker: str | None) -> Path:
    """A PATH directory with make, sh and cp, and `docker` as the given shell script (or none)."""
    directory = tmp_path / "bin"
    directory.mkdir()
    for tool in ("make", "sh", "cp"):
        found = shutil.which(tool)
        assert found, tool
        (directory / tool).symlink_to(found)
    if docker is not None:
        stub = directory / "docker"
        stub.write_text("#!/bin/sh\n" + docker)
        stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    return directory


def _recording_docker(tmp_path: Path, metadata: dict | None = METADATA, build_exit: int = 0) -> str:
    """A docker that records each call's arguments and, for a build, writes `metadata` where asked."""
    (tmp_path / "metadata.json").write_text(json.dumps(metadata) if metadata is not None else "")
    return f"""echo "$@" >> {tmp_path}/calls
if [ "$2" = build ]; then
  while [ $# -gt 0 ]; do
    if [ "$1" = --metadata-file ] && [ -s {tmp_path}/metadata.json ]; then
      cp {tmp_path}/metadata.json "$2"
    fi
    shift
  done
  exit {build_exit}
fi
"""


# 2026-11-27T06:00:00Z: SOURCE_DATE_EPOCH fixes the build time, as reproducible builds do.
EPOCH = "1795759200"
BUILD_ARGS = "--build-arg SOURCE_COMMIT=unknown --build-arg BUILD_TIME=2026-11-27T06:00:00Z"


def _make(tmp_path: Path, docker: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": str(_bin(tmp_path, docker)), "HOME": str(tmp_path), "SOURCE_DATE_EPOCH": EPOCH}
    return subprocess.run(
        ["make", "--no-print-directory", f"PYTHON={sys.executable}", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _calls(tmp_path: Path) -> list[str]:
    return (tmp_path / "calls").read_text().splitlines()


def test_make_image_loads_a_linux_amd64_build_tagged_image(tmp_path):
    result = _make(tmp_path, _recording_docker(tmp_path), "image", "IMAGE=acme/trainer:0.2.0")
    assert result.returncode == 0, result.stderr
    assert _calls(tmp_path) == [
        "buildx version",
        "buildx build --platform linux/amd64 --file Dockerfile --tag acme/trainer:0.2.0 "
        f"{BUILD_ARGS} --load .",
    ]
    assert result.stdout.splitlines()[-1] == "built acme/trainer:0.2.0 (linux/amd64) into the local docker"


def test_make_image_push_prints_the_pushed_reference_by_digest(tmp_path):
    result = _make(tmp_path, _recording_docker(tmp_path), "image-push", "REGISTRY=registry.example.com/team/")
    assert result.returncode == 0, result.stderr
    reference = f"registry.example.com/team/ddp-mnist/trainer:dev@{DIGEST}"
    assert result.stdout.splitlines()[-1] == reference
    assert result.stderr == f"pushed; set it with: pulumi config set jobImage {reference}\n"
    version, push = _calls(tmp_path)
    assert version == "buildx version"
    assert re.fullmatch(
        "buildx build --platform linux/amd64 --file Dockerfile --tag registry.example.com/team/ddp-mnist/"
        f"trainer:dev {BUILD_ARGS} "
        r"--push --sbom=true --provenance=mode=max --metadata-file \S+/metadata.json \.",
        push,
    )


@pytest.mark.parametrize("target", ["image", "image-push"])
def test_without_docker_make_stops_with_one_line_and_exit_4(tmp_path, target):
    result = _make(tmp_path, None, target, "REGISTRY=registry.example.com/team")
    assert result.returncode == 2  # make's own status when a recipe fails
    (line, make_says) = result.stderr.splitlines()
    assert line == NO_DOCKER
    assert make_says.endswith(f"{target}] Error 4")


def test_the_script_itself_exits_4_without_docker(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert image.main(["build", "acme/trainer:1"]) == 4
    assert capsys.readouterr().err == NO_DOCKER + "\n"


def test_docker_without_buildx_is_a_missing_prerequisite_too(tmp_path):
    result = _make(tmp_path, 'echo "docker: unknown command: docker buildx" >&2; exit 1\n', "image")
    assert result.stderr.splitlines()[0] == (
        "image: docker has no buildx plugin; install docker-buildx "
        "(https://docs.docker.com/build/concepts/overview/#install-buildx)"
    )
    assert "Error 4" in result.stderr


def test_image_push_without_a_registry_is_a_usage_error(tmp_path):
    result = _make(tmp_path, _recording_docker(tmp_path), "image-push")
    assert result.stderr.splitlines()[0] == (
        "image: no registry to push to; run `make image-push REGISTRY=registry.example.com/team`"
    )
    assert "Error 2" in result.stderr
    assert not (tmp_path / "calls").exists()  # nothing built


def test_a_failed_push_prints_no_reference(tmp_path):
    result = _make(tmp_path, _recording_docker(tmp_path, build_exit=1), "image-push", "REGISTRY=r.example")
    assert "@sha256:" not in result.stdout
    assert result.stderr.splitlines()[0].startswith("image: `docker buildx build --platform linux/amd64")
    assert "Error 1" in result.stderr


def test_a_push_whose_metadata_has_no_digest_fails(tmp_path):
    result = _make(tmp_path, _recording_docker(tmp_path, metadata=None), "image-push", "REGISTRY=r.example")
    assert result.stderr.splitlines()[0] == (
        "image: Buildx's metadata has no image digest (containerimage.digest: None); was the image pushed?"
    )
    assert "Error 1" in result.stderr


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        (METADATA, f"r.example/ddp-mnist/trainer:1@{DIGEST}"),
        ({"containerimage.digest": DIGEST}, f"r.example/ddp-mnist/trainer:1@{DIGEST}"),
    ],
)
def test_the_reference_is_the_pushed_tag_with_buildx_s_digest(metadata, expected):
    assert image.pushed_reference("r.example/ddp-mnist/trainer:1", metadata) == expected


@pytest.mark.parametrize(
    "digest", [None, "", "sha256:abc", "sha512:" + "a" * 128, DIGEST.upper(), DIGEST + "\n", 42]
)
def test_anything_but_a_sha256_digest_is_refused(digest):
    with pytest.raises(image.ImageError) as error:
        image.pushed_reference("r/t:1", {"containerimage.digest": digest})
    assert error.value.code == 1
    assert str(error.value) == (
        f"image: Buildx's metadata has no image digest (containerimage.digest: {digest!r}); "
        "was the image pushed?"
    )


def test_usage(capsys):
    assert image.main(["deploy"]) == 2
    assert capsys.readouterr().err == "usage: image.py build IMAGE | image.py push REGISTRY IMAGE\n"


@pytest.mark.parametrize(
    ("target", "command"),
    [
        ("image", "py release/image.py build ddp-mnist/trainer:dev"),
        ("image-push", 'py release/image.py push "r.example" ddp-mnist/trainer:dev'),
    ],
)
def test_the_make_targets_run_the_script_with_the_default_image(target, command):
    dry = subprocess.run(
        ["make", "-n", "--no-print-directory", target, "REGISTRY=r.example", "PYTHON=py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": os.environ["PATH"]},
    )
    assert dry.stdout == command + "\n"


def test_the_build_arguments_name_the_commit_and_the_build_time(monkeypatch) -> None:
    """With git on PATH: the checkout's HEAD (`-dirty` while tracked files have changes)."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    assert image.build_args() == [
        "--build-arg",
        f"SOURCE_COMMIT={head.stdout.strip()}{'-dirty' if dirty else ''}",
        "--build-arg",
        "BUILD_TIME=2026-11-27T06:00:00Z",
    ]
    monkeypatch.delenv("SOURCE_DATE_EPOCH")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", image.build_time({}))


@pytest.mark.parametrize("machine", ["aarch64", "arm64", "ppc64le"])
def test_a_local_build_on_a_machine_that_is_not_amd64_stops_with_one_line_and_exit_5(
    machine, monkeypatch, capsys
):
    monkeypatch.setattr(image.platform, "machine", lambda: machine)
    ran: list[list[str]] = []
    monkeypatch.setattr(image.subprocess, "run", lambda *a, **k: ran.append(a[0]))
    assert image.main(["build", "ddp-mnist/trainer:dev"]) == 5
    assert capsys.readouterr().err == (
        f"image: the trainer image is linux/amd64 only and this machine is {machine}, so a local cluster's "
        "nodes here could not run it; build on an amd64 machine, or push one for amd64 nodes with "
        "`make image-push REGISTRY=...`\n"
    )
    assert ran == []  # stopped before docker was asked anything


@pytest.mark.parametrize("machine", ["x86_64", "AMD64"])
def test_an_amd64_machine_goes_on_to_docker(machine, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(image.platform, "machine", lambda: machine)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert image.main(["build", "ddp-mnist/trainer:dev"]) == 4  # past the check: no docker here
    assert capsys.readouterr().err == NO_DOCKER + "\n"
