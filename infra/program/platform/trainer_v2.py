"""Kubeflow Trainer v2, installed from its vendored overlay build (or assumed present).

Upstream (kubeflow/trainer, tag v2.3.0) `manifests/overlays/manager/kustomization.yaml`: namespace
`kubeflow-system`; the CRDs `trainer.kubeflow.org` TrainJob, TrainingRuntime and ClusterTrainingRuntime
(`manifests/base/crds`); the controller manager Deployment `kubeflow-trainer-controller-manager`
(container `manager`, image `ghcr.io/kubeflow/trainer/trainer-controller-manager:v2.3.0`,
`manifests/base/manager/manager.yaml`); its webhooks; and `manifests/third-party/jobset`, JobSet v0.12.0's
release manifests (`https://github.com/kubernetes-sigs/jobset/releases/download/v0.12.0/manifests.yaml`:
the `jobsets.jobset.x-k8s.io` CRD and the Deployment `jobset-controller-manager`, container `manager`,
image rewritten to `registry.k8s.io/jobset/jobset:v0.12.0`). Those two are every image it pulls, so
`trainerImage` and `trainerJobSetImage` cover a mirror.

By default the component applies `infra/manifests/kubeflow-trainer`: that overlay built from the pinned
module, with JobSet's release manifest built from the pinned JobSet module instead of GitHub's release
download, checked by its sha256 before it is applied (`infra/program/common/vendored.py`); `trainerSource`
names another kustomize source. Either way it is the kustomize Directory `trainer-v2-manifests`, so the
objects keep their Pulumi names whichever source a stack used before.

With `trainerProgress` the controller's Deployment gets `--feature-gates=TrainJobStatus=true`
(v2.3.0 `cmd/trainer-controller-manager/main.go`: the flag overrides the config file's `featureGates`;
`pkg/features/features.go`: alpha, off by default). The controller then serves its status endpoint on
`statusServer.port` 10443 of the vendored config (`pkg/statusserver`), behind the Service port
`status-server` the manifests already carry, and gives every trainer container the endpoint's URL, CA
and a projected token (`pkg/runtime/framework/plugins/trainjobstatus/trainjobstatus.go`;
`trainer/trainjob_status.py` is the client). A flag rather than an edit of the config file's ConfigMap:
the ConfigMap is mounted by `subPath`, so an edit alone would not reach a running controller, while a
changed pod template rolls it. With the gate the status server verifies each token against the
cluster's service-account issuer, found by OpenID discovery when it starts (`pkg/statusserver/auth.go`
Init; Kubernetes' bootstrap RBAC binds `system:service-account-issuer-discovery` to every service
account); a failed discovery fails the server, which stops the whole manager.

As with the training operator (`infra/program/platform/training_operator.py`) the provider applies it
server-side by default (upstream's instructions say `kubectl apply --server-side -k`), and a transform
keeps every CRD when the stack is destroyed: deleting the TrainJob CRD deletes every team's TrainJobs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulumi

from infra.program.common.kustomize import Directory
from infra.program.common.vendored import TRAINER, vendored
from infra.program.platform import operator_ingress
from infra.program.platform.training_operator import (
    CRD_TYPE,
    SECRET_TYPE,
    cert_secret,
    kept_crd,
    kustomize_source,
    restricted_namespace,
)
from infra.program.settings import PROJECT, Settings

TRAINER_DEPLOYMENT = "kubeflow-trainer-controller-manager"
JOBSET_DEPLOYMENT = "jobset-controller-manager"
MANAGER_CONTAINER = "manager"  # the container of both Deployments
PROGRESS_GATE = "--feature-gates=TrainJobStatus=true"
DEPLOYMENT_TYPE = "kubernetes:apps/v1:Deployment"
NAMESPACE_TYPE = "kubernetes:core/v1:Namespace"
# The webhook certificate Secrets the manifests create empty and the controllers' own certificate
# managers fill (Trainer v2.3.0 `certManagement` in its config; JobSet v0.12.0 its cert-controller): the
# stack leaves their data alone, as the training operator's (training_operator.cert_secret).
CERT_SECRETS = frozenset({"kubeflow-trainer-webhook-cert", "jobset-webhook-server-cert"})


def trainer_source(settings: Settings) -> str:
    """Where Trainer v2's manifests come from: the override, else the vendored build (checked)."""
    return kustomize_source(settings.trainer_source) or vendored(TRAINER).verified()


