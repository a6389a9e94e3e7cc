"""The platform's NetworkPolicy check: `pulumi up` proves that the cluster enforces NetworkPolicy.

Every stack isolates its pods with NetworkPolicies, and a cluster without a policy engine accepts them
and enforces none (EKS's VPC CNI unless told, AKS without a network policy, GKE Standard without
Dataplane V2): nothing fails, and pods reach what the policies close, the cloud's metadata endpoint
among them. So a platform (or 'all') stack runs, in the smoke check's namespace (whose policy
ddp-mnist-smoke denies every pod all traffic but DNS), an Indexed Job of two pods:

- index 0, the target, answers `ok` on two ports: OPEN_PORT, which the policies NETWORK_OPEN open from
  index 1 to index 0, and CLOSED_PORT, which nothing opens (the namespace's default deny closes it);
- index 1, the probe, reaches the target by its DNS name (`network-smoke-0.network-smoke`, the
  headless Service NETWORK_JOB) until OPEN_PORT answers (the allowed path works and the target is up),
  waits SETTLE_SECONDS, then tries CLOSED_PORT, which must not answer, then OPEN_PORT again (the target
  was still up, so the closed port's silence was the policy's), and tells the target it is done.

A closed port that answers exits EXIT_NOT_ENFORCED, an open port that never answers EXIT_NO_OPEN_PATH;
the Job's podFailurePolicy fails the Job at once on either, and the Job controller's condition message
carries the exit code ("Container probe for pod NS/NAME failed with exit code 3 matching FailJob rule
at index 0": kubernetes v1.33.13 `pkg/controller/job/pod_failure_policy.go`, matchPodFailurePolicy).
`network_outcome` turns it into one line naming the cloud's switch. The pods need busybox's `nc` in
operatorInitContainerImage (alpine's busybox has it; `busybox nc` is called by that name so an image
with busybox but without its links works too). On KWOK's fake nodes (the local cluster tier) the pods
run nothing and a stage ends them: there the Job's completion shows nothing about enforcement.
"""

from __future__ import annotations

import re
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.program.common.meta import labels
from infra.program.common.outcome import status_field
from infra.program.job.jobs import wait_annotations
from infra.program.settings import SMOKE_NAMESPACE, Settings

NETWORK_JOB = "network-smoke"  # the Job, and the headless Service that names its pods
NETWORK_OPEN = "ddp-mnist-smoke-network-open"  # the policies opening OPEN_PORT from the probe to the target
OPEN_PORT = 8080
CLOSED_PORT = 8081
OPEN_TRIES = 45  # the probe tries OPEN_PORT every 2 s (plus up to 3 s a try): 90 to 225 s
DONE_TRIES = 30  # the probe tells the target it is done, once a second until a connection takes it
SETTLE_SECONDS = 5  # an engine writes a new pod's rules after its event: let them all land
DEADLINE_SECONDS = 300  # activeDeadlineSeconds: pods that never start (or never end) fail the Job
WAIT_SECONDS = 420  # pulumi.com/timeoutSeconds: longer than the deadline
TTL_SECONDS = 600
EXIT_NOT_ENFORCED = 3
EXIT_NO_OPEN_PATH = 4
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"  # on an Indexed Job's pods (GA in 1.32)
JOB_LABEL = "batch.kubernetes.io/job-name"
CONTAINER = "probe"

# How to turn enforcement on, by the cloud a stack's storage preset names (docs/CLOUDS.md).
SWITCHES = {
    "aws-efs": 'on EKS, the vpc-cni add-on (v1.14 or later) with enableNetworkPolicy "true" in its '
    "configuration values, or another engine such as Calico",
    "gke-filestore": "on GKE Standard, Dataplane V2 at creation (--enable-dataplane-v2) or "
    "--update-addons=NetworkPolicy=ENABLED then --enable-network-policy",
    "azure-files": "on AKS, a network policy chosen at creation (az aks create --network-policy cilium, "
    "azure or calico)",
}
ANY_CLOUD = "a NetworkPolicy engine in the cluster's network plugin (Calico, Cilium, or the cloud's own)"
CLOUDS_PAGE = "docs/CLOUDS.md#networkpolicy-must-be-enforced"


