"""Cross-field rules of submitting the job through Kueue."""

from __future__ import annotations

from collections.abc import Iterator

from infra.program.checks.errors import ConfigError
from infra.program.settings import Settings


def kueue(s: Settings, _: bool) -> Iterator[ConfigError]:
    if s.job_queue_name and not s.job_cluster_queue:
        yield ConfigError(
            "jobClusterQueue",
            "",
            f"the Kueue ClusterQueue that LocalQueue {s.job_queue_name} (jobQueueName) points at: the stack "
            "creates that LocalQueue in its namespace, and without one Kueue keeps the job suspended",
        )
    pytorchjob = s.stack_role != "platform" and s.job_kind == "pytorchjob"
    if pytorchjob and s.job_queue_name and not s.kueue_pytorchjob_integration:
        yield ConfigError(
            "kueuePyTorchJobIntegration",
            False,
            "true with jobKind pytorchjob and jobQueueName, once 'kubeflow.org/pytorchjob' is in the "
            "integrations.frameworks of Kueue's Configuration: Kueue from v0.19 leaves it out by default "
            "and then lets the PyTorchJob run at once, outside the ClusterQueue's quota (or use jobKind "
            "indexed-job, which Kueue always manages)",
        )
