"""Serving the trained model: a KServe InferenceService, or a plain Deployment and Service.

Both run the trainer image's server (`python -m trainer.serve`) on the model of the run `jobRunId` names,
from the run's export on S3/MinIO (credentials only through the stack's Secret) or from its checkpoint
directory on the checkpoint PVC (mounted read-only). The stack registers these objects only after the
training job succeeded: every one of them depends on the job through `depends_on` given as an Output
of the job's outcome (`infra.program.job.jobs.after_success`). The Python SDK awaits that Output before it
registers a resource and fails the registration when the outcome failed (`pulumi/runtime/
_depends_on.py`), and the job becomes a dependency of the resource, not of any of its properties. That
difference matters: when a preview or an `up` replaces the job (delete before replace: its name is
fixed), the engine re-diffs every resource with a property that depends on the job, with those
properties unknown (pulumi `pkg/resource/deploy/step_generator.go`, calculateDependentReplacements),
and an unknown `metadata` (name, namespace) or Deployment `spec` (selector) forces a replacement
(pulumi-kubernetes `provider/pkg/provider/diff.go`). Gated through a property, as before, every
serving object showed as replaced by a job edit or a new run (found by the local cluster tier).

A new `jobRunId` changes the pod template only (the model URI and version); the Deployment's name
never contains the run id, so the change is a rolling update (maxUnavailable 0, maxSurge 1) in which
the old pods serve until a new one is Ready (`GET /v2/health/ready`).

KServe (v0.20.0) runs the predictor in the "Standard" deployment mode (`serving.kserve.io/deploymentMode:
Standard`, `pkg/constants/constants.go`: the older name "RawDeployment" is read as Standard): a
Deployment named `<isvc>-predictor` and a Service of that name on port 80, no Knative. The predictor is
a custom container; the InferenceService never sets `storageUri` (nor a `STORAGE_URI` env, which a
custom predictor reads as one, `pkg/apis/serving/v1beta1/predictor_custom.go` GetStorageUri): with one,
the controller annotates the pod (`internal.serving.kserve.io/storage-initializer-sourceuri`,
`pkg/controller/v1beta1/inferenceservice/components/predictor.go`) and KServe's pod webhook
(`pkg/webhook/admission/pod/storage_initializer_injector.go` InjectStorageInitializer) adds a
`storage-initializer` init container from its ConfigMap, with no securityContext and the image by tag,
which a namespace enforcing Pod Security "restricted" refuses. The server downloads the model itself and
verifies its SHA256SUMS. What KServe adds to the pod is modelled in `infra.review.effective.serving`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.program.common.isolation import dns_egress, egress_to, namespace_peer, s3_destination
from infra.program.common.meta import JobNames, labels
from infra.program.job.env import base_env, s3_ca_volumes, s3_env
from infra.program.job.podspec import container_security, model_export_uri, pod_security
from infra.program.settings import PROJECT, Settings, parse_quantity

core = k8s.core.v1
net = k8s.networking.v1
meta = k8s.meta.v1

SERVE_LABEL = f"{PROJECT}.io/serve"
MODEL_NAME = "mnist"
PORT_NAME = "http"
KSERVE_CONTAINER = "kserve-container"  # KServe's InferenceServiceContainerName, v0.20.0
DEPLOYMENT_CONTAINER = "server"
KSERVE_SERVICE_PORT = 80  # KServe's CommonDefaultHttpPort: the predictor Service's port
READY_PATH = "/v2/health/ready"
LIVE_PATH = "/v2/health/live"
MODEL_MOUNT = "/checkpoints"
# Annotations KServe v0.20.0 reads on an InferenceService (pkg/constants/constants.go).
DEPLOYMENT_MODE = "serving.kserve.io/deploymentMode"
AUTOSCALER_CLASS = "serving.kserve.io/autoscalerClass"
# KServe v0.20.0 in Standard mode (pkg/apis/serving/v1beta1/inference_service_status.go,
# PropagateRawStatus) gives the `PredictorReady` condition the predictor Deployment's `Progressing`
# reason once that reads `NewReplicaSetAvailable`: every replica runs the new template and no old pod
# is left (kubernetes `pkg/controller/deployment/util`, DeploymentComplete). Before that, during a
# rollout, it stays Ready with `Available`'s reason, since `maxUnavailable: 0` keeps the old pods
# available: waiting for Ready alone ends before the new model serves. A model that never loads ends
# the rollout with `ProgressDeadlineExceeded` (the Deployment's progressDeadlineSeconds, which KServe
# sets to 600 s: reconcilers/deployment/deployment_reconciler.go). The status's observedGeneration is
# the Deployment's (set there too), so a stale reason from the last rollout does not end the wait.
ROLLED_OUT = "NewReplicaSetAvailable"
ROLLOUT_FAILED = "ProgressDeadlineExceeded"
ROLLOUT_DEADLINE_S = 600
VISIBILITY = "networking.kserve.io/visibility"
PREDICTOR_WAIT = (
    "jsonpath={.status.conditions[?(@.type=='PredictorReady' && "
    f"(@.reason=='{ROLLED_OUT}' || @.reason=='{ROLLOUT_FAILED}'))].reason}}"
)
# The annotations of ours KServe must not copy onto the predictor's pods (it copies the
# InferenceService's own annotations to its pod template, components/predictor.go): a change of a wait
# setting would roll every server pod. The platform stack lists them in `inferenceservice-config`
# (infra/program/platform/kserve.py); a KServe installed otherwise needs the same list.
WAIT_ANNOTATIONS = ("pulumi.com/waitFor", "pulumi.com/timeoutSeconds")


@dataclass(frozen=True)
class ServeNames:
    """The server's names: fixed by jobName alone, so a new run updates them instead of replacing."""

    server: str  # the InferenceService, or the Deployment
    service: str  # the Service callers use
    service_port: int


