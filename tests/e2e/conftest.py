"""The cluster tier's session: refuse at once without its prerequisites, then share the fixtures.

Session order: the trainer image, the cluster fixtures (NFS, MinIO with MNIST, Kueue), the platform
stack (the training operator). Every stack the tier creates is destroyed at the end, and the namespaces
a destroy keeps on purpose are deleted (`E2E_KEEP=1` leaves everything for a look).
"""

from __future__ import annotations

import functools
import os
import secrets
from collections.abc import Iterator

import pytest
from pulumi import automation as auto

from tests.e2e import image as trainer_image
from tests.e2e import live, project
from tests.e2e.fixtures.cluster import Fixtures, program
from tests.e2e.preflight import missing_prerequisite
from tests.e2e.project import Backend, inline_stack, program_stack
from tests.e2e.stacks import platform_config

KEEP = os.environ.get("E2E_KEEP") == "1"


def pytest_configure(config: pytest.Config) -> None:
    """Stop at once, with one line, when the tier cannot run (exit 4, before any collection)."""
    problem = missing_prerequisite()
    if problem is not None:
        raise pytest.UsageError(problem)


def destroy(stack: auto.Stack, *namespaces: str) -> None:
    """Destroy the stack and delete what its destroy keeps (the retained claim's namespace)."""
    if KEEP:
        return
    project.destroy(stack)
    stack.workspace.remove_stack(stack.name)
    for namespace in namespaces:
        live.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=true", timeout=600)


@pytest.fixture(scope="session")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Backend:
    return Backend.create(tmp_path_factory.mktemp("pulumi"))


@pytest.fixture(scope="session")
def image() -> str:
    return trainer_image.build_and_publish()


@pytest.fixture(scope="session")
def s3_keys() -> tuple[str, str]:
    """MinIO's root keys for this run, which the job stacks get as secret config."""
    return "e2e" + secrets.token_hex(6), secrets.token_urlsafe(24)


@pytest.fixture(scope="session")
def cluster_fixtures(backend: Backend, image: str, s3_keys: tuple[str, str]) -> Iterator[dict]:
    fixtures = Fixtures(image, *s3_keys)
    stack = inline_stack(backend, "ddp-mnist-e2e-fixtures", "fixtures", functools.partial(program, fixtures))
    yield project.up(stack)
    destroy(stack)


@pytest.fixture(scope="session")
def platform(backend: Backend, image: str, cluster_fixtures: dict) -> Iterator[dict]:
    """The platform stack: the training operator v1.9.4 with its restricted init container."""
    stack = program_stack(backend, "e2e-platform", platform_config(image))
    outputs = project.up(stack)
    # The platform's smoke check (a PyTorchJob under the operator) reports through its stack output.
    assert outputs["operatorSmokeCheck"] == "Succeeded", outputs
    yield outputs
    destroy(stack)
