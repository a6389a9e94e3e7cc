"""The Kubeflow training operator, installed from a pinned kustomize overlay (or assumed present)."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from infra.program.settings import PROJECT, Settings

UPSTREAM = "https://github.com/kubeflow/trainer.git//manifests/overlays/standalone"


def operator_source(settings: Settings) -> str:
    """Where the operator's manifests come from: the override, else upstream at the pinned tag."""
    return settings.operator_source or f"{UPSTREAM}?ref={settings.operator_version}"


class TrainingOperator(pulumi.ComponentResource):
    """Applies the operator's standalone overlay (CRDs, controller, webhook) with the caller's provider.

    The Kubernetes provider applies server-side by default, as the upstream install instructions ask.
    Everything that creates a PyTorchJob depends on this component, so the CRD exists first.
    """

    def __init__(self, name: str, settings: Settings, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{PROJECT}:operator:TrainingOperator", name, {}, opts)
        self.source = operator_source(settings)
        k8s.kustomize.v2.Directory(
            f"{name}-manifests", directory=self.source, opts=pulumi.ResourceOptions(parent=self)
        )
        self.register_outputs({"source": self.source})
