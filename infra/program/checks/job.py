"""Cross-field rules of the training job: processes and GPUs, batch, names, resources, placement, retries."""

from __future__ import annotations

from collections.abc import Iterator

from infra.program.checks.errors import ConfigError
from infra.program.settings import Settings, parse_quantity
from infra.program.settings.base import pinned_by_digest


def gpus(s: Settings, _: bool) -> Iterator[ConfigError]:
    if s.job_gpus_per_node > 0 and s.job_procs_per_node > s.job_gpus_per_node:
        yield ConfigError(
            "jobProcsPerNode",
            s.job_procs_per_node,
            f"<= jobGpusPerNode ({s.job_gpus_per_node}): one process per GPU",
        )
    if s.job_backend == "nccl" and s.job_gpus_per_node == 0:
        yield ConfigError("jobBackend", "nccl", "gloo or auto when jobGpusPerNode is 0 (nccl needs GPUs)")


def batch(s: Settings, _: bool) -> Iterator[ConfigError]:
    if s.job_scaling == "strong" and s.job_batch_size % s.world_size:
        yield ConfigError(
            "jobBatchSize",
            s.job_batch_size,
            f"divisible by the world size {s.world_size} (jobNodes x jobProcsPerNode) under strong scaling",
        )
    if s.job_scaling == "strong" and s.job_batch_size < s.world_size:
        yield ConfigError("jobBatchSize", s.job_batch_size, f">= the world size {s.world_size}")


def names(s: Settings, _: bool) -> Iterator[ConfigError]:
    full = f"{s.job_name}-{s.job_run_id}"
    if len(full) > 40:
        yield ConfigError(
            "jobRunId",
            s.job_run_id,
            f"short enough that '{full}' (jobName-jobRunId) has at most 40 characters",
        )


def resources(s: Settings, _: bool) -> Iterator[ConfigError]:
    if s.job_cpu_limit and parse_quantity(s.job_cpu_request) > parse_quantity(s.job_cpu_limit):
        yield ConfigError("jobCpuRequest", s.job_cpu_request, f"<= jobCpuLimit ({s.job_cpu_limit})")
    if parse_quantity(s.job_memory_request) > parse_quantity(s.job_memory_limit):
        yield ConfigError(
            "jobMemoryRequest", s.job_memory_request, f"<= jobMemoryLimit ({s.job_memory_limit})"
        )
    if parse_quantity(s.job_shm_size) >= parse_quantity(s.job_memory_limit):
        yield ConfigError(
            "jobShmSize",
            s.job_shm_size,
            f"< jobMemoryLimit ({s.job_memory_limit}): /dev/shm counts against it",
        )


def scheduling(s: Settings, _: bool) -> Iterator[ConfigError]:
    from infra.program.common.scheduling import SchedulingError, affinity_terms, node_selector, tolerations

    for name, parse, value in (
        ("jobNodeSelector", node_selector, s.job_node_selector),
        ("jobTolerations", tolerations, s.job_tolerations),
        ("jobNodeAffinity", affinity_terms, s.job_node_affinity),
        ("gpuSmokeNodeSelector", node_selector, s.gpu_smoke_node_selector),
        ("gpuNodeTolerations", tolerations, s.gpu_node_tolerations),
        ("seedNodeSelector", node_selector, s.seed_node_selector),
    ):
        try:
            parse(value)
        except SchedulingError as exc:
            yield ConfigError(name, exc.entry, exc.allowed)


def exit_code_retries(s: Settings, _: bool) -> Iterator[ConfigError]:
    """Under ExitCode every retry is a new pod, whose restarts the operator's backoff never counts.

    Training operator v1.9.4: `pkg/core/pod.go` SetRestartPolicy gives the pods restartPolicy Never,
    `pkg/controller.v1/common/pod.go` ReconcilePods deletes a Failed pod whose exit code is retryable
    (`pkg/util/train/train_util.go` IsRetryableExitCode: >= 128) and creates it anew, and
    `pkg/core/job.go` PastBackoffLimit sums only the container restart counts of running pods (0 for
    a new pod). Only activeDeadlineSeconds then bounds the retries (default one day)."""
    if (
        s.job_kind == "pytorchjob"
        and s.job_restart_policy == "ExitCode"
        and not s.job_active_deadline_seconds
    ):
        yield ConfigError(
            "jobActiveDeadlineSeconds",
            0,
            "> 0 with jobRestartPolicy ExitCode: the operator retries retryable exit codes with new pods "
            "and its backoffLimit never counts them, so only a deadline bounds the retries",
        )


def image_digest(s: Settings, _: bool) -> Iterator[ConfigError]:
    """jobImageDigestRequired: the trainer's image named by its content, not by a tag that can move."""
    if s.job_image_digest_required and not pinned_by_digest(s.job_image):
        yield ConfigError(
            "jobImage",
            s.job_image,
            "named by digest (image:tag@sha256:<64 hex>) when jobImageDigestRequired is true: a tag can be "
            "re-pushed; set the digest the release names (docs/RELEASE.md)",
        )
