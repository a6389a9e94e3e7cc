"""KServe, installed from its vendored release manifest or another copy of it (`kserveSource`), or
assumed present (`kservePresent`).

Upstream (kserve/kserve, tag v0.20.0) publishes `kserve.yaml` with each release, and commits it with the
tag as `install/v0.20.0/kserve.yaml` (`hack/release/generate-install.sh`: `kustomize build
config/overlays/all` without its Namespace, `:latest` images set to the tag). By default the component
applies that file vendored from the pinned module (`infra/manifests/kserve/kserve.yaml`, checked by its
sha256 before it is applied: `infra/program/vendored.py`), as the yaml/v2 ConfigFile `kserve-manifests`
(the objects keep their Pulumi names whichever source a stack used before). The manifest holds the
CRDs (`serving.kserve.io` InferenceService, ServingRuntime, ...), the controller manager, its webhooks
and the ConfigMap `inferenceservice-config`, all in namespace `kserve`, which the manifest leaves out and
this component creates. The webhooks' serving certificate is a cert-manager `Certificate` signed by a
self-signed `Issuer` (`config/certmanager`), so cert-manager must already run in the cluster.

As for the training operator (`infra/program/training_operator.py`), a transform keeps every CRD when the
stack is destroyed (deleting the InferenceService CRD deletes every team's InferenceServices), and sets
the default deployment mode in `inferenceservice-config` to "Standard" (upstream's default is
"Serverless", which needs Knative): plain Deployments and Services. The stack's own InferenceService
names its mode anyway (`infra/program/serving.py`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.program.meta import labels
from infra.program.settings import PROJECT, Settings
from infra.program.training_operator import CRD_TYPE, kept_crd, kustomize_source
from infra.program.vendored import KSERVE, vendored

NAMESPACE = "kserve"
CONFIG_MAP = "inferenceservice-config"
CONFIG_MAP_TYPE = "kubernetes:core/v1:ConfigMap"


def kserve_source(settings: Settings) -> str:
    """The override's manifest (a relative local path made absolute, as for the kustomize sources), else
    the vendored release manifest (checked)."""
    return kustomize_source(settings.kserve_source) or vendored(KSERVE).verified()


def standard_mode(props: dict[str, Any]) -> dict[str, Any]:
    """`inferenceservice-config` with `deploy.defaultDeploymentMode` Standard, and Pulumi's wait
    annotations in `inferenceService.serviceAnnotationDisallowedList` (KServe appends the list to its
    own: `pkg/apis/serving/v1beta1/configmap.go`), so they never reach a predictor's pod template: a
    change of a wait setting then restarts no server pod (a new dict)."""
    import copy

    from infra.program.serving import WAIT_ANNOTATIONS

    config = copy.deepcopy(props)
    data = config.setdefault("data", {})
    data["deploy"] = json.dumps({"defaultDeploymentMode": "Standard"})
    isvc = json.loads(data.get("inferenceService") or "{}")
    disallowed = list(isvc.get("serviceAnnotationDisallowedList") or [])
    isvc["serviceAnnotationDisallowedList"] = disallowed + [
        a for a in WAIT_ANNOTATIONS if a not in disallowed
    ]
    data["inferenceService"] = json.dumps(isvc)
    return config


def kserve_transform() -> Callable[[pulumi.ResourceTransformArgs], pulumi.ResourceTransformResult | None]:
    """A transform for the manifest's objects: CRDs kept on destroy, the ConfigMap in Standard mode."""

    def transform(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
        props: dict[str, Any] = dict(args.props)
        if args.type_ == CRD_TYPE:
            return kept_crd(args, adopt=False)
        if args.type_ == CONFIG_MAP_TYPE and (props.get("metadata") or {}).get("name") == CONFIG_MAP:
            return pulumi.ResourceTransformResult(props=standard_mode(props), opts=args.opts)
        return None

    return transform


class KServe(pulumi.ComponentResource):
    """Namespace `kserve` and KServe's release manifest applied into it (server-side, by the provider)."""

    def __init__(self, name: str, settings: Settings, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{PROJECT}:operator:KServe", name, {}, opts)
        self.source = kserve_source(settings)
        namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=NAMESPACE, labels=labels(settings, "kserve")),
            opts=pulumi.ResourceOptions(parent=self),
        )
        k8s.yaml.v2.ConfigFile(
            f"{name}-manifests",
            file=self.source,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[namespace], transforms=[kserve_transform()]),
        )
        self.register_outputs({"source": self.source})
