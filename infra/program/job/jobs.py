"""The training job: a Kubeflow PyTorchJob, or an Indexed Job with its headless Service."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

import pulumi
import pulumi_kubernetes as k8s

from infra.program.common.meta import (
    JOB_LABEL,
    PERMANENT_EXIT_CODES,
    STOPPED_WITH_PEERS_EXIT_CODES,
    JobNames,
    labels,
)
from infra.program.common.outcome import DONE_CONDITION, FAILED_CONDITIONS, job_outcome
from infra.program.job.podspec import pod_template
from infra.program.settings import Settings

if TYPE_CHECKING:
    from infra.program.job.runwatch import RunWatch


@dataclass(frozen=True)
class JobInputs:
    """What the job needs from the other components."""

    names: JobNames
    data_claim: pulumi.Input[str]
    checkpoint_claim: pulumi.Input[str]
    secret_name: pulumi.Input[str] | None
    # The job's own ServiceAccount (None: the namespace's default account).
    service_account: pulumi.Input[str] | None = None
    # Resources that must exist before the job object (the operator's CRD and webhook, the job's
    # NetworkPolicy). Passed to the job resource itself: a component's depends_on does not hold back
    # the children it registers.
    after: tuple[pulumi.Resource, ...] = ()
    # How `pulumi up` waits for the run (None: it reads the outcome from the job's recorded status, as
    # under mocks; see run_outcome).
    watch: RunWatch | None = None


def wait_annotations(kind: str, timeout_seconds: int) -> dict[str, str]:
    """Make `pulumi up` wait until the job has ended, either way, for at most `timeout_seconds`.

    pulumi-kubernetes's `pulumi.com/waitFor` can only end a wait successfully (a Failed condition never
    fails it; it would run to the timeout). So the wait ends on whichever of the success condition
    and a failure (FAILED_CONDITIONS) turns True first (one JSONPath filter; a JSON list of expressions
    would mean all of them), and `failure_gate` then fails `pulumi up` when it was a failure.
    """
    types = " || ".join(f"@.type=='{t}'" for t in (DONE_CONDITION[kind], *FAILED_CONDITIONS[kind]))
    return {
        "pulumi.com/waitFor": f"jsonpath={{.status.conditions[?(@.status=='True' && ({types}))].type}}",
        "pulumi.com/timeoutSeconds": str(timeout_seconds),
    }


# Satisfied as soon as the object exists: the provider waits for nothing after the create.
CREATED = "jsonpath={.metadata.uid}"


def no_wait_annotations() -> dict[str, str]:
    """Create the job without waiting for its run, but still wait for its deletion.

    pulumi-kubernetes (`provider/pkg/metadata/overrides.go`, DeletedCondition and
    allowsSkipAwaitWithDelete) skips the deletion wait of a batch/v1 Job annotated
    `pulumi.com/skipAwait`, so a delete-before-replace would POST the new Job while the old one is
    still being deleted (foreground) and get 409 AlreadyExists. A `pulumi.com/waitFor` replaces the
    create/update wait only (`ReadyCondition`; `provider/pkg/await/await.go` Creation/Update use the
    built-in Job awaiter only when no waitFor is set) and leaves the deletion wait in place. This one
    is satisfied by the first observation of the created object. Used for every job kind, so they
    all behave alike. (Read at pulumi-kubernetes v4.32.0; see docs/ENGINE.md.)
    """
    return {"pulumi.com/waitFor": CREATED}


def logs_command(namespace: str, job: str, pods: int, follow: bool = True) -> str:
    """The kubectl command that prints the logs of every pod of a job (`-f`: and keeps following)."""
    flags = "-f " if follow else ""
    return f"kubectl -n {namespace} logs {flags}-l {JOB_LABEL}={job} --prefix --max-log-requests={pods}"


def training_logs(settings: Settings, job: str, follow: bool = True) -> str:
    """`logs_command` for the training job's pods (every node's, and one more: the PyTorchJob Master's
    init or a replaced pod)."""
    return logs_command(settings.namespace, job, settings.job_nodes + 1, follow)


def failure_gate(job: pulumi.Resource, kind: str, name: str, logs: str) -> pulumi.Output[str]:
    """The job's outcome after Pulumi's wait; a Failed job fails the deployment (export it as a stack
    output so it is awaited, and hold back what must run after it with `after_success`)."""
    status: pulumi.Output[Any] = getattr(job, "status")  # noqa: B009 (resource outputs are attributes)
    return status.apply(lambda s: job_outcome(s, kind, name, logs))


def run_outcome(
    job: pulumi.Resource,
    kind: str,
    name: str,
    logs: str,
    settings: Settings,
    watch: RunWatch | None,
    pods: int = 1,
    namespace: str | None = None,
    timeout_seconds: float | None = None,
) -> pulumi.Output[str]:
    """The run's outcome: awaited by the program's watch (`infra/program/job/runwatch.py`: it fails fast on
    a placement that cannot happen; `pods`, how many the job runs at once), or, without one, read from
    the job's recorded status (`failure_gate`). Export it, and gate what must follow a successful run
    with `after_success`. `namespace` and `timeout_seconds` default to the job stack's (`namespace`,
    `jobWaitTimeoutSeconds`)."""
    if watch is None:
        return failure_gate(job, kind, name, logs)
    from infra.program.job.runwatch import Target

    where = namespace or settings.namespace
    target = Target(kind=kind, name=name, namespace=where, logs=logs, pods=pods)
    return watch.outcome(job, target, timeout_seconds or settings.job_wait_timeout_seconds)


T = TypeVar("T")


def after_success(value: pulumi.Output[T], outcome: pulumi.Output[str]) -> pulumi.Output[T]:
    """`value`, available only once `outcome` (a `failure_gate`) has resolved without raising.

    Pass it as an input of whatever must run only after a job succeeded: when the job failed this
    Output fails too, and the Python SDK never sends the RegisterResource of a resource whose inputs
    failed to resolve (`pulumi/runtime/resource.py` prepare_resource serializes every input first),
    so the dependent resource is never created; `pulumi up` stops with the job's one-line failure.
    While previewing, the outcome is unknown and so is `value`. (Python SDK 3.272.0.)
    """
    both: pulumi.Output[list[Any]] = pulumi.Output.all(value, outcome)
    return both.apply(lambda resolved: cast(T, resolved[0]))


def pod_failure_policy(container: str, training: bool = False) -> k8s.batch.v1.PodFailurePolicyArgs:
    """A Job's podFailurePolicy for a container of ours: the trainer's retry rule (trainer/errors.py).

    `DisruptionTarget` is the condition the API server's eviction, the scheduler's preemption, the
    taint manager, pod GC and the kubelet's graceful node shutdown (a spot node's termination notice)
    add to the pod they end. Only that pod carries it: its peers exit without it, 201 once the ranks
    agreed to stop (see `training` below) or 200 on a rank lost without warning (counted as any
    failure).

    Rules are matched in order and the first match wins (Kubernetes `pkg/controller/job/
    pod_failure_policy.go`, matchPodFailurePolicy): evictions and preemptions (`DisruptionTarget`)
    are not the pod's fault and are not counted; an exit code of 1-127 (a bug, bad input: a retry
    fails the same way) fails the Job at once; anything else (128 and above: a signal, a lost peer,
    an unreachable S3 endpoint or master, a failed export) matches no rule and is counted against
    the backoff limit, i.e. retried. The codes are an explicit list: the API has no range operator
    (`In`, at most 255 values, ordered).

    A training Job's (`training`) also ignores exit code 201: a pod whose ranks stopped with the job,
    at a checkpointed step, because another pod was preempted (`trainer/errors.py`). The preempted
    pod is spared by its DisruptionTarget condition, its peers by this code, so a preemption counts
    against no retry budget; `activeDeadlineSeconds` bounds them all.
    """
    batch = k8s.batch.v1
    disrupted = batch.PodFailurePolicyOnPodConditionsPatternArgs(type="DisruptionTarget", status="True")
    permanent = batch.PodFailurePolicyOnExitCodesRequirementArgs(
        container_name=container, operator="In", values=list(PERMANENT_EXIT_CODES)
    )
    stopped = batch.PodFailurePolicyOnExitCodesRequirementArgs(
        container_name=container, operator="In", values=list(STOPPED_WITH_PEERS_EXIT_CODES)
    )
    return batch.PodFailurePolicyArgs(
        rules=[
            batch.PodFailurePolicyRuleArgs(action="Ignore", on_pod_conditions=[disrupted]),
            *([batch.PodFailurePolicyRuleArgs(action="Ignore", on_exit_codes=stopped)] if training else []),
            batch.PodFailurePolicyRuleArgs(action="FailJob", on_exit_codes=permanent),
        ]
    )


class CustomResourceWithStatus(pulumi.CustomResource):
    """A custom resource (a Kubeflow job, an InferenceService) with a readable `status` output (the
    SDK's CustomResource keeps only apiVersion, kind and metadata), so a gate can read its conditions
    after the wait."""

    status: pulumi.Output[Any]

    def __init__(
        self,
        name: str,
        kind: str,
        metadata: k8s.meta.v1.ObjectMetaArgs,
        spec: dict[str, Any],
        opts: pulumi.ResourceOptions,
        api_version: str = "kubeflow.org/v1",
    ) -> None:
        from pulumi_kubernetes import _utilities

        props = {
            "apiVersion": api_version,
            "kind": kind,
            "metadata": metadata,
            "spec": spec,
            "status": None,
        }
        version = pulumi.ResourceOptions(version=_utilities.get_version())
        super().__init__(
            f"kubernetes:{api_version}:{kind}", name, props, pulumi.ResourceOptions.merge(opts, version)
        )


QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def queue_label(settings: Settings) -> dict[str, str]:
    """The Kueue queue label every workload of the stack carries when jobQueueName is set."""
    return {QUEUE_LABEL: settings.job_queue_name} if settings.job_queue_name else {}


def job_metadata(
    settings: Settings, inputs: JobInputs, namespace: pulumi.Input[str]
) -> k8s.meta.v1.ObjectMetaArgs:
    """Name, labels (Kueue queue) and the provider's wait: none beyond the create, with jobWait too (the
    program waits for the run, `run_outcome`), while a deletion stays awaited (`no_wait_annotations`)."""
    job_labels = {**labels(settings, "trainer"), **queue_label(settings)}
    return k8s.meta.v1.ObjectMetaArgs(
        name=inputs.names.job, namespace=namespace, labels=job_labels, annotations=no_wait_annotations()
    )


def replace_on_any_change(after: tuple[pulumi.Resource, ...]) -> pulumi.ResourceOptions:
    """Any change of the job's spec replaces it, deleting the old one first (the name is fixed).

    pulumi-kubernetes patches a custom resource in place unless its name or namespace changes, and the
    training operator ignores spec changes of a running or finished job (PyTorchJob conditions carry no
    observedGeneration, so the old Succeeded would satisfy waitFor at once); a Job's template is
    immutable. A new spec is a new run: `pulumi preview` shows a replace, not an update.
    """
    return pulumi.ResourceOptions(
        depends_on=list(after), replace_on_changes=["spec"], delete_before_replace=True
    )


def job_template(
    settings: Settings,
    inputs: JobInputs,
    extra_env: Sequence[k8s.core.v1.EnvVarArgs] = (),
    subdomain: str | None = None,
    restart_policy: str | None = None,
) -> k8s.core.v1.PodTemplateSpecArgs:
    return pod_template(
        settings,
        inputs.names,
        data_claim=inputs.data_claim,
        checkpoint_claim=inputs.checkpoint_claim,
        secret_name=inputs.secret_name,
        service_account=inputs.service_account,
        extra_env=extra_env,
        subdomain=subdomain,
        restart_policy=restart_policy,
    )
