"""The environment a rendered pod's container sees on a cluster, and Kubernetes' `$(VAR)` expansion.

Used to check the torchrun arguments each node gets, and by anything that runs rendered pods
outside a cluster. The PyTorchJob part mirrors the Kubeflow training operator v1.9
(`pkg/controller.v1/pytorch/envvar.go`): it injects these into every container of every replica.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

COMPLETION_INDEX_FIELD = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' expansion of command/args: `$(VAR)` from env if defined, `$$` escapes a `$`."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return _REFERENCE.sub(replace, text)


def operator_env(job: Mapping[str, Any], replica_type: str, index: int) -> dict[str, str]:
    """What the training operator injects into a PyTorchJob replica's containers."""
    spec = job["spec"]
    replicas = spec["pytorchReplicaSpecs"]
    nodes = sum(int(r["replicas"]) for r in replicas.values())
    nproc = spec.get("nprocPerNode")
    nproc_int = int(nproc) if nproc is not None and str(nproc).isdigit() else 1
    master = replicas["Master"]["template"]["spec"]["containers"][0]
    port = next(p["containerPort"] for p in master.get("ports", []) if p["name"] == "pytorchjob-port")
    rank = 0 if replica_type == "Master" else index + 1
    env = {
        "PYTHONUNBUFFERED": "1",
        "MASTER_ADDR": f"{job['metadata']['name']}-master-0",
        "MASTER_PORT": str(port),
        "WORLD_SIZE": str(nodes * nproc_int),
        "RANK": str(rank),
        "PET_NNODES": str(nodes),
        "PET_NODE_RANK": str(rank),
    }
    env["PET_MASTER_ADDR"], env["PET_MASTER_PORT"] = env["MASTER_ADDR"], env["MASTER_PORT"]
    if nproc is not None:
        env["PET_NPROC_PER_NODE"] = str(nproc)
    return env


def container_env(
    container: Mapping[str, Any],
    *,
    completion_index: int | None = None,
    secret_value: Callable[[str, str], str] | None = None,
) -> dict[str, str]:
    """The container's own env entries: values, the completion-index field and Secret references."""
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = expand(var["value"], env)
            continue
        source = var.get("valueFrom", {})
        field = source.get("fieldRef", {}).get("fieldPath")
        if field == COMPLETION_INDEX_FIELD and completion_index is not None:
            env[var["name"]] = str(completion_index)
        elif "secretKeyRef" in source and secret_value is not None:
            ref = source["secretKeyRef"]
            env[var["name"]] = secret_value(ref["name"], ref["key"])
    return env


def node_argv(pod_spec: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """The container's command + args after Kubernetes expanded them with `env`."""
    container = pod_spec["containers"][0]
    return [expand(a, env) for a in [*container.get("command", []), *container.get("args", [])]]
