"""Cross-field rules of the namespace budget: the job must fit it."""

from __future__ import annotations

from collections.abc import Iterator

from infra.program.checks.errors import ConfigError
from infra.program.settings import Settings, parse_quantity
from infra.program.settings.serving import TENSORBOARD_REQUESTS as BOARD_REQUESTS


def board_share(s: Settings, resource: str) -> tuple[float, str]:
    """The TensorBoard pod's request of `resource` ("cpu" or "memory") with tensorboardDeploy, and the
    words a quota message adds for it; nothing without it."""
    if not s.tensorboard_deploy:
        return 0.0, ""
    request = BOARD_REQUESTS[resource]
    return parse_quantity(request), f" + TensorBoard's {request} (tensorboardDeploy)"


def namespace_budget(s: Settings, _: bool) -> Iterator[ConfigError]:
    """The job must fit the namespace budget it is deployed with, or its pods could never start."""
    gpus = s.job_nodes * s.job_gpus_per_node
    if s.namespace_gpu_quota and gpus > s.namespace_gpu_quota:
        yield ConfigError(
            "namespaceGpuQuota",
            s.namespace_gpu_quota,
            f">= the job's {gpus} GPUs (jobNodes x jobGpusPerNode), or its pods can never all start",
        )
    if s.namespace_max_gpus_per_container and s.job_gpus_per_node > s.namespace_max_gpus_per_container:
        yield ConfigError(
            "jobGpusPerNode",
            s.job_gpus_per_node,
            f"<= namespaceMaxGpusPerContainer ({s.namespace_max_gpus_per_container})",
        )
    for name, quota, request, request_key, resource in (
        ("namespaceCpuQuota", s.namespace_cpu_quota, s.job_cpu_request, "jobCpuRequest", "cpu"),
        (
            "namespaceMemoryQuota",
            s.namespace_memory_quota,
            s.job_memory_request,
            "jobMemoryRequest",
            "memory",
        ),
    ):
        board, plus = board_share(s, resource)
        need = s.job_nodes * parse_quantity(request) + board
        if quota and need > parse_quantity(quota):
            yield ConfigError(
                name,
                quota,
                f">= jobNodes x {request_key} ({s.job_nodes} x {request}){plus}, or its pods can never all "
                "start",
            )