def target_address() -> str:
    """The target pod's DNS name from the probe's namespace: hostname.subdomain."""
    return f"{NETWORK_JOB}-0.{NETWORK_JOB}"


def script() -> str:
    """The one container's shell script; JOB_COMPLETION_INDEX (set by the Job controller on an Indexed
    Job's pods) picks the target (0) or the probe (1). No file is written: the root is read-only."""
    host = target_address()
    nc = "busybox nc"
    return (
        f'if [ "$JOB_COMPLETION_INDEX" = 0 ]; then '
        # The target: CLOSED_PORT in the background, OPEN_PORT until the probe says it is done.
        f"( while :; do echo ok | {nc} -l -p {CLOSED_PORT} >/dev/null 2>&1 || sleep 1; done ) & closed=$!; "
        f"while :; do msg=$(echo ok | {nc} -l -p {OPEN_PORT} 2>/dev/null) || sleep 1; "
        f'[ "$msg" = done ] && break; done; kill $closed 2>/dev/null; echo target done; exit 0; '
        "fi; "
        # The probe.
        f'reach() {{ [ "$({nc} -w 3 {host} "$1" </dev/null 2>/dev/null)" = ok ]; }}; '
        # The target listens again after each connection: a `done` sent before it does is refused, so
        # it is sent until a connection takes it.
        f"done_() {{ n=0; until echo done | {nc} -w 3 {host} {OPEN_PORT} >/dev/null 2>&1; do "
        f"n=$((n+1)); [ $n -ge {DONE_TRIES} ] && return 1; sleep 1; done; }}; "
        f"i=0; until reach {OPEN_PORT}; do i=$((i+1)); if [ $i -ge {OPEN_TRIES} ]; then "
        f"echo port {OPEN_PORT} of {host} never answered, though a NetworkPolicy opens it; "
        f"exit {EXIT_NO_OPEN_PATH}; fi; sleep 2; done; "
        f"echo port {OPEN_PORT} answered, as its NetworkPolicy allows; sleep {SETTLE_SECONDS}; "
        f"if reach {CLOSED_PORT}; then echo port {CLOSED_PORT} answered, though the default deny closes it: "
        f"NetworkPolicy is not enforced; done_; exit {EXIT_NOT_ENFORCED}; fi; "
        f"echo port {CLOSED_PORT} did not answer, as the default deny requires; "
        f"if ! reach {OPEN_PORT}; then echo port {OPEN_PORT} stopped answering; done_; "
        f"exit {EXIT_NO_OPEN_PATH}; fi; done_; echo NetworkPolicy is enforced"
    )


def job_spec(pod: dict[str, Any]) -> dict[str, Any]:
    """Two indexed pods, never retried; an exit of the probe's own codes fails the Job at once."""
    template = {**pod, "spec": {**pod["spec"], "restartPolicy": "Never", "subdomain": NETWORK_JOB}}
    return {
        "completionMode": "Indexed",
        "completions": 2,
        "parallelism": 2,
        "backoffLimit": 0,
        "activeDeadlineSeconds": DEADLINE_SECONDS,
        "ttlSecondsAfterFinished": TTL_SECONDS,
        "podFailurePolicy": {
            "rules": [
                {
                    "action": "FailJob",
                    "onExitCodes": {
                        "containerName": CONTAINER,
                        "operator": "In",
                        "values": [EXIT_NOT_ENFORCED, EXIT_NO_OPEN_PATH],
                    },
                }
            ]
        },
        "template": template,
    }


def _index(number: int) -> k8s.meta.v1.LabelSelectorArgs:
    return k8s.meta.v1.LabelSelectorArgs(match_labels={JOB_LABEL: NETWORK_JOB, INDEX_LABEL: str(number)})


def _open_port() -> list[k8s.networking.v1.NetworkPolicyPortArgs]:
    return [k8s.networking.v1.NetworkPolicyPortArgs(port=OPEN_PORT, protocol="TCP")]