def serve_names(settings: Settings) -> ServeNames:
    server = f"{settings.job_name}-serve"
    if settings.serve_kind == "kserve":
        return ServeNames(server, f"{server}-predictor", KSERVE_SERVICE_PORT)
    return ServeNames(server, server, settings.serve_port)


def model_uri(settings: Settings, names: JobNames) -> str:
    """What the server's --model-uri points at: the run's export prefix, or its checkpoint directory."""
    if settings.serve_model_source == "s3":
        return model_export_uri(settings, names) + "/"
    return names.checkpoint_dir


def server_args(settings: Settings, names: JobNames) -> list[str]:
    """The flags of `python -m trainer.serve`."""
    return [
        f"--model-uri={model_uri(settings, names)}",
        f"--model-name={MODEL_NAME}",
        f"--model-version={settings.job_run_id}",
        f"--port={settings.serve_port}",
        f"--health-port={settings.serve_health_port}",
        f"--max-batch={settings.serve_max_batch}",
        f"--drain-seconds={settings.serve_drain_seconds}",
        # A model from S3 must be the one the job wrote: its SHA256SUMS on the checkpoint volume.
        *([f"--sums-from={names.checkpoint_dir}/SHA256SUMS"] if settings.serve_model_source == "s3" else []),
    ]


# What a stopping server needs after its drain: the requests it already received answered (at most
# trainer/serve/cli.py DRAIN_TIMEOUT_S, 20 s), and a margin.
STOP_AFTER_DRAIN_S = 30


def termination_grace_seconds(settings: Settings) -> int:
    """The server pod's grace period between SIGTERM and SIGKILL: its drain, then its stop."""
    return settings.serve_drain_seconds + STOP_AFTER_DRAIN_S


def server_labels(settings: Settings, serve: ServeNames) -> dict[str, str]:
    return {**labels(settings, "server"), SERVE_LABEL: serve.server}


def server_threads(settings: Settings) -> int:
    """torch's intra-op threads in the server (OMP_NUM_THREADS): the whole cores of its CPU limit, at
    least 1, rather than every core of the node."""
    return max(1, math.floor(parse_quantity(settings.serve_cpu_limit)))


def _probe(settings: Settings, path: str, period: int, failures: int) -> core.ProbeArgs:
    """A probe on the server's health port: by number, not a declared container port, since KServe
    (v0.20.0 `pkg/controller/v1beta1/inferenceservice/reconcilers/service/service_reconciler.go`) adds
    every declared port of the predictor's container to its Service."""
    return core.ProbeArgs(
        http_get=core.HTTPGetActionArgs(path=path, port=settings.serve_health_port),
        period_seconds=period,
        failure_threshold=failures,
        timeout_seconds=2,
    )


def server_container(
    settings: Settings, names: JobNames, secret_name: pulumi.Input[str] | None, container_name: str
) -> core.ContainerArgs:
    """The server container, Pod Security 'restricted', Ready only once the model is loaded."""
    s3 = settings.serve_model_source == "s3"
    # The checkpoint volume, read-only, either way: the model itself, or (from S3) the SHA256SUMS the job
    # wrote there, which the export must match (`--sums-from`).
    mounts = [
        core.VolumeMountArgs(name="tmp", mount_path="/tmp"),
        core.VolumeMountArgs(name="checkpoints", mount_path=MODEL_MOUNT, read_only=True),
    ]
    if s3:
        mounts += s3_ca_volumes(settings)[1]
    return core.ContainerArgs(
        name=container_name,
        image=settings.job_image,
        image_pull_policy=settings.image_pull_policy,
        command=["python", "-m", "trainer.serve"],
        args=server_args(settings, names),
        env=[
            core.EnvVarArgs(name="OMP_NUM_THREADS", value=str(server_threads(settings))),
            *base_env(),
            *(s3_env(settings, secret_name) if s3 else []),
        ],
        ports=[core.ContainerPortArgs(name=PORT_NAME, container_port=settings.serve_port, protocol="TCP")],
        readiness_probe=_probe(settings, READY_PATH, 5, 3),
        liveness_probe=_probe(settings, LIVE_PATH, 10, 6),
        resources=core.ResourceRequirementsArgs(
            requests={"cpu": settings.serve_cpu_request, "memory": settings.serve_memory_request},
            limits={"cpu": settings.serve_cpu_limit, "memory": settings.serve_memory_limit},
        ),
        volume_mounts=mounts,
        security_context=container_security(),
    )


