"""Settings: how long the job may run, how it retries and cleans up, and whether `pulumi up` waits."""

from __future__ import annotations

from typing import Literal

from infra.program.settings.base import SettingsGroup, key


class JobLifecycleSettings(SettingsGroup):
    """TTL, deadline, retries, restart and clean-pod policies, and jobWait."""

    job_ttl_seconds_after_finished: int = key(
        "jobTtlSecondsAfterFinished",
        -1,
        "Delete the finished job after N seconds (opt-in); -1 keeps it.",
        ge=-1,
    )
    job_active_deadline_seconds: int = key(
        "jobActiveDeadlineSeconds", 0, "Fail the job after N seconds of running; 0 sets no deadline.", ge=0
    )
    job_backoff_limit: int = key(
        "jobBackoffLimit",
        3,
        "Retries: PyTorchJob backoffLimit, or the Indexed Job's backoff per index.",
        ge=0,
        le=100,
    )
    job_restart_policy: Literal["OnFailure", "Never", "ExitCode"] = key(
        "jobRestartPolicy",
        "OnFailure",
        "PyTorchJob replica restart policy: OnFailure restarts failed containers in place (jobBackoffLimit "
        "incidents survived), bad input included; ExitCode fails at once on exit codes 1-127 (bad input) "
        "and retries 128 and above (signals, the trainer's 2xx: lost peer, S3, master, export) with new "
        "pods, which only "
        "jobActiveDeadlineSeconds bounds (required with it).",
    )
    job_clean_pod_policy: Literal["None", "Running", "All"] = key(
        "jobCleanPodPolicy", "None", "PyTorchJob cleanPodPolicy: which pods to delete when the job ends."
    )
    job_wait: bool = key(
        "jobWait",
        False,
        "Make `pulumi up` wait until the job has ended, either way (its success condition, Succeeded or "
        "Complete, or Failed; at most jobWaitTimeoutSeconds), then fail `pulumi up` if it Failed.",
    )
    job_wait_timeout_seconds: int = key(
        "jobWaitTimeoutSeconds", 3600, "How long `pulumi up` waits for the job (jobWait).", ge=60
    )
    job_placement_timeout_seconds: int = key(
        "jobPlacementTimeoutSeconds",
        300,
        "Fail `pulumi up` with the cause when, while it waits for the seed or the job, a pod stays "
        "unschedulable, a claim unbound, a container unable to start (image pull, missing Secret) or the "
        "job without any pod for this long; nodes that an autoscaler is adding count as progress.",
        ge=10,
        le=86400,
    )
