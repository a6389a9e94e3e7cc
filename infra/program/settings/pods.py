"""Settings: the job pods' resources, placement on nodes, and the user they run as."""

from __future__ import annotations

from pydantic import field_validator

from infra.program.settings.base import SettingsGroup, key, optional_dns_label, optional_quantity, quantity


class JobResourceSettings(SettingsGroup):
    """CPU, memory and /dev/shm of each job pod."""

    job_cpu_request: str = key("jobCpuRequest", "2", "CPU request per pod (a quantity).")
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
    job_priority_class_name: str = key("jobPriorityClassName", "", "priorityClassName of the pods.")

    @field_validator("job_priority_class_name")
    @classmethod
    def _priority_class_dns_label(cls, value: str) -> str:
        return optional_dns_label(value)


class JobUserSettings(SettingsGroup):
    """The uid/gid of the trainer container."""

    job_run_as_user: int = key(
        "jobRunAsUser", 1000, "uid/gid the trainer runs as (the image's user).", ge=1, le=2147483647
    )
