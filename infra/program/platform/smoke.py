"""The platform's post-install smoke check: `pulumi up` proves the installed operators run a job.

The training operator v1 reads its Worker init container template lazily, at the first Worker pod, and
falls back to upstream's built-in template (no securityContext) when the file is missing (kubeflow/trainer
v1.9.4 `pkg/controller.v1/pytorch/initcontainer.go`, `getInitContainerTemplateOrDefault`). Without a
check, a broken install shows up when a team's first multi-node job is refused. So a stack that installs
the operator runs a tiny PyTorchJob (a Master and one Worker) in a namespace of its own enforcing Pod
Security "restricted", waits for it (`pulumi.com/waitFor`, as the training job does) and fails the
deployment with one line naming the cause. The same for Kubeflow Trainer v2: a tiny TrainJob.

How the PyTorchJob proves the Worker's init container (the thing under test): the Master waits until
the Worker's own Service name resolves, which happens only once the Worker pod has started its main
container, i.e. after the operator's init container (waiting for the Master's name) has run to
success. Both run the operator's init image (`operatorInitContainerImage`), so a mirror that does not
serve it fails here too.

What the final status says, by cause (training operator v1.9.4):
- `pkg/controller.v1/common/pod.go` (`createNewPod`): a pod the API server refuses makes `ReconcilePods`
  return the error (event `FailedCreatePod`), so the reconcile ends before `UpdateJobStatus`: no
  `Running` condition and no replica status are ever written. The Master then gives up waiting and
  exits 1, and `pkg/controller.v1/common/job.go` (`ReconcileJobs`, backoff check before the pods are
  reconciled) fails the job: "...has reached the specified backoff limit" (backoffLimit 0);
- `pkg/controller.v1/pytorch/pytorchjob_controller.go` (`UpdateJobStatus`): `Running` once the Master
  runs; `Succeeded` when the Master has succeeded;
- pods that never start (image not pullable, no node fits) count as neither active nor failed; the
  start time is set, so `runPolicy.activeDeadlineSeconds` fails the job: "...was active longer than
  specified deadline" (`PastActiveDeadline`), with no `Running` condition.
`smoke_outcome` turns these into one line each. Cleanup: `cleanPodPolicy: All` deletes the pods when the
job ends, `ttlSecondsAfterFinished` the job itself (`CleanupJob`); the namespace belongs to the stack.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.program.common.isolation import dns_egress
from infra.program.common.meta import labels, pod_security_labels
from infra.program.common.outcome import status_field
from infra.program.job.jobs import CustomResourceWithStatus, wait_annotations
from infra.program.platform.device_plugin import (
    GPU_JOB_NAME,
    GPU_WAIT_SECONDS,
    gpu_job_spec,
    gpu_smoke_outcome,
)
from infra.program.platform.network_check import CONTAINER, network_check
from infra.program.platform.network_check import script as network_script
from infra.program.platform.smoke_pod import SMOKE_COMPONENT, smoke_pod
from infra.program.settings import PROJECT, SMOKE_NAMESPACE, Settings

PYTORCHJOB_NAME = "operator-smoke"
TRAINJOB_NAME = "trainer-smoke"
SMOKE_POLICY = "ddp-mnist-smoke"  # its NetworkPolicy: DNS out, nothing else
MASTER_TRIES = 90  # the Master looks the Worker up every 2 s for at least 3 minutes
DEADLINE_SECONDS = 420  # runPolicy.activeDeadlineSeconds: pods that never start fail the job
WAIT_SECONDS = 600  # pulumi.com/timeoutSeconds: longer than both
TTL_SECONDS = 600  # the finished job is deleted after this (its pods at once: cleanPodPolicy All)

# The training operator's condition messages (v1.9.4 pkg/controller.v1/common/job.go).
BACKOFF_MESSAGE = "reached the specified backoff limit"
DEADLINE_MESSAGE = "active longer than specified deadline"


def master_script(job: str) -> str:
    """Succeeds once the Worker's Service name resolves (its pod is past the init container); `getent
    hosts`, like the Worker's init container, for the reason given in `training_operator.py`."""
    return (
        f"for i in $(seq {MASTER_TRIES}); do if getent hosts {job}-worker-0 >/dev/null; then "
        "echo worker started; exit 0; fi; sleep 2; done; echo worker never started; exit 1"
    )


WORKER_SCRIPT = "echo worker started; sleep 120"  # stays up until the Master has seen it


def pytorchjob_spec(settings: Settings, job: str) -> dict[str, Any]:
    """A Master and one Worker, never restarted, cleaned up when done."""

    def replica(script: str) -> dict[str, Any]:
        # The operator finds its container by the name `pytorch` (env, ports, exit code).
        return {"replicas": 1, "restartPolicy": "Never", "template": smoke_pod(settings, "pytorch", script)}

    return {
        "nprocPerNode": "1",
        "runPolicy": {
            "backoffLimit": 0,
            "cleanPodPolicy": "All",
            "activeDeadlineSeconds": DEADLINE_SECONDS,
            "ttlSecondsAfterFinished": TTL_SECONDS,
        },
        "pytorchReplicaSpecs": {"Master": replica(master_script(job)), "Worker": replica(WORKER_SCRIPT)},
    }


def _conditions(status: Any) -> list[Any]:
    return [c for c in status_field(status, "conditions") or [] if status_field(c, "status") == "True"]


def smoke_outcome(status: Any, kind: str, name: str, settings: Settings) -> str:
    """The smoke job's final condition; raises (failing `pulumi up` with one line naming the cause) unless
    it succeeded."""
    done = {"PyTorchJob": "Succeeded", "TrainJob": "Complete"}[kind]
    conditions = _conditions(status)
    types = {status_field(c, "type") for c in conditions}
    if done in types:
        return done
    ns = SMOKE_NAMESPACE
    events = f"kubectl -n {ns} get events --field-selector involvedObject.name={name}"
    image = settings.operator_init_container_image
    failed = next((c for c in conditions if status_field(c, "type") == "Failed"), None)
    if failed is None:
        # Only under a preview or mocks: the wait ends on Succeeded or Failed, or fails `pulumi up`
        # itself at its timeout.
        return "unknown (not awaited)"
    message = str(status_field(failed, "message") or "")
    reason = str(status_field(failed, "reason") or "")
    prefix = f"smoke check {kind} {ns}/{name} failed"
    if kind == "PyTorchJob":
        ran = "Running" in {status_field(c, "type") for c in status_field(status, "conditions") or []}
        if DEADLINE_MESSAGE in message and not ran:
            cause = (
                f"no pod started within {DEADLINE_SECONDS}s: the image {image} is not pullable from the "
                "nodes (operatorInitContainerImage; a mirror must serve it) or no node fits the pods"
            )
        elif BACKOFF_MESSAGE in message and not ran:
            cause = (
                "the Worker pod was refused by admission (the Master, the same pod, was not): its "
                "operator-added init container is not Pod Security 'restricted', i.e. the operator does "
                "not read the restricted template (its /etc/config/initContainer.yaml is not mounted, "
                "and upstream falls back to its built-in one silently)"
            )
        elif ran:
            cause = (
                "the Master ran but never saw the Worker start: the Worker's init container (which "
                f"waits for the Master's name {name}-master-0) did not finish, or the Worker's name "
                f"{name}-worker-0 does not resolve (cluster DNS)"
            )
        else:
            cause = f"{reason}: {message}"
    elif "DeadlineExceeded" in reason:
        cause = (
            f"no node finished within {DEADLINE_SECONDS}s: pods refused by admission, the image {image} "
            "not pullable, or the JobSet controller not running"
        )
    else:
        cause = f"{reason}: {message}"
    raise pulumi.RunError(f"{prefix}: {cause}; see `{events}`")


def _gate(job: CustomResourceWithStatus, kind: str, name: str, settings: Settings) -> pulumi.Output[str]:
    status: pulumi.Output[Any] = getattr(job, "status")  # noqa: B009 (resource outputs are attributes)
    return status.apply(lambda s: smoke_outcome(s, kind, name, settings))


def _metadata(settings: Settings, name: str, namespace: pulumi.Input[str], kind: str) -> Any:
    return k8s.meta.v1.ObjectMetaArgs(
        name=name,
        namespace=namespace,
        labels=labels(settings, SMOKE_COMPONENT),
        annotations=wait_annotations(kind, WAIT_SECONDS),
    )


def trainjob_runtime_spec(settings: Settings) -> dict[str, Any]:
    """A TrainingRuntime of two `node` pods that start and exit 0, under the torch policy the project's
    TrainJobs use (the torch plugin injects its env; the pods ignore it)."""
    template = smoke_pod(settings, "node", 'echo "node ${PET_NODE_RANK:-?} started"')
    template["spec"]["restartPolicy"] = "Never"
    return {
        "mlPolicy": {"numNodes": 2, "torch": {}},
        "template": {
            "metadata": {"labels": labels(settings, SMOKE_COMPONENT)},
            "spec": {
                "ttlSecondsAfterFinished": TTL_SECONDS,
                "replicatedJobs": [
                    {
                        "name": "node",
                        "replicas": 1,
                        "template": {
                            "metadata": {
                                "labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
                            },
                            "spec": {"backoffLimit": 0, "template": template},
                        },
                    }
                ],
            },
        },
    }


class SmokeCheck(pulumi.ComponentResource):
    """The smoke namespace (Pod Security 'restricted') and, after the operators in `after`, a tiny
    PyTorchJob and/or TrainJob that `pulumi up` waits for (and with `network`, the NetworkPolicy check,
    infra/program/platform/network_check.py); `outcomes` fail the deployment unless they
    succeeded (export them as stack outputs so they are awaited)."""

    def __init__(
        self,
        name: str,
        settings: Settings,
        operator: pulumi.Resource | None,
        trainer: pulumi.Resource | None,
        opts: pulumi.ResourceOptions | None = None,
        gpu_after: tuple[pulumi.Resource, ...] | None = None,
        network: bool = False,
    ) -> None:
        """Registers the platform's smoke checks (the namespace and its policies, the PyTorchJob, the
        TrainJob,
        the GPU and NetworkPolicy checks) in the order they depend on each other, each behind its setting: one
        list of steps."""
        super().__init__(f"{PROJECT}:platform:SmokeCheck", name, {}, opts)
        child = pulumi.ResourceOptions(parent=self)
        enforce = pod_security_labels("restricted")
        namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=SMOKE_NAMESPACE, labels={**labels(settings, SMOKE_COMPONENT), **enforce}
            ),
            opts=child,
        )
        ns = namespace.metadata.name
        # Its pods only resolve names (the Worker's init container, the Master's check) and start: DNS
        # out, nothing else in or out, in place before any of them.
        isolated = k8s.networking.v1.NetworkPolicy(
            f"{name}-network",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=SMOKE_POLICY, namespace=ns, labels=labels(settings, SMOKE_COMPONENT)
            ),
            spec=k8s.networking.v1.NetworkPolicySpecArgs(
                pod_selector=k8s.meta.v1.LabelSelectorArgs(),
                policy_types=["Ingress", "Egress"],
                egress=[dns_egress(settings)],
            ),
            opts=child,
        )
        self.outcomes: dict[str, pulumi.Output[str]] = {}
        # Any change of a smoke job's spec (a new init image) replaces it: the check runs again.
        replace = pulumi.ResourceOptions(replace_on_changes=["spec"], delete_before_replace=True)
        if operator is not None:
            job = CustomResourceWithStatus(
                f"{name}-pytorchjob",
                "PyTorchJob",
                metadata=_metadata(settings, PYTORCHJOB_NAME, ns, "PyTorchJob"),
                spec=pytorchjob_spec(settings, PYTORCHJOB_NAME),
                opts=pulumi.ResourceOptions.merge(
                    child,
                    pulumi.ResourceOptions.merge(
                        replace, pulumi.ResourceOptions(depends_on=[operator, isolated])
                    ),
                ),
            )
            self.outcomes["operatorSmokeCheck"] = _gate(job, "PyTorchJob", PYTORCHJOB_NAME, settings)
        if trainer is not None:
            runtime = k8s.apiextensions.CustomResource(
                f"{name}-runtime",
                api_version="trainer.kubeflow.org/v1alpha1",
                kind="TrainingRuntime",
                metadata=k8s.meta.v1.ObjectMetaArgs(
                    name=TRAINJOB_NAME, namespace=ns, labels=labels(settings, SMOKE_COMPONENT)
                ),
                spec=trainjob_runtime_spec(settings),
                opts=pulumi.ResourceOptions.merge(
                    child,
                    pulumi.ResourceOptions.merge(
                        replace, pulumi.ResourceOptions(depends_on=[trainer, isolated])
                    ),
                ),
            )
            trainjob = CustomResourceWithStatus(
                f"{name}-trainjob",
                "TrainJob",
                metadata=_metadata(settings, TRAINJOB_NAME, ns, "TrainJob"),
                spec={
                    "runtimeRef": {
                        "apiGroup": "trainer.kubeflow.org",
                        "kind": "TrainingRuntime",
                        "name": TRAINJOB_NAME,
                    },
                    "trainer": {"numNodes": 2, "numProcPerNode": 1},
                    "activeDeadlineSeconds": DEADLINE_SECONDS,
                },
                opts=pulumi.ResourceOptions.merge(
                    child,
                    pulumi.ResourceOptions.merge(
                        replace,
                        pulumi.ResourceOptions(
                            depends_on=[trainer, runtime, isolated], replace_with=[runtime]
                        ),
                    ),
                ),
                api_version="trainer.kubeflow.org/v1alpha1",
            )
            self.outcomes["trainerSmokeCheck"] = _gate(trainjob, "TrainJob", TRAINJOB_NAME, settings)
        if network:
            probe = smoke_pod(settings, CONTAINER, network_script())
            self.outcomes["networkPolicySmokeCheck"] = network_check(
                name,
                settings,
                ns,
                probe,
                pulumi.ResourceOptions.merge(
                    child,
                    pulumi.ResourceOptions.merge(replace, pulumi.ResourceOptions(depends_on=[isolated])),
                ),
            )
        if gpu_after is not None:
            gpu = k8s.batch.v1.Job(
                f"{name}-gpu",
                metadata=k8s.meta.v1.ObjectMetaArgs(
                    name=GPU_JOB_NAME,
                    namespace=ns,
                    labels=labels(settings, SMOKE_COMPONENT),
                    annotations=wait_annotations("Job", GPU_WAIT_SECONDS),
                ),
                spec=gpu_job_spec(settings),
                opts=pulumi.ResourceOptions.merge(
                    child,
                    pulumi.ResourceOptions.merge(
                        replace, pulumi.ResourceOptions(depends_on=[*gpu_after, isolated])
                    ),
                ),
            )
            status: pulumi.Output[Any] = getattr(gpu, "status")  # noqa: B009 (resource outputs are attributes)
            self.outcomes["gpuSmokeCheck"] = status.apply(lambda s: gpu_smoke_outcome(s, settings))
        self.register_outputs({})
