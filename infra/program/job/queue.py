"""The Kueue LocalQueue a queued training job is submitted to (`jobQueueName`)."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from infra.program.common.meta import labels
from infra.program.settings import PROJECT, Settings


class JobQueue(pulumi.ComponentResource):
    """The Kueue LocalQueue the job is submitted to, in the job's namespace, pointing at a ClusterQueue.

    Kueue suspends a Job labelled with a queue name and keeps it inadmissible until a LocalQueue of
    that name exists in its namespace; the stack creates the namespace, so it creates the queue too.
    Rendered as `kueue.x-k8s.io/<kueueApiVersion>`: v1beta2 by default (kubernetes-sigs/kueue
    `config/components/crd/bases/kueue.x-k8s.io_localqueues.yaml`: served from v0.15.0, the stored
    version with v1beta1 marked deprecated from v0.16.0); its spec `clusterQueue` is the same in both.
    """

    def __init__(
        self,
        name: str,
        settings: Settings,
        namespace: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{PROJECT}:training:JobQueue", name, {}, opts)
        self.local_queue = k8s.apiextensions.CustomResource(
            f"{name}-local-queue",
            api_version=f"kueue.x-k8s.io/{settings.kueue_api_version}",
            kind="LocalQueue",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=settings.job_queue_name, namespace=namespace, labels=labels(settings, "queue")
            ),
            spec={"clusterQueue": settings.job_cluster_queue},
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({})
