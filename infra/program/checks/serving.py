"""Cross-field rules of serving the trained model."""

from __future__ import annotations

from collections.abc import Iterator

from infra.program.checks.budget import board_share
from infra.program.checks.errors import ConfigError
from infra.program.checks.operators import unvendored_version
from infra.program.common.vendored import KSERVE
from infra.program.settings import Settings, parse_quantity


def serving(s: Settings, _: bool) -> Iterator[ConfigError]:
    """The server follows the training job: only where a job runs, only after it is known to have
    succeeded, and from where the job put its model.

    One rule after another, each a yield of its own; split, the order that decides the first error would be
    harder to see."""
    if s.stack_role == "job" and s.kserve_install:
        yield ConfigError(
            "kserveInstall",
            True,
            "false when stackRole is job: the cluster's platform stack installs KServe and owns its CRDs "
            "(set kservePresent true here; stackRole all installs both in one stack)",
        )
    source = s.kserve_source
    if source and not source.startswith(("/", "./", "../", "https://")):
        yield ConfigError(
            "kserveSource",
            source,
            "a local file (/..., ./..., ../...) or an https URL of KServe's release manifest (kserve.yaml)",
        )
    if s.kserve_install:
        yield from unvendored_version("kserveVersion", s.kserve_version, "kserveSource", source, KSERVE)
    if s.tensorboard_deploy and s.stack_role == "platform":
        yield ConfigError(
            "tensorboardDeploy", True, "false when stackRole is platform (it runs no job to chart)"
        )
    if s.serve_kind == "none":
        return
    if s.serve_health_port == s.serve_port:
        yield ConfigError(
            "serveHealthPort",
            s.serve_health_port,
            f"a port other than servePort ({s.serve_port}): the probes have a port of their own",
        )
    if s.stack_role == "platform":
        yield ConfigError(
            "serveKind", s.serve_kind, "none when stackRole is platform (it runs no job to serve)"
        )
    if s.serve_kind == "kserve" and not (s.kserve_present or s.kserve_install):
        yield ConfigError(
            "serveKind",
            "kserve",
            "deployment or none unless KServe is in the cluster: set kservePresent true (KServe installed "
            "by the platform stack) or kserveInstall true (stackRole all)",
        )
    if not s.job_wait:
        yield ConfigError(
            "jobWait",
            False,
            f"true when serveKind is {s.serve_kind}: the server is created only after the training job "
            "succeeded, which only a waited job tells",
        )
    if s.serve_model_source == "s3" and not s.job_model_export:
        yield ConfigError(
            "serveModelSource",
            "s3",
            "pvc unless jobModelExport is true (the server reads the run's export, which only "
            "jobModelExport writes)",
        )
    if parse_quantity(s.serve_cpu_request) > parse_quantity(s.serve_cpu_limit):
        yield ConfigError("serveCpuRequest", s.serve_cpu_request, f"<= serveCpuLimit ({s.serve_cpu_limit})")
    if parse_quantity(s.serve_memory_request) > parse_quantity(s.serve_memory_limit):
        yield ConfigError(
            "serveMemoryRequest", s.serve_memory_request, f"<= serveMemoryLimit ({s.serve_memory_limit})"
        )
    # The server keeps running while the next run trains, with one extra pod during its rollout.
    servers = s.serve_replicas + 1
    for name, quota, job_request, job_key, serve_request, serve_key, resource in (
        (
            "namespaceCpuQuota",
            s.namespace_cpu_quota,
            s.job_cpu_request,
            "jobCpuRequest",
            s.serve_cpu_request,
            "serveCpuRequest",
            "cpu",
        ),
        (
            "namespaceMemoryQuota",
            s.namespace_memory_quota,
            s.job_memory_request,
            "jobMemoryRequest",
            s.serve_memory_request,
            "serveMemoryRequest",
            "memory",
        ),
    ):
        board, plus = board_share(s, resource)
        need = s.job_nodes * parse_quantity(job_request) + servers * parse_quantity(serve_request) + board
        if quota and need > parse_quantity(quota):
            yield ConfigError(
                name,
                quota,
                f">= jobNodes x {job_key} + (serveReplicas + 1) x {serve_key} "
                f"({s.job_nodes} x {job_request} + {servers} x {serve_request}){plus}: the server runs while "
                "the next run trains, one pod more during its rollout",
            )
