"""The model server as a Deployment behind a Service (`serveKind: deployment`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.program.job.serving import (
    PORT_NAME,
    SERVE_LABEL,
    ServeNames,
    pod_fields,
    rolling_update,
    server_labels,
    server_pods,
)
from infra.program.settings import Settings

core = k8s.core.v1
meta = k8s.meta.v1


def deployment(
    name: str,
    settings: Settings,
    serve: ServeNames,
    metadata: Any,
    container: core.ContainerArgs,
    volumes: list[core.VolumeArgs],
    account: Any,
    opts: pulumi.ResourceOptions,
    gated: Callable[[], pulumi.ResourceOptions],
) -> pulumi.Output[str]:
    """The server as a Deployment and its Service (`serveKind: deployment`); returns its outcome."""
    pod_labels = server_labels(settings, serve)
    strategy = rolling_update()
    # Pulumi waits for the rollout of a Deployment by default (new ReplicaSet available).
    wait = {"pulumi.com/timeoutSeconds": str(settings.serve_wait_timeout_seconds)}
    deployment = k8s.apps.v1.Deployment(
        f"{name}-deployment",
        metadata=metadata(serve.server, wait),
        spec=k8s.apps.v1.DeploymentSpecArgs(
            replicas=settings.serve_replicas,
            selector=server_pods(serve),
            strategy=k8s.apps.v1.DeploymentStrategyArgs(
                type=strategy["type"],
                rolling_update=k8s.apps.v1.RollingUpdateDeploymentArgs(
                    max_unavailable=strategy["rollingUpdate"]["maxUnavailable"],
                    max_surge=strategy["rollingUpdate"]["maxSurge"],
                ),
            ),
            template=core.PodTemplateSpecArgs(
                metadata=meta.ObjectMetaArgs(
                    labels=pod_labels, annotations={"sidecar.istio.io/inject": "false"}
                ),
                spec=core.PodSpecArgs(**pod_fields(settings, container, volumes, account)),
            ),
        ),
        opts=opts,
    )
    # Its wait (endpoints for the selected pods) follows the serving timeout, not the provider's
    # fixed default of 10 minutes.
    core.Service(
        f"{name}-service",
        metadata=metadata(serve.service, wait),
        spec=core.ServiceSpecArgs(
            selector={SERVE_LABEL: serve.server},
            ports=[
                core.ServicePortArgs(
                    name=PORT_NAME, port=serve.service_port, target_port=PORT_NAME, protocol="TCP"
                )
            ],
        ),
        opts=gated(),
    )
    # The built-in Deployment await fails `pulumi up` itself when the rollout does not complete.
    return deployment.status.apply(lambda _: "Serving")
