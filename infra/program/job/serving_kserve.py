"""The model server as a KServe InferenceService (`serveKind: kserve`), in KServe's Standard mode."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.program.job.jobs import CustomResourceWithStatus
from infra.program.job.serving import (
    AUTOSCALER_CLASS,
    DEPLOYMENT_MODE,
    PREDICTOR_WAIT,
    VISIBILITY,
    ServeNames,
    pod_fields,
    predictor_outcome,
    rolling_update,
    server_labels,
)
from infra.program.settings import Settings

core = k8s.core.v1


def inference_service(
    name: str,
    settings: Settings,
    serve: ServeNames,
    metadata: Any,
    container: core.ContainerArgs,
    volumes: list[core.VolumeArgs],
    account: Any,
    opts: pulumi.ResourceOptions,
) -> pulumi.Output[str]:
    """The server as a KServe InferenceService (`serveKind: kserve`); returns its outcome."""
    pod = pod_fields(settings, container, volumes, account)
    predictor = {
        "minReplicas": settings.serve_replicas,
        "maxReplicas": settings.serve_replicas,
        "deploymentStrategy": rolling_update(),
        "labels": server_labels(settings, serve),
        "annotations": {"sidecar.istio.io/inject": "false"},
        "containers": pod["containers"],
        "volumes": pod["volumes"],
        "serviceAccountName": pod["service_account_name"],
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod["security_context"],
        "terminationGracePeriodSeconds": pod["termination_grace_period_seconds"],
    }
    annotations = {
        DEPLOYMENT_MODE: "Standard",
        # A fixed replica count (minReplicas): no HorizontalPodAutoscaler, no metrics server needed.
        AUTOSCALER_CLASS: "none",
        # `pulumi up` waits until the new model serves on every replica, or its rollout failed
        # (PREDICTOR_WAIT); `outcome` then fails the `up` with one line if it failed.
        "pulumi.com/waitFor": PREDICTOR_WAIT,
        "pulumi.com/timeoutSeconds": str(settings.serve_wait_timeout_seconds),
    }
    isvc = CustomResourceWithStatus(
        f"{name}-inference-service",
        "InferenceService",
        # Reachable in the cluster only: KServe creates no Ingress for it (v0.20.0
        # `reconcilers/ingress/kube_ingress_reconciler.go`, the label `networking.kserve.io/visibility`).
        metadata(serve.server, annotations, {VISIBILITY: "cluster-local"}),
        {"predictor": predictor},
        opts,
        api_version="serving.kserve.io/v1beta1",
    )
    logs = f"kubectl -n {settings.namespace} logs deployment/{serve.server}-predictor"
    return isvc.status.apply(lambda s: predictor_outcome(s, serve.server, settings.job_run_id, logs))
