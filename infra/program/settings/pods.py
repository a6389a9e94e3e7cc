"""Settings: the job pods' resources, placement on nodes, and the user they run as."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from infra.program.settings.base import (
    DNS_LABEL,
    GPU_DEVICE_PLUGIN_IMAGE,
    SettingsGroup,
    check_pinned_image,
    key,
    optional_dns_label,
    optional_quantity,
    quantity,
)


class JobResourceSettings(SettingsGroup):
    """CPU, memory and /dev/shm of each job pod."""

    job_cpu_request: str = key(
        "jobCpuRequest",
        "2",
        "CPU request of each training pod (a quantity, such as 500m): what the scheduler reserves on its "
        "node, and with jobProcsPerNode what sets each rank's threads; a CPU limit is jobCpuLimit's.",
    )
    job_cpu_limit: str = key("jobCpuLimit", "", "CPU limit per pod (a quantity); empty sets none.")
    job_memory_request: str = key("jobMemoryRequest", "2Gi", "Memory request per pod (a quantity).")
    job_memory_limit: str = key("jobMemoryLimit", "4Gi", "Memory limit per pod (a quantity).")
    job_shm_size: str = key("jobShmSize", "1Gi", "Size of the memory-backed /dev/shm (a quantity).")

    @field_validator("job_cpu_request", "job_memory_request", "job_memory_limit", "job_shm_size")
    @classmethod
    def _job_quantity(cls, value: str) -> str:
        return quantity(value)

    @field_validator("job_cpu_limit")
    @classmethod
    def _job_optional_quantity(cls, value: str) -> str:
        return optional_quantity(value)


class JobPlacementSettings(SettingsGroup):
    """Which nodes the job pods may run on, and their priority."""

    job_node_selector: list[str] = key(
        "jobNodeSelector", [], "Node labels the pods require, each 'key=value'."
    )
    job_tolerations: list[str] = key(
        "jobTolerations",
        [],
        "Taints tolerated, each 'key[=value]:Effect'; GPU stacks always tolerate nvidia.com/gpu.",
    )
    job_node_affinity: list[str] = key(
        "jobNodeAffinity",
        [],
        "Required node affinity, each 'key in a,b', 'key notin a,b', 'key exists' or 'key doesnotexist'.",
    )
    job_one_pod_per_node: bool = key(
        "jobOnePodPerNode", False, "Anti-affinity: never place two pods of the job on one node."
    )
    job_priority_class_name: str = key(
        "jobPriorityClassName",
        "",
        "priorityClassName of the pods; the class must exist (the API server refuses every pod naming a "
        "missing one). With platformStack it must be one of that stack's priorityClasses.",
    )
    priority_classes: list[str] = key(
        "priorityClasses",
        [],
        "Platform (or all) stacks: the PriorityClasses to create, as name=value (value at most "
        "1000000000, the highest a user-defined class may have), e.g. training-high=100000; exported "
        "in the stack's `platform` output for the job stacks that name one (jobPriorityClassName).",
    )

    gpu_device_plugin: Literal["present", "install"] = key(
        "gpuDevicePlugin",
        "present",
        "Platform (or all) stacks: 'install' the NVIDIA device plugin (a DaemonSet in kube-system, "
        "gpuDevicePluginImage) where the cloud leaves it to the user (EKS, AKS, self-managed nodes), or "
        "declare it 'present' (GKE installs it on GPU node pools; a GPU Operator brings its own).",
    )
    gpu_smoke_node_selector: list[str] = key(
        "gpuSmokeNodeSelector",
        [],
        "Platform (or all) stacks: the GPU nodes' labels, each 'key=value'; when set, `pulumi up` runs "
        "one pod there asking for one nvidia.com/gpu (tolerating gpuNodeTolerations) and fails unless it "
        "starts within 900 s, proving those nodes advertise GPUs (the device plugin) and admit a pod; "
        "empty runs none.",
    )
    gpu_node_tolerations: list[str] = key(
        "gpuNodeTolerations",
        [],
        "Platform (or all) stacks: the GPU nodes' taints beyond nvidia.com/gpu, each "
        "'key[=value]:Effect' (AKS: sku=gpu:NoSchedule); the device plugin and the GPU smoke pod "
        "tolerate these and nvidia.com/gpu, nothing else.",
    )
    gpu_device_plugin_image: str = key(
        "gpuDevicePluginImage",
        GPU_DEVICE_PLUGIN_IMAGE,
        "Image of the NVIDIA device plugin gpuDevicePlugin install runs (a mirror for air-gapped "
        "clusters), pinned.",
    )

    @field_validator("gpu_device_plugin_image")
    @classmethod
    def _gpu_device_plugin_pinned(cls, value: str) -> str:
        return check_pinned_image(value)

    @field_validator("job_priority_class_name")
    @classmethod
    def _priority_class_dns_label(cls, value: str) -> str:
        return optional_dns_label(value)

    @field_validator("priority_classes")
    @classmethod
    def _priority_classes(cls, values: list[str]) -> list[str]:
        names = [parse_priority_class(entry)[0] for entry in values]
        if len(set(names)) != len(names):
            raise ValueError("name=value entries with distinct names")
        return values

    @property
    def priority_class_values(self) -> dict[str, int]:
        """priorityClasses as name -> value."""
        return dict(parse_priority_class(entry) for entry in self.priority_classes)


# The highest value of a user-defined PriorityClass, whose name must not start with system- (kubernetes
# v1.33.13 `pkg/apis/scheduling/types.go`: HighestUserDefinablePriority, SystemPriorityClassPrefix).
HIGHEST_USER_PRIORITY = 1_000_000_000


def parse_priority_class(entry: str) -> tuple[str, int]:
    """`name=value` as (name, value); ValueError naming what is allowed."""
    name, _, value = entry.partition("=")
    allowed = (
        "name=value entries: a DNS-1123 label not starting with system- and an integer at most "
        f"{HIGHEST_USER_PRIORITY}, e.g. training-high=100000"
    )
    try:
        number = int(value)
    except ValueError:
        raise ValueError(allowed) from None
    if (
        not DNS_LABEL.match(name)
        or len(name) > 63
        or name.startswith("system-")
        or number > HIGHEST_USER_PRIORITY
    ):
        raise ValueError(allowed)
    return name, number


class JobUserSettings(SettingsGroup):
    """The uid/gid of the trainer container."""

    job_run_as_user: int = key(
        "jobRunAsUser", 1000, "uid/gid the trainer runs as (the image's user).", ge=1, le=2147483647
    )
