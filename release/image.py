"""The trainer image from the root Dockerfile, built on this machine: `make image` and `make image-push`.

    python release/image.py build IMAGE            docker buildx build --load: IMAGE in the local docker
    python release/image.py push REGISTRY IMAGE    docker buildx build --push as REGISTRY/IMAGE, with SBOM
                                                   and provenance attestations; prints the pushed
                                                   reference by digest, the value for `jobImage`

Both pass the build arguments SOURCE_COMMIT (`git rev-parse HEAD`, with `-dirty` when the work tree has
changes; `unknown` without git) and BUILD_TIME (UTC, from SOURCE_DATE_EPOCH when it is set, as reproducible
builds do): the Dockerfile makes them the OCI labels `org.opencontainers.image.revision`/`created` and the
env the trainer copies into each run's lineage.json.

The digest comes from Buildx's `--metadata-file` (`containerimage.digest`), the digest of what the
registry now holds, so the printed reference names exactly the pushed content. Standard library only:
it runs with any python3, no virtual environment. The CI release (`.github/workflows/release.yml`) builds
the same Dockerfile for the same platform. docs/RELEASE.md has the whole story.

Exit codes: 0 built (and pushed); 1 the build or push failed (docker's own output above says why) or
Buildx wrote no digest; 2 a usage error (no REGISTRY); 4 docker or its buildx plugin is not installed; 5 a
`build` on a machine that is not amd64, whose local cluster's nodes could not run the image.

The image is linux/amd64 only: its base is published for amd64, and so are the GPU pools it is for.
`build` loads it into the local docker for a local cluster (kind, minikube), whose nodes have this
machine's architecture, so on another architecture it stops before building; `push` builds for
amd64 on any machine (under emulation where docker has it), for a registry that amd64 nodes pull from.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The base image (pytorch/pytorch's CUDA runtime) and the GPU pools are amd64.
PLATFORM = "linux/amd64"
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
EXIT_FAILED, EXIT_USAGE, EXIT_NO_DOCKER, EXIT_ARCHITECTURE = 1, 2, 4, 5
AMD64_MACHINES = frozenset({"x86_64", "amd64"})
USAGE = "usage: image.py build IMAGE | image.py push REGISTRY IMAGE"


class ImageError(Exception):
    """A failure for people: one line, with the exit code of its class."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def pushed_reference(reference: str, metadata: Mapping[str, Any]) -> str:
    """`reference@sha256:...`: the pushed tag with the digest Buildx recorded in its metadata file."""
    digest = metadata.get("containerimage.digest")
    if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
        raise ImageError(
            f"image: Buildx's metadata has no image digest (containerimage.digest: {digest!r}); "
            "was the image pushed?",
            EXIT_FAILED,
        )
    return f"{reference}@{digest}"


def source_commit() -> str:
    """The commit the image is built from (`-dirty` with uncommitted changes); `unknown` without git."""
    if shutil.which("git") is None:
        return "unknown"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False)
    if head.returncode != 0:
        return "unknown"
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return head.stdout.strip() + ("-dirty" if status.stdout.strip() else "")


def build_time(environ: Mapping[str, str]) -> str:
    """RFC 3339 UTC: SOURCE_DATE_EPOCH's time when set (reproducible-builds.org), else now."""
    epoch = environ.get("SOURCE_DATE_EPOCH", "")
    when = datetime.fromtimestamp(int(epoch), UTC) if epoch.isdigit() else datetime.now(UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def build_args() -> list[str]:
    """`--build-arg` for the Dockerfile's SOURCE_COMMIT and BUILD_TIME."""
    return [
        "--build-arg",
        f"SOURCE_COMMIT={source_commit()}",
        "--build-arg",
        f"BUILD_TIME={build_time(os.environ)}",
    ]


def build_command(image: str, *, push: bool, metadata: Path | None = None) -> list[str]:
    """The `docker buildx build` command line: loaded into the local docker, or pushed with attestations."""
    command = ["docker", "buildx", "build", "--platform", PLATFORM, "--file", "Dockerfile", "--tag", image]
    command += build_args()
    if push:
        command += ["--push", "--sbom=true", "--provenance=mode=max"]
    else:
        command += ["--load"]
    if metadata is not None:
        command += ["--metadata-file", str(metadata)]
    return [*command, "."]


def require_buildx() -> None:
    """Docker with its buildx plugin on PATH, else an ImageError (exit 4) that says how to get them."""
    if shutil.which("docker") is None:
        raise ImageError(
            "image: docker not found on PATH; install Docker with the buildx plugin "
            "(https://docs.docker.com/engine/install/) or let a release tag build it (docs/RELEASE.md)",
            EXIT_NO_DOCKER,
        )
    found = subprocess.run(["docker", "buildx", "version"], capture_output=True, text=True, check=False)
    if found.returncode != 0:
        raise ImageError(
            "image: docker has no buildx plugin; install docker-buildx "
            "(https://docs.docker.com/build/concepts/overview/#install-buildx)",
            EXIT_NO_DOCKER,
        )


def _docker(command: list[str]) -> None:
    if subprocess.run(command, cwd=ROOT, check=False).returncode != 0:
        raise ImageError(f"image: `{' '.join(command)}` failed (see docker's output above)", EXIT_FAILED)


def require_amd64(machine: str) -> None:
    """A local build's machine is amd64 (`platform.machine()`), else an ImageError (exit 5)."""
    if machine.lower() not in AMD64_MACHINES:
        raise ImageError(
            f"image: the trainer image is {PLATFORM} only and this machine is {machine}, so a local "
            "cluster's nodes here could not run it; build on an amd64 machine, or push one for amd64 "
            "nodes with `make image-push REGISTRY=...`",
            EXIT_ARCHITECTURE,
        )


def build(image: str) -> None:
    require_amd64(platform.machine())
    require_buildx()
    _docker(build_command(image, push=False))
    print(f"built {image} (linux/amd64) into the local docker")


def push(registry: str, image: str) -> str:
    """Build and push REGISTRY/IMAGE; the pushed reference by digest."""
    if not registry.strip("/"):
        raise ImageError(
            "image: no registry to push to; run `make image-push REGISTRY=registry.example.com/team`",
            EXIT_USAGE,
        )
    require_buildx()
    reference = f"{registry.rstrip('/')}/{image}"
    with tempfile.TemporaryDirectory(prefix="ddp-mnist-image-") as directory:
        path = Path(directory) / "metadata.json"
        _docker(build_command(reference, push=True, metadata=path))
        metadata = json.loads(path.read_text()) if path.is_file() else {}
    return pushed_reference(reference, metadata)


def main(argv: list[str]) -> int:
    try:
        match argv:
            case ["build", image]:
                build(image)
            case ["push", registry, image]:
                reference = push(registry, image)
                print(f"pushed; set it with: pulumi config set jobImage {reference}", file=sys.stderr)
                print(reference)
            case _:
                raise ImageError(USAGE, EXIT_USAGE)
    except ImageError as error:
        print(error, file=sys.stderr)
        return error.code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
