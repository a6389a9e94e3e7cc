"""The training job as a batch/v1 Indexed Job (`jobKind: indexedjob`) with the headless Service that
names its pods."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from infra.program.common.meta import CONTAINER, labels
from infra.program.job.jobs import (
    JobInputs,
    job_metadata,
    job_template,
    pod_failure_policy,
    replace_on_any_change,
    run_outcome,
    training_logs,
)
from infra.program.job.podspec import pod_labels, rendezvous_env
from infra.program.settings import PROJECT, Settings


class IndexedJob(pulumi.ComponentResource):
    """A batch/v1 Indexed Job (one index per node) and the headless Service that names its pods."""

    job_name: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        settings: Settings,
        inputs: JobInputs,
        namespace: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """The Job and its headless Service, registered together: the Service names the pods the Job's spec
        addresses."""
        super().__init__(f"{PROJECT}:training:IndexedJob", name, {}, opts)
        names = inputs.names
        child = pulumi.ResourceOptions(parent=self)
        service = k8s.core.v1.Service(
            f"{name}-service",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=names.service, namespace=namespace, labels=labels(settings, "trainer")
            ),
            spec=k8s.core.v1.ServiceSpecArgs(
                cluster_ip="None",
                publish_not_ready_addresses=True,  # workers resolve the master before it is Ready
                selector=pod_labels(settings, names),
                ports=[
                    k8s.core.v1.ServicePortArgs(
                        name="rendezvous", port=settings.job_master_port, target_port=settings.job_master_port
                    )
                ],
            ),
            opts=child,
        )
        nodes = settings.job_nodes
        template = job_template(
            settings,
            inputs,
            extra_env=rendezvous_env(settings, names),
            subdomain=names.service,
            restart_policy="Never",
        )
        job = k8s.batch.v1.Job(
            f"{name}-job",
            metadata=job_metadata(settings, inputs, namespace),
            spec=k8s.batch.v1.JobSpecArgs(
                completion_mode="Indexed",
                completions=nodes,
                parallelism=nodes,
                backoff_limit_per_index=settings.job_backoff_limit,
                # One index failed for good means a rank is gone: fail the Job at once rather than
                # let the others wait on a dead master until their timeouts.
                max_failed_indexes=0,
                active_deadline_seconds=settings.job_active_deadline_seconds or None,
                ttl_seconds_after_finished=(
                    settings.job_ttl_seconds_after_finished
                    if settings.job_ttl_seconds_after_finished >= 0
                    else None
                ),
                pod_failure_policy=pod_failure_policy(CONTAINER, training=True),
                template=template,
            ),
            opts=pulumi.ResourceOptions.merge(child, replace_on_any_change((service, *inputs.after))),
        )
        self.job_name = job.metadata.name
        self.outcome = (
            run_outcome(
                job,
                "Job",
                names.job,
                training_logs(settings, names.job, follow=False),
                settings,
                inputs.watch,
                settings.job_nodes,
            )
            if settings.job_wait
            else pulumi.Output.from_input("not awaited (jobWait false)")
        )
        self.register_outputs({"job_name": self.job_name})
