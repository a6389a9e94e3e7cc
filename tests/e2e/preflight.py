"""What the cluster tier needs before it starts, each missing piece one line.

The tier never reports itself passed or skipped without a cluster: `conftest.pytest_configure` stops
pytest before it collects anything, with the line this module returns (`ERROR: e2e: ...`, pytest's
usage-error exit code 4).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping

EXIT_NOT_READY = 4  # pytest.ExitCode.USAGE_ERROR
PULUMI_INSTALL = (
    "install the Pulumi CLI 3.272.0: curl -fsSL https://get.pulumi.com | sh -s -- --version 3.272.0"
)

Runner = Callable[[list[str]], subprocess.CompletedProcess[str]]


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)


def missing_prerequisite(env: Mapping[str, str] | None = None, run: Runner = _run) -> str | None:
    """The first thing the tier lacks, as one line, or None when it can start."""
    env = os.environ if env is None else env
    path = env.get("PATH", "")
    if shutil.which("pulumi", path=path) is None:
        return f"e2e: no Pulumi CLI on PATH ({PULUMI_INSTALL})"
    if shutil.which("kubectl", path=path) is None:
        return "e2e: no kubectl on PATH (install kubectl; the tier reads live objects with it)"
    builder = env.get("E2E_IMAGE_BUILDER", "docker")
    if shutil.which(builder, path=path) is None:
        return f"e2e: no {builder} on PATH (it builds the trainer image; set E2E_IMAGE_BUILDER to another)"
    ready = run(["kubectl", "get", "--raw", "/readyz"])
    if ready.returncode != 0:
        context = run(["kubectl", "config", "current-context"]).stdout.strip() or "none"
        reason = (ready.stderr.strip().splitlines() or ["no answer"])[-1]
        return f"e2e: no reachable cluster (kubeconfig context {context}: {reason})"
    if not env.get("E2E_IMAGE_REGISTRY") and shutil.which("kind", path=path) is None:
        return "e2e: no kind on PATH to load the trainer image, and no E2E_IMAGE_REGISTRY to push it to"
    return None
