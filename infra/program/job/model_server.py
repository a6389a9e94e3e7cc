"""The server of the run's model (`serve: true`): its identity, NetworkPolicy, PodDisruptionBudget, and
the Deployment (`serving_deployment.py`) or InferenceService (`serving_kserve.py`) that runs it; what
both share is in `serving.py`."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.program.common.meta import JobNames
from infra.program.job.serving import (
    DEPLOYMENT_CONTAINER,
    KSERVE_CONTAINER,
    network_policy_spec,
    serve_names,
    serve_url,
    server_container,
    server_labels,
    server_pods,
    server_volumes,
)
from infra.program.job.serving_deployment import deployment
from infra.program.job.serving_kserve import inference_service
from infra.program.settings import PROJECT, Settings

core = k8s.core.v1
net = k8s.networking.v1
meta = k8s.meta.v1


class ModelServer(pulumi.ComponentResource):
    """The server of the run's model, its identity, NetworkPolicy and PodDisruptionBudget.

    `ready` is `after_success` of anything on the training job's outcome: every object here depends on
    it, so nothing is registered before the job succeeded, and nothing at all when it failed.
    """

    def __init__(
        self,
        name: str,
        settings: Settings,
        names: JobNames,
        namespace: pulumi.Input[str],
        ready: pulumi.Output[Any],
        checkpoint_claim: pulumi.Input[str],
        secret_name: pulumi.Input[str] | None,
        after: tuple[pulumi.Resource, ...] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{PROJECT}:serving:ModelServer", name, {}, opts)
        serve = serve_names(settings)
        self._ready = ready
        self.outcome: pulumi.Output[str] = pulumi.Output.from_input("none")
        child = self._gated()
        obj_labels = server_labels(settings, serve)

        def metadata(
            object_name: str, annotations: dict[str, str] | None = None, extra: dict[str, str] | None = None
        ) -> meta.ObjectMetaArgs:
            return meta.ObjectMetaArgs(
                name=object_name,
                namespace=namespace,
                labels={**obj_labels, **(extra or {})},
                annotations=annotations,
            )

        account = core.ServiceAccount(
            f"{name}-account",
            metadata=metadata(serve.server),
            automount_service_account_token=False,
            opts=child,
        )
        # In place before the first server pod starts.
        policy = net.NetworkPolicy(
            f"{name}-policy",
            metadata=metadata(serve.server),
            spec=network_policy_spec(settings, serve),
            opts=child,
        )
        if settings.serve_replicas > 1:
            k8s.policy.v1.PodDisruptionBudget(
                f"{name}-budget",
                metadata=metadata(serve.server),
                spec=k8s.policy.v1.PodDisruptionBudgetSpecArgs(min_available=1, selector=server_pods(serve)),
                opts=child,
            )
        kserve = settings.serve_kind == "kserve"
        container = server_container(
            settings, names, secret_name, KSERVE_CONTAINER if kserve else DEPLOYMENT_CONTAINER
        )
        volumes = server_volumes(settings, checkpoint_claim)
        first = self._gated(policy, *after)
        if kserve:
            self.outcome = inference_service(
                name, settings, serve, metadata, container, volumes, account, first
            )
        else:
            self.outcome = deployment(
                name, settings, serve, metadata, container, volumes, account, first, self._gated
            )
        self.url = serve_url(settings)
        self.register_outputs({"url": self.url})

    def _gated(self, *after: pulumi.Resource) -> pulumi.ResourceOptions:
        """A child's options: after `after`, and only once the job succeeded (see the module docstring)."""
        return pulumi.ResourceOptions(parent=self, depends_on=self._ready.apply(lambda _: list(after)))