def mirrored_images(settings: Settings) -> dict[str, str]:
    """Deployment name -> the image its `manager` container gets instead of the overlay's."""
    images = {TRAINER_DEPLOYMENT: settings.trainer_image, JOBSET_DEPLOYMENT: settings.trainer_jobset_image}
    return {deployment: image for deployment, image in images.items() if image}


def with_image(props: dict[str, Any], image: str) -> dict[str, Any]:
    """A Deployment with its `manager` container's image replaced (a new dict)."""
    import copy

    deployment = copy.deepcopy(props)
    containers = deployment["spec"]["template"]["spec"]["containers"]
    next(c for c in containers if c["name"] == MANAGER_CONTAINER)["image"] = image
    return deployment


def with_progress_gate(props: dict[str, Any]) -> dict[str, Any]:
    """The controller's Deployment with the TrainJobStatus feature gate on (a new dict)."""
    import copy

    deployment = copy.deepcopy(props)
    containers = deployment["spec"]["template"]["spec"]["containers"]
    manager = next(c for c in containers if c["name"] == MANAGER_CONTAINER)
    manager["args"] = [*(manager.get("args") or []), PROGRESS_GATE]
    return deployment


def trainer_transform(
    settings: Settings,
) -> Callable[[pulumi.ResourceTransformArgs], pulumi.ResourceTransformResult | None]:
    """A transform for the overlay's children: keeps the CRDs on destroy (or adopts kept ones,
    `trainerAdoptCrds`), leaves the webhook certificates' data to the controllers that write it,
    labels `kubeflow-system` to enforce Pod Security "restricted" (both controllers' pods meet it as
    upstream writes them: tests/infra/test_trainjob.py reads the vendored overlay), points the two
    controllers at the mirror's images when set, and turns the TrainJobStatus gate on with
    `trainerProgress`. Everything else passes unchanged."""
    images = mirrored_images(settings)
    changed = set(images) | ({TRAINER_DEPLOYMENT} if settings.trainer_progress else set())

    def transform(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
        props: dict[str, Any] = dict(args.props)
        if args.type_ == CRD_TYPE:
            return kept_crd(args, settings.trainer_adopt_crds)
        name = (props.get("metadata") or {}).get("name")
        if args.type_ == SECRET_TYPE and name in CERT_SECRETS:
            return cert_secret(args)
        if args.type_ == NAMESPACE_TYPE:
            return pulumi.ResourceTransformResult(props=restricted_namespace(props), opts=args.opts)
        if args.type_ != DEPLOYMENT_TYPE or name not in changed:
            return None
        if name in images:
            props = with_image(props, images[name])
        if name == TRAINER_DEPLOYMENT and settings.trainer_progress:
            props = with_progress_gate(props)
        return pulumi.ResourceTransformResult(props=props, opts=args.opts)

    return transform


class TrainerV2(pulumi.ComponentResource):
    """Applies Trainer v2's manager overlay (CRDs, controller, webhooks, JobSet) with the caller's
    provider. Everything that creates a TrainJob depends on this component, so the CRDs exist first."""

    def __init__(self, name: str, settings: Settings, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{PROJECT}:operator:TrainerV2", name, {}, opts)
        self.source = trainer_source(settings)
        manifests = Directory(
            f"{name}-manifests",
            directory=self.source,
            opts=pulumi.ResourceOptions(parent=self, transforms=[trainer_transform(settings)]),
        )
        if settings.trainer_source:
            operator_ingress.not_read("trainerSource", settings.trainer_source, "Trainer v2")
        else:
            operator_ingress.apply(
                name,
                settings,
                "trainer",
                operator_ingress.read_objects(str(vendored(TRAINER).manifest)),
                pulumi.ResourceOptions(parent=self, depends_on=[manifests]),
            )
        self.register_outputs({"source": self.source})
