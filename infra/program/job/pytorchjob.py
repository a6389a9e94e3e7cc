"""The training job as a Kubeflow PyTorchJob (`jobKind: pytorchjob`): one Master and jobNodes-1 Workers."""

from __future__ import annotations

import pulumi

from infra.program.job.jobs import (
    CustomResourceWithStatus,
    JobInputs,
    job_metadata,
    job_template,
    replace_on_any_change,
    run_outcome,
    training_logs,
)
from infra.program.settings import PROJECT, Settings


def pytorchjob_backoff_limit(settings: Settings) -> int:
    """runPolicy.backoffLimit meaning "jobBackoffLimit incidents survived".

    With OnFailure the operator (v1.9.4 `pkg/core/job.go` PastBackoffLimit) fails the job once the sum
    of container restarts over all running pods reaches backoffLimit; one lost rank breaks the
    collective and restarts every pod's container, so each incident counts jobNodes restarts. The job
    survives jobBackoffLimit incidents and fails at the next.
    """
    return settings.job_backoff_limit * settings.job_nodes + 1


class PyTorchJob(pulumi.ComponentResource):
    """A kubeflow.org/v1 PyTorchJob: one Master and jobNodes-1 Workers, nprocPerNode processes each.

    A preempted pod, under the default restartPolicy ExitCode (training operator v1.9.4): the operator
    reads no pod condition (no DisruptionTarget rule exists for it); an evicted pod is deleted and
    `pkg/controller.v1/common/pod.go` ReconcilePods creates its replica anew, and a pod failed by a
    node shutdown (exit 143 from SIGTERM, 137 from SIGKILL, or no terminated state at all, which it
    reads as 0xbeef) has a retryable code (`pkg/util/train/train_util.go`: >= 128) and is deleted and
    recreated the same way. Neither is counted against backoffLimit (`pkg/core/job.go`
    PastBackoffLimit sums the container restarts of running pods; a new pod has none), nor are the
    peers' own retryable exits: jobActiveDeadlineSeconds bounds them all (`checks/job.py`).
    """

    job_name: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        settings: Settings,
        inputs: JobInputs,
        namespace: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{PROJECT}:training:PyTorchJob", name, {}, opts)
        template = job_template(settings, inputs)
        replica = {"restartPolicy": settings.job_restart_policy, "template": template}
        replicas = {"Master": {"replicas": 1, **replica}}
        if settings.job_nodes > 1:
            replicas["Worker"] = {"replicas": settings.job_nodes - 1, **replica}
        run_policy: dict[str, object] = {
            "cleanPodPolicy": settings.job_clean_pod_policy,
            "backoffLimit": pytorchjob_backoff_limit(settings),
        }
        if settings.job_active_deadline_seconds:
            run_policy["activeDeadlineSeconds"] = settings.job_active_deadline_seconds
        if settings.job_ttl_seconds_after_finished >= 0:
            run_policy["ttlSecondsAfterFinished"] = settings.job_ttl_seconds_after_finished
        job = CustomResourceWithStatus(
            f"{name}-job",
            "PyTorchJob",
            metadata=job_metadata(settings, inputs, namespace),
            spec={
                "nprocPerNode": str(settings.job_procs_per_node),
                "runPolicy": run_policy,
                "pytorchReplicaSpecs": replicas,
            },
            opts=pulumi.ResourceOptions.merge(
                pulumi.ResourceOptions(parent=self), replace_on_any_change(inputs.after)
            ),
        )
        # A CustomResource's metadata output is untyped; the name is fixed anyway, known once created.
        self.job_name = job.id.apply(lambda _: inputs.names.job)
        self.outcome = (
            run_outcome(
                job,
                "PyTorchJob",
                inputs.names.job,
                training_logs(settings, inputs.names.job, follow=False),
                settings,
                inputs.watch,
                settings.job_nodes,
            )
            if settings.job_wait
            else pulumi.Output.from_input("not awaited (jobWait false)")
        )
        self.register_outputs({"job_name": self.job_name})
