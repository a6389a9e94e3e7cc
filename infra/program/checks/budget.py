"""Cross-field rules of the namespace budget: the job must fit it."""

from __future__ import annotations

from collections.abc import Iterator

from infra.program.checks.errors import ConfigError
from infra.program.settings import Settings, parse_quantity
from infra.program.settings.serving import TENSORBOARD_REQUESTS as BOARD_REQUESTS


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
        board = BOARD_REQUESTS[resource] if s.tensorboard_deploy else None
        need = s.job_nodes * parse_quantity(request) + (parse_quantity(board) if board else 0)
        if quota and need > parse_quantity(quota):
            plus = f" + TensorBoard's {board} (tensorboardDeploy)" if board else ""
            yield ConfigError(
                name,
                quota,
                f">= jobNodes x {request_key} ({s.job_nodes} x {request}){plus}, or its pods can never all "
                "start",
            )
