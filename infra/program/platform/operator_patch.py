"""A training operator this stack did not install (e.g. Kubeflow's), patched to a restricted init container.

A cluster that already runs the Kubeflow platform has the operator as Deployment `training-operator` in
namespace `kubeflow`, installed without our transform (training_operator.py): its Worker pods get
upstream's `init-pytorch` (alpine:3.10, no securityContext), which a namespace enforcing Pod Security
"restricted" refuses. `operatorPatchExisting` gives that Deployment what our install gives its own: the
restricted template in a pod annotation, projected by a downwardAPI volume to
`/etc/config/initContainer.yaml`. That path is the default of `--pytorch-init-container-template-file`
(kubeflow/trainer v1.9.4 `pkg/config/config.go`, flags in `cmd/training-operator.v1/main.go`), so the
container's `args` stay untouched: `Args` is `+listType=atomic` (k8s.io/api v0.33 `core/v1/types.go`),
so a server-side apply of ours would replace the whole list and drop the Deployment's own flags.
The image flag is left alone for the same reason; the template names `operatorInitContainerImage`
itself (`restricted_template(image)`).

The patch is a server-side apply of only those fields (pulumi-kubernetes `DeploymentPatch`): the pod
template's annotations (a map), volumes (a list keyed by `name`) and the container's volumeMounts (keyed
by `mountPath`) merge with the Deployment's own. A changed template changes the pod template, so the
operator restarts and reads it (it reads the file once, at its first Worker pod: `initcontainer.go`,
`getInitContainerGenerator`). On destroy the provider applies an empty object with the same field manager
(v4.25.0 `provider/pkg/await/await.go` `Deletion`, `provider/pkg/ssa/actions.go` `Relinquish`): the
fields only this patch owned go, the operator stays and rolls back to upstream's template.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.program.platform.training_operator import (
    OPERATOR_DEPLOYMENT,
    TEMPLATE_ANNOTATION,
    restricted_template,
    template_mount,
    template_volume,
)
from infra.program.settings import PROJECT, Settings

# The server-side apply field manager of the patch, the stack's and the kubectl recipe's
# (docs/EXISTING-KUBEFLOW.md): `kubectl get deployment -o yaml --show-managed-fields` names it.
FIELD_MANAGER = f"{PROJECT}-init-container"
CONTAINER = OPERATOR_DEPLOYMENT  # upstream's container name (manifests/base/deployment.yaml)


def patch_manifest(settings: Settings) -> dict[str, Any]:
    """The partial Deployment the patch applies (what docs/EXISTING-KUBEFLOW.md shows for kubectl)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": settings.operator_existing_name,
            "namespace": settings.operator_existing_namespace,
        },
        "spec": {
            "template": {
                "metadata": {
                    "annotations": {
                        TEMPLATE_ANNOTATION: restricted_template(settings.operator_init_container_image)
                    }
                },
                "spec": {
                    "containers": [{"name": CONTAINER, "volumeMounts": [template_mount()]}],
                    "volumes": [template_volume()],
                },
            }
        },
    }


def _spec_args(settings: Settings) -> k8s.apps.v1.DeploymentSpecPatchArgs:
    """`patch_manifest`'s spec as the provider's typed inputs."""
    volume, mount = template_volume(), template_mount()
    (item,) = volume["downwardAPI"]["items"]
    return k8s.apps.v1.DeploymentSpecPatchArgs(
        template=k8s.core.v1.PodTemplateSpecPatchArgs(
            metadata=k8s.meta.v1.ObjectMetaPatchArgs(
                annotations={TEMPLATE_ANNOTATION: restricted_template(settings.operator_init_container_image)}
            ),
            spec=k8s.core.v1.PodSpecPatchArgs(
                containers=[
                    k8s.core.v1.ContainerPatchArgs(
                        name=CONTAINER,
                        volume_mounts=[
                            k8s.core.v1.VolumeMountPatchArgs(
                                name=mount["name"], mount_path=mount["mountPath"], read_only=mount["readOnly"]
                            )
                        ],
                    )
                ],
                volumes=[
                    k8s.core.v1.VolumePatchArgs(
                        name=volume["name"],
                        downward_api=k8s.core.v1.DownwardAPIVolumeSourcePatchArgs(
                            items=[
                                k8s.core.v1.DownwardAPIVolumeFilePatchArgs(
                                    path=item["path"],
                                    field_ref=k8s.core.v1.ObjectFieldSelectorPatchArgs(
                                        field_path=item["fieldRef"]["fieldPath"]
                                    ),
                                )
                            ]
                        ),
                    )
                ],
            ),
        )
    )


class ExistingOperatorPatch(pulumi.ComponentResource):
    """Patches the existing operator Deployment (`operatorExistingNamespace/operatorExistingName`) with
    the restricted init container template; `pulumi up` waits for its rollout (the provider awaits a
    patched Deployment as it awaits a created one), so what depends on this component meets the
    patched operator."""

    def __init__(self, name: str, settings: Settings, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{PROJECT}:operator:ExistingOperatorPatch", name, {}, opts)
        self.deployment = f"{settings.operator_existing_namespace}/{settings.operator_existing_name}"
        k8s.apps.v1.DeploymentPatch(
            f"{name}-deployment",
            metadata=k8s.meta.v1.ObjectMetaPatchArgs(
                name=settings.operator_existing_name,
                namespace=settings.operator_existing_namespace,
                # A fixed field manager instead of the provider's random one (provider.go
                # `fieldManagerName`), so a reader of managedFields knows whose fields these are.
                annotations={"pulumi.com/patchFieldManager": FIELD_MANAGER},
            ),
            spec=_spec_args(settings),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"deployment": self.deployment})
