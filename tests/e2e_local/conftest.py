"""The local cluster tier's session: the real parts built (or found built), a cluster started on
127.0.0.1, the real Pulumi CLI with the Kubernetes provider plugin at the SDK's version, a file backend.

Without Go, kubectl, openssl or unshare the tier stops before it collects anything, with one line
(pytest's usage error, exit 4); a part that fails to build stops it the same way. Nothing is skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from infra.localcluster import build, cluster
from infra.localcluster.rehearse import engine_environment
from tests.e2e import live
from tests.e2e.project import Backend
from tests.e2e_local import scenario

KEEP = scenario.KEEP
# What `engine_environment` sets in this process, restored when the session ends.
ENGINE_KEYS = (
    "KUBECONFIG",
    "PATH",
    "PULUMI_HOME",
    "PULUMI_SKIP_UPDATE_CHECK",
    "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION",
    "PULUMI_SKIP_CHECKPOINTS",
)


# What the cluster needs on PATH, and why (the real node tier needs them too).
TOOLS = (
    ("go", "it builds the real parts"),
    ("kubectl", "the tier reads live objects with it"),
    ("openssl", "it makes the cluster's certificates"),
    ("unshare", "each operator runs in a mount namespace of its own (util-linux)"),
)


@contextmanager
def engine_env(state: cluster.State, home: Path) -> Iterator[None]:
    """The real engine's environment against the cluster of `state` in this process, restored after."""
    saved = {key: os.environ.get(key) for key in ENGINE_KEYS}
    os.environ.update(engine_environment(state, home))
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def pytest_configure(config: pytest.Config) -> None:
    """Stop at once, with one line, when the tier cannot run (exit 4, before any collection)."""
    if not config.option.markexpr or "e2e_local" not in config.option.markexpr:
        return
    for tool, why in TOOLS:
        if shutil.which(tool) is None:
            raise pytest.UsageError(f"e2e-local: no {tool} on PATH ({why})")
    try:
        build.build(build.tier_parts("cluster"))
    except build.BuildError as error:
        raise pytest.UsageError(f"e2e-local: {error}") from None


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cluster.State]:
    state = cluster.State(tmp_path_factory.mktemp("cluster"))
    cluster.up(state)
    try:
        with engine_env(state, tmp_path_factory.mktemp("pulumi-home")):
            yield state
    finally:
        scenario.keep_logs(state, "e2e-local")
        if not KEEP:
            cluster.down(state)


@pytest.fixture(scope="session")
def backend(local_cluster: cluster.State, tmp_path_factory: pytest.TempPathFactory) -> Backend:
    return Backend.create(tmp_path_factory.mktemp("pulumi"))


@pytest.fixture(scope="session")
def prerequisites(backend: Backend) -> Iterator[dict]:
    """The prerequisites stack (dev-prereqs), first on the empty cluster: the NFS server, csi-driver-nfs
    from its pinned chart, MinIO and the Job that fills its bucket."""
    stack = scenario.stack(backend, "local-prereqs", scenario.prerequisites_config())
    result = stack.up(on_output=print, show_secrets=False)
    yield {"stack": stack, "outputs": scenario.outputs(result), "result": result}
    if not KEEP:
        stack.destroy(on_output=print)


@pytest.fixture(scope="session")
def platform(backend: Backend, prerequisites: dict) -> Iterator[dict]:
    """The platform stack, after the prerequisites: the training operator from its pinned module."""
    stack = scenario.stack(backend, "local-platform", scenario.platform_config())
    result = stack.up(on_output=print, show_secrets=False)
    outputs = {key: value.value for key, value in result.outputs.items()}
    yield {"stack": stack, "outputs": outputs, "result": result}
    if not KEEP:
        stack.destroy(on_output=print)


# Kueue's webhooks judge every Job and pod the cluster admits once it is installed: its scenario last.
LAST = "test_queue.py"
# Scenario 17 installs the training operator as Kubeflow does, and removes it, before the session's
# platform stack installs it: its module first.
FIRST = "test_existing_kubeflow.py"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: (item.path.name != FIRST, item.path.name == LAST))


def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> None:
    """On a failure, the namespace's events and the cluster's warnings go into the report."""
    in_tier = "local_cluster" in getattr(item, "fixturenames", ())
    if call.when == "call" and call.excinfo is not None and in_tier:
        try:
            events = live.kubectl("get", "events", "-A", "--field-selector", "type=Warning")
        except (RuntimeError, subprocess.TimeoutExpired):
            return
        item.add_report_section("call", "warning events", events[-6000:])
