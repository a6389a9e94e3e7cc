"""The training job as a Kubeflow Trainer v2 TrainJob, run by a namespaced TrainingRuntime of its own.

Upstream (kubeflow/trainer, tag v2.3.0), what this relies on:
- `pkg/runtime/framework/plugins/torch/torch.go` (EnforceMLPolicy): into the container named `node` of
  the replicatedJob labelled `trainer.kubeflow.org/trainjob-ancestor-step: trainer` the torch plugin
  upserts `PET_NNODES` (the TrainJob's `numNodes`), `PET_NPROC_PER_NODE` (its `numProcPerNode`),
  `PET_NODE_RANK` (from the `batch.kubernetes.io/job-completion-index` annotation),
  `PET_MASTER_ADDR=<trainjob>-node-0-0.<trainjob>`, `PET_MASTER_PORT=29500` and the container port
  29500. Our pod command reads exactly those, so the runtime's template sets none of them; its
  Validate refuses a TrainJob whose `spec.trainer.env` sets one (`TorchRunReservedEnvNames`).
- `pkg/webhooks/trainingruntime_webhook.go`: that replicatedJob has `replicas: 1` and a `node` container.
- `pkg/runtime/core/trainingruntime.go`: the node count comes from the TrainJob's `numNodes` (else
  `mlPolicy.numNodes`); `resourcesPerNode` is merged into the `node` container's resources; the
  runtime is snapshotted (`snapshot.go`) at the TrainJob's first reconcile, so editing it later never
  reaches a running TrainJob: the TrainJob is replaced with it (`replace_with`).
- `pkg/runtime/framework/plugins/jobset/jobset.go`, `builder.go`: the JobSet is named after the TrainJob,
  carries the runtime template's labels and its spec (failurePolicy, ttlSecondsAfterFinished, network).
- `pkg/controller/trainjob_controller.go` (reconcileDeadline): `spec.activeDeadlineSeconds` fails the
  TrainJob (reason DeadlineExceeded) and deletes its JobSet; `pkg/apis/trainer/v1alpha1/trainjob_types.go`:
  the TrainJob's conditions `Complete` and `Failed` mirror the JobSet's.

And JobSet v0.12.0 (kubernetes-sigs/jobset, `pkg/controllers/failure_policy.go`): a failed child Job is
matched against `failurePolicy.rules` in order; the first match's action applies, else `RestartJobSet`,
which recreates every Job (every pod) and fails the JobSet once `maxRestarts` restarts are used up.
So each node Job has `backoffLimit: 0` (any lost rank fails the Job; the JobSet restarts every node, as
one incident), its podFailurePolicy fails it at once on the trainer's permanent exit codes 1-127
(reason `PodFailurePolicy`), and a rule turns that reason into `FailJobSet`: `jobBackoffLimit` is the number
of incidents survived, as for the other kinds.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.program.common.meta import PERMANENT_EXIT_CODES, STOPPED_WITH_PEERS_EXIT_CODES, labels
from infra.program.job.jobs import (
    CustomResourceWithStatus,
    JobInputs,
    job_metadata,
    replace_on_any_change,
    run_outcome,
    training_logs,
)
from infra.program.job.podspec import container_resources, pod_template
from infra.program.settings import PROJECT, Settings

API_GROUP = "trainer.kubeflow.org"
API_VERSION = f"{API_GROUP}/v1alpha1"
NODE = "node"  # the replicatedJob and the container the torch plugin looks for (constants.Node)
ANCESTOR_LABEL = f"{API_GROUP}/trainjob-ancestor-step"
ANCESTOR_TRAINER = "trainer"
# The torch plugin's env (constants.TorchRunReservedEnvNames): never set by us, in either object.
RESERVED_ENV = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")
PERMANENT_RULE = "FailJobSetOnPermanentExit"  # JobSet rule names: ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$


def status_command(settings: Settings, name: str) -> str:
    """`statusCommand` of a TrainJob: `-o wide`, or with trainerProgress one line of its state (the CRD's
    own State column, `.status.conditions[-1:].type`) and the progress rank 0 last reported,
    `status.trainerStatus` (v2.3.0 `pkg/apis/trainer/v1alpha1/trainjob_types.go` TrainerStatus: percent,
    seconds left, when, and each metric as name=value). kubectl's jsonpath prints a missing field empty."""
    get = f"kubectl -n {settings.namespace} get trainjob {name}"
    if not settings.trainer_progress:
        return f"{get} -o wide"
    status = ".status.trainerStatus"
    fields = (
        "{.metadata.name} {.status.conditions[-1:].type}"
        f" progress={{{status}.progressPercentage}}% eta={{{status}.estimatedRemainingSeconds}}s"
        f" updated={{{status}.lastUpdatedTime}}"
        f"{{range {status}.metrics[*]}} {{.name}}={{.value}}{{end}}"
        '{"\\n"}'
    )
    return f"{get} -o jsonpath='{fields}'"


