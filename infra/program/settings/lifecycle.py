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
        "jobActiveDeadlineSeconds",
        86400,
        "Fail the job after N seconds of running (default one day), whatever its retries; 0 sets no "
        "deadline (refused with a PyTorchJob's ExitCode, whose retries nothing else bounds).",
        ge=0,
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
        "ExitCode",
        "PyTorchJob replica restart policy: ExitCode (the default, the rule of every job kind) fails at "
        "once on exit codes 1-127 (bad input) and retries 128 and above (signals: a preemption's 143, "
        "the trainer's 2xx: lost peer, S3, master, export) with new pods, which only "
        "jobActiveDeadlineSeconds bounds (required with it); OnFailure restarts failed containers in "
        "place (jobBackoffLimit incidents survived), bad input included; Never fails at the first failure.",
    )
    job_termination_grace_period_seconds: int = key(
        "jobTerminationGracePeriodSeconds",
        60,
        "terminationGracePeriodSeconds of the training pods (every job kind): the time from SIGTERM (a "
        "preemption, an eviction, a deleted pod) to SIGKILL, for the trainer's checkpoint and exit; a "
        "spot node's shutdown notice may cut it shorter.",
        ge=5,
        le=600,
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
