"""What the pack does not read: every pod spec and container-like mapping an object carries outside the
pod templates and TrainJob fields `workloads.py` reads (the deny-by-default rule refuses them)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from workloads import CONTAINER_LISTS, Obj, is_trainjob, pod_templates, trainjob_containers

POD_SPEC_LISTS = ("containers", "initContainers", "volumes")


# Fields only a pod spec has: a mapping with one of them is a pod spec even without its lists (an unknown
# kind's spec.hostNetwork beside an image; a patch that sets only who the pod runs as, or where). Not
# automountServiceAccountToken, which a ServiceAccount has at its top level.
# Each with its value's type in a pod spec: a CRD's schema names the same fields with mappings as values.
POD_SPEC_FIELDS: dict[str, type] = {
    "hostNetwork": bool,
    "hostPID": bool,
    "hostIPC": bool,
    "hostUsers": bool,
    "shareProcessNamespace": bool,
    "serviceAccountName": str,
    "serviceAccount": str,
    "nodeName": str,
    "runtimeClassName": str,
}


NOT_SPEC = ("metadata", "status", "data", "stringData", "binaryData")  # top-level fields


# Besides an image, a container has at least one of these (Flux's ImageRepository, which names an image
# to scan, has none of them).
CONTAINER_FIELDS = frozenset(
    {"name", "command", "args", "env", "envFrom", "resources", "volumeMounts", "securityContext", "script"}
)


def carried(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(path, "pod spec" or "container") for every pod spec and container-like mapping in `value`,
    outside its metadata, status and a ConfigMap's or Secret's data. Inside a pod spec only the containers
    are skipped: a pod spec can hold another (KServe's predictor its workerSpec)."""
    if isinstance(value, Mapping):
        container = isinstance(value.get("image"), str) and bool(CONTAINER_FIELDS & set(value))
        pod_spec = any(isinstance(value.get(key), list) for key in POD_SPEC_LISTS) or (
            not container and any(isinstance(value.get(k), t) for k, t in POD_SPEC_FIELDS.items())
        )
        if pod_spec:
            yield path, "pod spec"
        elif container:
            yield path, "container"
            return
        for key, child in value.items():
            if (not path and key in NOT_SPEC) or (pod_spec and key in CONTAINER_LISTS):
                continue
            yield from carried(child, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from carried(child, f"{path}[{i}]")


def read_paths(obj: Obj) -> set[str]:
    """The paths of the pod specs and containers the pack reads in `obj`."""
    paths = {t.path for t in pod_templates(obj)}
    return paths | {c.label for c in trainjob_containers(obj)}


def runtime_patch_pod_specs(obj: Obj) -> Iterator[str]:
    """The path of every pod spec a TrainJob's runtimePatches set, whatever it holds: a patch of only
    pod-level fields (runAsUser 0, a service account, tolerations) changes what the runtime's pods run
    as, and the pack reads no patch."""
    if not is_trainjob(obj):
        return
    for i, patch in enumerate((obj.get("spec") or {}).get("runtimePatches") or []):
        runtime = (patch.get("trainingRuntimeSpec") or {}) if isinstance(patch, Mapping) else {}
        rjobs = ((runtime.get("template") or {}).get("spec") or {}).get("replicatedJobs") or []
        for j, rjob in enumerate(rjobs):
            job = ((rjob.get("template") or {}).get("spec") or {}) if isinstance(rjob, Mapping) else {}
            if (job.get("template") or {}).get("spec"):
                yield (
                    f"spec.runtimePatches[{i}].trainingRuntimeSpec.template.spec.replicatedJobs[{j}]"
                    ".template.spec.template.spec"
                )


def unread(obj: Obj) -> list[tuple[str, str]]:
    """(path, what) of every pod spec or container in `obj` that the pack does not read."""
    paths = read_paths(obj)
    found = [(path, what) for path, what in carried(obj) if path not in paths]
    seen = {path for path, _ in found}
    return found + [(path, "pod spec") for path in runtime_patch_pod_specs(obj) if path not in seen]
