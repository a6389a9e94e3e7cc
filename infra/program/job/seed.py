"""The seed Job: puts MNIST on the data PVC before the training job starts.

A fresh cluster's data PVC is empty, and the trainer exits 3 on it. This batch/v1 Job runs the same
image (`python -m trainer.seed`), Pod Security 'restricted', with no service-account token, under a
NetworkPolicy of its own (DNS and its source only, no ingress). It takes MNIST from the stack's
bucket (credentials from the stack's Secret) or from HTTPS mirrors checked against the canonical
sha256 of every file, and exits 0 at once when the PVC already holds verified data.

Its outcome gates the training job: the job's data-claim input is `after_success(claim, outcome)`
(`infra/program/job/jobs.py`), so a Failed seed Job fails `pulumi up` with one line and the training job
is never registered. The Job carries `pulumi.com/replaceUnready`: pulumi-kubernetes's Diff
(`provider/pkg/provider/provider.go` at v4.32.0; see docs/ENGINE.md) reads the live Job on every
preview and up and replaces it, deleting it first, unless it is Complete
(`provider/pkg/await/checker/job/check.go`).
So after a failure (or an interrupted run) the next `pulumi up` runs the seed again, without
`--replace`; a Complete seed Job is left alone.

With jobQueueName the seed Job carries the same Kueue queue label as the training job and is created
after the LocalQueue: on a Kueue configured with `manageJobsWithoutQueueName: true` an unlabelled Job
is suspended and never admitted, which would leave `pulumi up` waiting out jobWaitTimeoutSeconds and
never create the training job. Its requests (250m CPU, 256Mi memory) then count against the
ClusterQueue, which must cover cpu and memory (Kueue v0.19.0 `pkg/scheduler/flavorassigner/
flavorassigner.go`: a resource outside the ClusterQueue's resourceGroups is "unavailable").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pulumi
import pulumi_kubernetes as k8s

from infra.program.common import scheduling
from infra.program.common.isolation import dns_egress, egress_to, https_egress, job_pods, s3_destination
from infra.program.common.meta import DATA_MOUNT, JOB_LABEL, JobNames, labels
from infra.program.common.storage import binds_at_first_consumer
from infra.program.job.env import base_env, s3_ca_volumes, s3_env
from infra.program.job.jobs import (
    logs_command,
    no_wait_annotations,
    pod_failure_policy,
    queue_label,
    replace_on_any_change,
    run_outcome,
)
from infra.program.job.podspec import (
    TERMINATION_MESSAGE_POLICY,
    container_security,
    job_node_pods,
    pod_security,
)
from infra.program.settings import PROJECT, Settings

if TYPE_CHECKING:
    from infra.program.job.runwatch import RunWatch

core = k8s.core.v1
net = k8s.networking.v1
SEED_JOB = f"{PROJECT}-seed"
CONTAINER = "seed"
SEED_CPU_REQUEST = "250m"
SEED_MEMORY_REQUEST = "256Mi"
SEED_MEMORY_LIMIT = "512Mi"
# MNIST is 11 MB: a seed still running after this (a source that stalls without failing) fails, so a
# stuck seed never holds a node, a GPU node with it, for long.
SEED_DEADLINE_SECONDS = 1800
REPLACE_UNREADY = "pulumi.com/replaceUnready"


def seed_args(settings: Settings) -> list[str]:
    """`python -m trainer.seed` flags: the data PVC's MNIST root, and the source."""
    args = [f"--to={DATA_MOUNT}/mnist"]
    if settings.seed_source == "s3":
        return [*args, f"--from=s3://{settings.minio_bucket}/{settings.minio_prefix}".rstrip("/")]
    return [*args, *(f"--mirror={url}" for url in settings.seed_mirrors)]


def seed_resources() -> core.ResourceRequirementsArgs:
    """What a `python -m trainer.seed` container asks for: the seed Job's and the prerequisites' fill."""
    return core.ResourceRequirementsArgs(
        requests={"cpu": SEED_CPU_REQUEST, "memory": SEED_MEMORY_REQUEST},
        limits={"memory": SEED_MEMORY_LIMIT},
    )