def network_outcome(status: Any, settings: Settings) -> str:
    """The check's final condition; raises (failing `pulumi up` with one line) unless it completed."""
    conditions = [c for c in status_field(status, "conditions") or [] if status_field(c, "status") == "True"]
    if "Complete" in {status_field(c, "type") for c in conditions}:
        return "Complete"
    failed = next((c for c in conditions if status_field(c, "type") in ("FailureTarget", "Failed")), None)
    if failed is None:
        return "unknown (not awaited)"
    reason, message = str(status_field(failed, "reason") or ""), str(status_field(failed, "message") or "")
    code = re.search(r"failed with exit code (\d+)", message)
    exit_code = int(code.group(1)) if code else None
    if exit_code == EXIT_NOT_ENFORCED:
        switch = SWITCHES.get(settings.storage_provider, ANY_CLOUD)
        cause = (
            f"NetworkPolicy is not enforced: a pod reached port {CLOSED_PORT} of another pod though the "
            f"namespace's default deny closes it, so no policy of any stack isolates anything; turn "
            f"enforcement on ({switch}; {CLOUDS_PAGE})"
        )
    elif exit_code == EXIT_NO_OPEN_PATH:
        cause = (
            f"a pod never reached port {OPEN_PORT} of another pod that the policy {NETWORK_OPEN} opens: "
            f"the policy engine blocks what a policy allows, or {target_address()} does not resolve "
            "(cluster DNS)"
        )
    elif reason == "DeadlineExceeded":
        cause = (
            f"the pods did not finish within {DEADLINE_SECONDS}s: not started (the image "
            f"{settings.operator_init_container_image} is not pullable, or no node fits them), or "
            "it has no `busybox nc` (operatorInitContainerImage; alpine's has)"
        )
    else:
        cause = f"{reason}: {message}"
    logs = f"kubectl -n {SMOKE_NAMESPACE} logs -l {JOB_LABEL}={NETWORK_JOB} --prefix"
    raise pulumi.RunError(f"smoke check Job {SMOKE_NAMESPACE}/{NETWORK_JOB} failed: {cause}; see `{logs}`")


def network_check(
    name: str,
    settings: Settings,
    namespace: pulumi.Input[str],
    pod: dict[str, Any],
    opts: pulumi.ResourceOptions,
) -> pulumi.Output[str]:
    """The headless Service, the two policies opening OPEN_PORT, and the Job after them; its outcome."""
    component = pod["metadata"]["labels"]["app.kubernetes.io/component"]
    meta = labels(settings, component)
    service = k8s.core.v1.Service(
        f"{name}-network-check-service",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=NETWORK_JOB, namespace=namespace, labels=meta),
        spec=k8s.core.v1.ServiceSpecArgs(
            cluster_ip="None",
            publish_not_ready_addresses=True,
            selector={JOB_LABEL: NETWORK_JOB},
            ports=[k8s.core.v1.ServicePortArgs(name="open", port=OPEN_PORT, protocol="TCP")],
        ),
        opts=opts,
    )
    net = k8s.networking.v1
    into = net.NetworkPolicy(
        f"{name}-network-check-open-in",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=f"{NETWORK_OPEN}-in", namespace=namespace, labels=meta),
        spec=net.NetworkPolicySpecArgs(
            pod_selector=_index(0),
            policy_types=["Ingress"],
            ingress=[
                net.NetworkPolicyIngressRuleArgs(
                    from_=[net.NetworkPolicyPeerArgs(pod_selector=_index(1))], ports=_open_port()
                )
            ],
        ),
        opts=opts,
    )
    out = net.NetworkPolicy(
        f"{name}-network-check-open-out",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=f"{NETWORK_OPEN}-out", namespace=namespace, labels=meta),
        spec=net.NetworkPolicySpecArgs(
            pod_selector=_index(1),
            policy_types=["Egress"],
            egress=[
                net.NetworkPolicyEgressRuleArgs(
                    to=[net.NetworkPolicyPeerArgs(pod_selector=_index(0))], ports=_open_port()
                )
            ],
        ),
        opts=opts,
    )
    job = k8s.batch.v1.Job(
        f"{name}-network-check",
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=NETWORK_JOB,
            namespace=namespace,
            labels=meta,
            annotations=wait_annotations("Job", WAIT_SECONDS),
        ),
        spec=job_spec(pod),
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[service, into, out])),
    )
    status: pulumi.Output[Any] = getattr(job, "status")  # noqa: B009 (resource outputs are attributes)
    return status.apply(lambda s: network_outcome(s, settings))
