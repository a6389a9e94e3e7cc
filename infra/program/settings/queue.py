"""Settings: submitting the job through a Kueue LocalQueue."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from infra.program.settings.base import SettingsGroup, key, optional_dns_label


class QueueSettings(SettingsGroup):
    """The LocalQueue, the ClusterQueue it points at, and what the cluster's Kueue supports."""

    job_queue_name: str = key(
        "jobQueueName",
        "",
        "Kueue LocalQueue the job is submitted to (the stack creates it in its namespace); empty submits "
        "directly.",
    )
    job_cluster_queue: str = key(
        "jobClusterQueue",
        "",
        "Kueue ClusterQueue the stack's LocalQueue (jobQueueName) points at; it must exist in the cluster.",
    )
    kueue_api_version: Literal["v1beta2", "v1beta1"] = key(
        "kueueApiVersion",
        "v1beta2",
        "API version of the LocalQueue (jobQueueName): v1beta2 (Kueue >= v0.15; its stored version from "
        "v0.16, where v1beta1 is deprecated), or v1beta1 for Kueue before v0.15.",
    )
    kueue_pytorchjob_integration: bool = key(
        "kueuePyTorchJobIntegration",
        False,
        "Declare that the cluster's Kueue manages PyTorchJobs ('kubeflow.org/pytorchjob' in its "
        "integrations.frameworks): required for jobKind pytorchjob with jobQueueName, as Kueue from "
        "v0.19 no longer enables it by default and would let the job run outside the queue.",
    )

    @field_validator("job_queue_name", "job_cluster_queue")
    @classmethod
    def _queue_dns_label(cls, value: str) -> str:
        return optional_dns_label(value)