def server_volumes(settings: Settings, checkpoint_claim: pulumi.Input[str]) -> list[core.VolumeArgs]:
    claim = core.PersistentVolumeClaimVolumeSourceArgs(claim_name=checkpoint_claim, read_only=True)
    volumes = [
        core.VolumeArgs(name="tmp", empty_dir=core.EmptyDirVolumeSourceArgs(size_limit="1Gi")),
        core.VolumeArgs(name="checkpoints", persistent_volume_claim=claim),
    ]
    if settings.serve_model_source == "s3":
        volumes += s3_ca_volumes(settings)[0]
    return volumes


def rolling_update() -> dict[str, Any]:
    """No moment without a Ready server: one new pod at a time, no old one removed before it is Ready."""
    return {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}


def server_pods(serve: ServeNames) -> meta.LabelSelectorArgs:
    return meta.LabelSelectorArgs(match_labels={SERVE_LABEL: serve.server})


def network_policy_spec(settings: Settings, serve: ServeNames) -> net.NetworkPolicySpecArgs:
    """In: the stack's namespace and serveIngressNamespaces, on the server port only. Out: DNS, and the
    S3 endpoint when the model comes from there."""
    callers = [net.NetworkPolicyPeerArgs(pod_selector=meta.LabelSelectorArgs())]  # this namespace
    callers += [namespace_peer(n) for n in settings.serve_ingress_namespaces]
    egress = [dns_egress(settings)]
    s3 = s3_destination(settings) if settings.serve_model_source == "s3" else None
    if s3 is not None:
        egress.append(egress_to(s3))
    return net.NetworkPolicySpecArgs(
        pod_selector=server_pods(serve),
        policy_types=["Ingress", "Egress"],
        ingress=[
            net.NetworkPolicyIngressRuleArgs(
                from_=callers, ports=[net.NetworkPolicyPortArgs(protocol="TCP", port=settings.serve_port)]
            )
        ],
        egress=egress,
    )


def serve_url(settings: Settings) -> str:
    serve = serve_names(settings)
    return (
        f"http://{serve.service}.{settings.namespace}.svc.cluster.local:{serve.service_port}"
        f"/v2/models/{MODEL_NAME}"
    )


def predictor_outcome(status: Any, name: str, version: str, logs: str) -> str:
    """The InferenceService's rollout after Pulumi's wait: "Serving" once the new model serves on every
    replica; raises (failing `pulumi up` with one line ending with the logs command) when it failed."""
    for condition in (status or {}).get("conditions") or []:
        if condition.get("type") != "PredictorReady":
            continue
        reason = condition.get("reason") or ""
        if reason == ROLLED_OUT:
            return "Serving"
        if condition.get("status") == "False":
            message = condition.get("message") or ""
            raise pulumi.RunError(
                f"InferenceService {name}: model version {version} did not become ready ({reason}): "
                f"{message}".rstrip(": ")
                + f"; the old pods, if any, still serve; the new pods' logs: {logs}"
            )
    return "unknown"


def serve_example(settings: Settings) -> str:
    """A command to paste: forward a local port to the Service, ask whether the model is ready and for
    its metadata (name, version = jobRunId)."""
    serve = serve_names(settings)
    local = "http://127.0.0.1:8080"
    return (
        f"kubectl -n {settings.namespace} port-forward svc/{serve.service} 8080:{serve.service_port} & "
        f"sleep 2; curl -s {local}/v2/models/{MODEL_NAME}/ready; curl -s {local}/v2/models/{MODEL_NAME}"
    )


def pod_fields(
    settings: Settings, container: core.ContainerArgs, volumes: list[core.VolumeArgs], account: Any
) -> dict[str, Any]:
    """The pod fields the Deployment's template and the InferenceService's predictor share."""
    return {
        "containers": [container],
        "volumes": volumes,
        "service_account_name": account.metadata.name,
        "automount_service_account_token": False,
        "enable_service_links": False,
        "security_context": pod_security(settings),
        "termination_grace_period_seconds": termination_grace_seconds(settings),
    }