def node_job_spec(settings: Settings, template: Any) -> dict[str, Any]:
    """The `node` replicatedJob's Job: one index per node, failing at its first failed pod."""
    nodes = settings.job_nodes
    return {
        "completionMode": "Indexed",
        "completions": nodes,  # the torch plugin sets both to numNodes; stated for the reader
        "parallelism": nodes,
        "backoffLimit": 0,
        "podFailurePolicy": {
            "rules": [
                # Evictions and preemptions are not the trainer's fault: the pod is replaced, uncounted.
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                # Nor is a pod stopped with the job because another node was preempted (exit 201).
                {
                    "action": "Ignore",
                    "onExitCodes": {
                        "containerName": NODE,
                        "operator": "In",
                        "values": list(STOPPED_WITH_PEERS_EXIT_CODES),
                    },
                },
                # Exit codes 1-127 (a bug, bad input) fail again on retry: the Job fails with reason
                # PodFailurePolicy, which the JobSet rule PERMANENT_RULE makes final. Any other failure
                # (128 and above: retryable) fails the Job (backoffLimit 0): JobSet restarts every node.
                {
                    "action": "FailJob",
                    "onExitCodes": {
                        "containerName": NODE,
                        "operator": "In",
                        "values": list(PERMANENT_EXIT_CODES),
                    },
                },
            ]
        },
        "template": template,
    }


def jobset_template_spec(settings: Settings, template: Any) -> dict[str, Any]:
    """The JobSet the runtime makes for each TrainJob: the `node` replicatedJob and its failure rules."""
    spec: dict[str, Any] = {
        "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
        "failurePolicy": {
            "maxRestarts": settings.job_backoff_limit,
            "restartStrategy": "Recreate",
            "rules": [
                {"name": PERMANENT_RULE, "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}
            ],
        },
        "replicatedJobs": [
            {
                "name": NODE,
                "replicas": 1,
                "template": {
                    "metadata": {"labels": {ANCESTOR_LABEL: ANCESTOR_TRAINER}},
                    "spec": node_job_spec(settings, template),
                },
            }
        ],
    }
    if settings.job_ttl_seconds_after_finished >= 0:
        spec["ttlSecondsAfterFinished"] = settings.job_ttl_seconds_after_finished
    return spec


def training_runtime_spec(settings: Settings, template: Any) -> dict[str, Any]:
    """A TrainingRuntime's spec: the torch ML policy and the JobSet template running our pod template."""
    return {
        "mlPolicy": {"numNodes": settings.job_nodes, "torch": {}},
        "template": {
            "metadata": {"labels": labels(settings, "trainer")},
            "spec": jobset_template_spec(settings, template),
        },
    }


def trainjob_spec(settings: Settings, runtime_name: str) -> dict[str, Any]:
    """A TrainJob's spec: the runtime, the nodes, processes and resources per node, the deadline."""
    spec: dict[str, Any] = {
        "runtimeRef": {"apiGroup": API_GROUP, "kind": "TrainingRuntime", "name": runtime_name},
        "trainer": {
            "numNodes": settings.job_nodes,
            "numProcPerNode": settings.job_procs_per_node,
            "resourcesPerNode": container_resources(settings),
        },
    }
    if settings.job_active_deadline_seconds:
        spec["activeDeadlineSeconds"] = settings.job_active_deadline_seconds
    return spec


class TrainJob(pulumi.ComponentResource):
    """A trainer.kubeflow.org/v1alpha1 TrainingRuntime (our restricted pod template in a JobSet template,
    named after the job) and the TrainJob that runs it on jobNodes nodes."""

    job_name: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        settings: Settings,
        inputs: JobInputs,
        namespace: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{PROJECT}:training:TrainJob", name, {}, opts)
        names = inputs.names
        child = pulumi.ResourceOptions(parent=self)
        template = pod_template(
            settings,
            names,
            data_claim=inputs.data_claim,
            checkpoint_claim=inputs.checkpoint_claim,
            secret_name=inputs.secret_name,
            service_account=inputs.service_account,
            restart_policy="Never",  # podFailurePolicy needs it; JobSet restarts the nodes instead
            container_name=NODE,
        )
        runtime = k8s.apiextensions.CustomResource(
            f"{name}-runtime",
            api_version=API_VERSION,
            kind="TrainingRuntime",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=names.job, namespace=namespace, labels=labels(settings, "trainer")
            ),
            spec=training_runtime_spec(settings, template),
            opts=pulumi.ResourceOptions.merge(child, replace_on_any_change(inputs.after)),
        )
        job = CustomResourceWithStatus(
            f"{name}-job",
            "TrainJob",
            metadata=job_metadata(settings, inputs, namespace),
            spec=trainjob_spec(settings, names.job),
            opts=pulumi.ResourceOptions.merge(
                child,
                pulumi.ResourceOptions.merge(
                    replace_on_any_change((runtime, *inputs.after)),
                    # The controller snapshots the runtime at the first reconcile: a new runtime is a
                    # new run, so the TrainJob is replaced whenever its runtime is.
                    pulumi.ResourceOptions(replace_with=[runtime]),
                ),
            ),
            api_version=API_VERSION,
        )
        self.job_name = job.id.apply(lambda _: names.job)
        self.outcome = (
            run_outcome(
                job,
                "TrainJob",
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