def seed_pod_template(
    settings: Settings,
    data_claim: pulumi.Input[str],
    secret_name: pulumi.Input[str] | None,
    service_account: pulumi.Input[str] | None,
) -> core.PodTemplateSpecArgs:
    empty = core.EmptyDirVolumeSourceArgs
    ca_volumes, ca_mounts = s3_ca_volumes(settings) if settings.seed_source == "s3" else ([], [])
    container = core.ContainerArgs(
        name=CONTAINER,
        image=settings.job_image,
        image_pull_policy=settings.image_pull_policy,
        command=["python", "-m", "trainer.seed"],
        args=seed_args(settings),
        env=[*base_env(), *(s3_env(settings, secret_name) if settings.seed_source == "s3" else [])],
        resources=seed_resources(),
        volume_mounts=[
            core.VolumeMountArgs(name="data", mount_path=DATA_MOUNT),
            core.VolumeMountArgs(name="tmp", mount_path="/tmp"),
            *ca_mounts,
        ],
        security_context=container_security(),
        termination_message_policy=TERMINATION_MESSAGE_POLICY,
    )
    return core.PodTemplateSpecArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(
            labels={**labels(settings, "seed"), JOB_LABEL: SEED_JOB},
            annotations={"sidecar.istio.io/inject": "false"},
        ),
        spec=core.PodSpecArgs(
            containers=[container],
            volumes=[
                core.VolumeArgs(
                    name="data",
                    persistent_volume_claim=core.PersistentVolumeClaimVolumeSourceArgs(claim_name=data_claim),
                ),
                core.VolumeArgs(name="tmp", empty_dir=empty(size_limit="1Gi")),
                *ca_volumes,
            ],
            restart_policy="Never",
            **seed_placement(settings),
            service_account_name=service_account,
            automount_service_account_token=False,
            enable_service_links=False,
            security_context=pod_security(settings),
        ),
    )


def seed_placement(settings: Settings) -> dict[str, Any]:
    """Where the seed runs (PodSpecArgs keywords): seedNodeSelector's nodes (a CPU pool), tolerating
    nothing, so it never scales a GPU node up for a copy; else the job's nodes when the claims bind
    WaitForFirstConsumer (a zonal volume is created where its first consumer runs, so the seed's node
    decides the zone the training pods must then run in); else anywhere."""
    if settings.seed_node_selector:
        return {"node_selector": scheduling.node_selector(settings.seed_node_selector)}
    return job_node_pods(settings) if binds_at_first_consumer(settings) else {}


def seed_network_policy_spec(settings: Settings) -> net.NetworkPolicySpecArgs:
    """No ingress; egress to DNS and to the source only: the bucket's port, or HTTPS to the public
    internet (or seedHttpsEgressCidrs)."""
    names = JobNames(job=SEED_JOB, service=SEED_JOB, checkpoint_dir="")
    egress = [dns_egress(settings)]
    s3 = s3_destination(settings) if settings.seed_source == "s3" else None
    egress.append(egress_to(s3) if s3 is not None else https_egress(settings))
    return net.NetworkPolicySpecArgs(
        pod_selector=job_pods(names), policy_types=["Ingress", "Egress"], egress=egress
    )


class DataSeed(pulumi.ComponentResource):
    """The seed Job (and its NetworkPolicy): MNIST onto the data PVC, once, before any training."""

    job: k8s.batch.v1.Job

    def __init__(
        self,
        name: str,
        settings: Settings,
        namespace: pulumi.Input[str],
        data_claim: pulumi.Input[str],
        secret_name: pulumi.Input[str] | None,
        service_account: pulumi.Input[str] | None,
        queue: pulumi.Resource | None = None,
        watch: RunWatch | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{PROJECT}:data:DataSeed", name, {}, opts)
        child = pulumi.ResourceOptions(parent=self)
        after: tuple[pulumi.Resource, ...] = (queue,) if queue is not None else ()
        if settings.job_network_policy:
            after += (
                net.NetworkPolicy(
                    f"{name}-policy",
                    metadata=k8s.meta.v1.ObjectMetaArgs(
                        name=SEED_JOB, namespace=namespace, labels=labels(settings, "seed")
                    ),
                    spec=seed_network_policy_spec(settings),
                    opts=child,
                ),
            )
        self.job = k8s.batch.v1.Job(
            f"{name}-job",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=SEED_JOB,
                namespace=namespace,
                labels={**labels(settings, "seed"), **queue_label(settings)},
                # Always awaited (by the program: `run_outcome`): the training job must not start on an
                # empty volume. Replaced at the next `pulumi up` unless it is Complete in the cluster (a
                # failed seed runs again).
                annotations={**no_wait_annotations(), REPLACE_UNREADY: "true"},
            ),
            spec=k8s.batch.v1.JobSpecArgs(
                backoff_limit=settings.seed_backoff_limit,
                active_deadline_seconds=SEED_DEADLINE_SECONDS,
                # Bad flags, bad data, rejected credentials fail at once; an unreachable source retries.
                pod_failure_policy=pod_failure_policy(CONTAINER),
                template=seed_pod_template(settings, data_claim, secret_name, service_account),
            ),
            opts=pulumi.ResourceOptions.merge(child, replace_on_any_change(after)),
        )
        logs = logs_command(settings.namespace, SEED_JOB, settings.seed_backoff_limit + 1, follow=False)
        self.outcome = run_outcome(self.job, "Job", SEED_JOB, logs, settings, watch)
        self.register_outputs({})
