"""Settings: what fast multi-node networking adds to the training pods (EFA, GPUDirect-TCPX/gIB,
InfiniBand): extended resources, environment, pod annotations, host paths and capabilities.

Each entry is validated here; whether the namespace's Pod Security level allows it is a cross-field
rule (`infra/program/checks/interconnect.py`). docs/INTERCONNECTS.md has a recipe per cloud.
"""

from __future__ import annotations

import re

from pydantic import field_validator

from infra.program.settings.base import SettingsGroup, key, quantity

# An extended resource: a domain-prefixed name (kubernetes `pkg/apis/core/helper` IsExtendedResourceName),
# not one the bundle sets itself.
_RESOURCE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_HUGEPAGES = re.compile(r"^hugepages-[0-9]+(Ki|Mi|Gi)$")  # EFA's libfabric uses them
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ANNOTATION = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_CAPABILITY = re.compile(r"^[A-Z][A-Z_]*$")
# Names that hold credentials go through a Secret, never a literal in the pod spec.
_SECRET_LIKE = re.compile(r"(KEY|SECRET|TOKEN|PASSWORD|CREDENTIAL)", re.IGNORECASE)


def split_pair(entry: str, separator: str = "=") -> tuple[str, str]:
    name, found, value = entry.partition(separator)
    if not found or not name:
        raise ValueError(f"'name{separator}value' entries")
    return name, value


def extended_resources(entries: list[str]) -> dict[str, str]:
    """jobExtraResources as name -> quantity."""
    return dict(split_pair(e) for e in entries)


def host_mounts(entries: list[str]) -> list[tuple[str, str, bool]]:
    """jobHostPathMounts as (host path, mount path, read-only)."""
    found = []
    for entry in entries:
        parts = entry.split(":")
        read_only = len(parts) == 3 and parts[2] == "ro"
        found.append((parts[0], parts[1], read_only))
    return found


class JobInterconnectSettings(SettingsGroup):
    """Extended resources, env, pod annotations, host paths and capabilities for fast networking."""

    job_extra_resources: list[str] = key(
        "jobExtraResources",
        [],
        "Extended resources each training pod requests (and limits to the same), each 'name=quantity', "
        "e.g. vpc.amazonaws.com/efa=4, hugepages-2Mi=5120Mi or rdma/shared_ib=1 (a device plugin must "
        "advertise them).",
    )
    job_extra_env: list[str] = key(
        "jobExtraEnv",
        [],
        "Environment of the training container, each 'NAME=value' (e.g. FI_PROVIDER=efa, NCCL_IB_HCA=mlx5); "
        "not a variable the bundle sets, and no credentials (use a Secret).",
    )
    job_pod_annotations: list[str] = key(
        "jobPodAnnotations",
        [],
        "Annotations of the training pods, each 'key=value' (e.g. GKE's networking.gke.io/interfaces).",
    )
    job_host_path_mounts: list[str] = key(
        "jobHostPathMounts",
        [],
        "Host directories mounted into the training container, each '/host/path:/mount/path[:ro]' "
        "(GPUDirect-TCPX/gIB libraries); needs namespacePodSecurity privileged.",
    )
    job_add_capabilities: list[str] = key(
        "jobAddCapabilities",
        [],
        "Linux capabilities added to the training container (e.g. IPC_LOCK for InfiniBand); restricted "
        "allows NET_BIND_SERVICE only, baseline its default set, anything else needs privileged.",
    )

    @field_validator("job_extra_resources")
    @classmethod
    def _extended_resources(cls, values: list[str]) -> list[str]:
        for entry in values:
            name, amount = split_pair(entry)
            extended = (
                _RESOURCE.match(name) and name != "nvidia.com/gpu" and not name.startswith("kubernetes.io/")
            )
            if not (extended or _HUGEPAGES.match(name)):
                raise ValueError(
                    "'name=quantity' entries naming a domain-prefixed extended resource or hugepages-<size> "
                    "(not nvidia.com/gpu: jobGpusPerNode sets it)"
                )
            quantity(amount)
        if len(extended_resources(values)) != len(values):
            raise ValueError("entries with distinct names")
        return values

    @field_validator("job_extra_env")
    @classmethod
    def _env(cls, values: list[str]) -> list[str]:
        names = []
        for entry in values:
            name, _ = split_pair(entry)
            if not _ENV_NAME.match(name):
                raise ValueError("'NAME=value' entries with a C identifier as NAME")
            if _SECRET_LIKE.search(name):
                raise ValueError(f"no credentials ({name}): reference a Secret instead of a literal")
            names.append(name)
        if len(set(names)) != len(names):
            raise ValueError("entries with distinct names")
        return values

    @field_validator("job_pod_annotations")
    @classmethod
    def _annotations(cls, values: list[str]) -> list[str]:
        for entry in values:
            name, _ = split_pair(entry)
            if not _ANNOTATION.match(name):
                raise ValueError("'key=value' entries with a qualified annotation key")
        return values

    @field_validator("job_host_path_mounts")
    @classmethod
    def _host_paths(cls, values: list[str]) -> list[str]:
        for entry in values:
            parts = entry.split(":")
            if not 2 <= len(parts) <= 3 or not all(p.startswith("/") for p in parts[:2]):
                raise ValueError("'/host/path:/mount/path[:ro]' entries with absolute paths")
            if len(parts) == 3 and parts[2] != "ro":
                raise ValueError(
                    "'/host/path:/mount/path[:ro]' entries (':ro' or nothing after the mount path)"
                )
        return values

    @field_validator("job_add_capabilities")
    @classmethod
    def _capabilities(cls, values: list[str]) -> list[str]:
        for cap in values:
            if not _CAPABILITY.match(cap) or cap.startswith("CAP_") or cap == "ALL":
                raise ValueError("capability names without CAP_, e.g. IPC_LOCK")
        return values
