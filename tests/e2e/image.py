"""The trainer image under test: built from the repository's Dockerfile, then pushed to the registry
named by `E2E_IMAGE_REGISTRY` (the stacks run it by digest) or loaded into the kind cluster (by a tag
made of the image's own ID, since a loaded image has no registry digest)."""

from __future__ import annotations

import os
import re
import subprocess

from infra.stackconfig import ROOT

REPOSITORY = "ddp-mnist/trainer"


def _run(argv: list[str]) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, cwd=ROOT, timeout=3600).stdout


def image_reference(registry: str, pushed_output: str, tag: str) -> str:
    """`<registry>/ddp-mnist/trainer:<tag>@sha256:<digest>` from `docker push`'s output."""
    match = re.search(r"digest: (sha256:[0-9a-f]{64})", pushed_output)
    if match is None:
        raise RuntimeError(f"e2e: `docker push` printed no digest for {registry}/{REPOSITORY}:{tag}")
    return f"{registry}/{REPOSITORY}:{tag}@{match[1]}"


def build_and_publish() -> str:
    """The image reference the stacks run (the `jobImage` the tier sets)."""
    builder = os.environ.get("E2E_IMAGE_BUILDER", "docker")
    _run([builder, "build", "-t", f"{REPOSITORY}:e2e", "."])
    image_id = _run([builder, "image", "inspect", "--format", "{{.Id}}", f"{REPOSITORY}:e2e"]).strip()
    tag = "e2e-" + image_id.removeprefix("sha256:")[:12]
    registry = os.environ.get("E2E_IMAGE_REGISTRY", "").rstrip("/")
    if registry:
        _run([builder, "tag", f"{REPOSITORY}:e2e", f"{registry}/{REPOSITORY}:{tag}"])
        return image_reference(registry, _run([builder, "push", f"{registry}/{REPOSITORY}:{tag}"]), tag)
    local = f"{REPOSITORY}:{tag}"
    _run([builder, "tag", f"{REPOSITORY}:e2e", local])
    cluster = os.environ.get("E2E_KIND_CLUSTER", "kind")
    _run(["kind", "load", "docker-image", "--name", cluster, local])
    return local
