"""The namespace's GPU/CPU/memory budget: an optional ResourceQuota and LimitRange, both off by default."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from infra.program.common.meta import labels
from infra.program.settings import PROJECT, Settings

core = k8s.core.v1
GPU = "nvidia.com/gpu"


def quota_hard(settings: Settings) -> dict[str, str]:
    """ResourceQuota `hard` limits on what all pods of the namespace request together (empty: no quota).

    Extended resources such as GPUs can only be limited by their requests (`requests.<name>`).
    """
    hard = {
        f"requests.{GPU}": str(settings.namespace_gpu_quota) if settings.namespace_gpu_quota else "",
        "requests.cpu": settings.namespace_cpu_quota,
        "requests.memory": settings.namespace_memory_quota,
    }
    return {name: value for name, value in hard.items() if value}


def limit_range_item(settings: Settings) -> core.LimitRangeItemArgs | None:
    """The per-container bounds and defaults (None: no LimitRange).

    A `max` without a `default` would make the API server default every container's limit to that
    maximum, giving GPUs to CPU-only containers; so a GPU cap also sets the default GPU limit to 0.
    """
    maximum: dict[str, str] = {}
    default: dict[str, str] = {}
    if settings.namespace_max_gpus_per_container:
        maximum[GPU] = str(settings.namespace_max_gpus_per_container)
        default[GPU] = "0"
    default_request = {
        name: value
        for name, value in (
            ("cpu", settings.namespace_default_cpu_request),
            ("memory", settings.namespace_default_memory_request),
        )
        if value
    }
    if not (maximum or default_request):
        return None
    return core.LimitRangeItemArgs(
        type="Container",
        max=maximum or None,
        default=default or None,
        default_request=default_request or None,
    )


def has_budget(settings: Settings) -> bool:
    return bool(quota_hard(settings)) or limit_range_item(settings) is not None


class NamespaceBudget(pulumi.ComponentResource):
    """What the namespace may use in all: a ResourceQuota and a LimitRange, each only when configured."""

    def __init__(
        self,
        name: str,
        settings: Settings,
        namespace: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{PROJECT}:budget:NamespaceBudget", name, {}, opts)
        child = pulumi.ResourceOptions(parent=self)
        hard = quota_hard(settings)
        if hard:
            core.ResourceQuota(
                f"{name}-quota",
                metadata=k8s.meta.v1.ObjectMetaArgs(
                    name=f"{PROJECT}-budget", namespace=namespace, labels=labels(settings, "budget")
                ),
                spec=core.ResourceQuotaSpecArgs(hard=hard),
                opts=child,
            )
        item = limit_range_item(settings)
        if item is not None:
            core.LimitRange(
                f"{name}-limits",
                metadata=k8s.meta.v1.ObjectMetaArgs(
                    name=f"{PROJECT}-limits", namespace=namespace, labels=labels(settings, "budget")
                ),
                spec=core.LimitRangeSpecArgs(limits=[item]),
                opts=child,
            )
        self.register_outputs({"quota": hard})
