"""operatorPatchExisting: the server-side apply patch of an operator the stack did not install (Kubeflow's),
its config rules, and the Worker init container the patched operator then makes."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import pytest

from infra.program.checks import ConfigError
from infra.program.platform.operator_patch import FIELD_MANAGER, patch_manifest
from infra.program.platform.training_operator import RESTRICTED_INIT_CONTAINER_TEMPLATE, TEMPLATE_ANNOTATION
from infra.program.settings import OPERATOR_INIT_IMAGE
from infra.review.admission import admit
from infra.review.cluster import cluster_view
from infra.review.effective.pytorchjob import render_init_containers
from infra.review.manifest import RecordingMocks, Registration, run_program, to_yaml
from tests.infra.conftest import BASE, render_config, stack_config
from tests.infra.test_operator import UPSTREAM_DEPLOYMENT

PATCH = {"stackRole": "platform", "operatorInstall": False, "operatorPatchExisting": True}
MIRROR = "registry.internal/library/alpine:3.20@sha256:" + "a" * 64
UPSTREAM_IMAGE_FLAG_DEFAULT = "alpine:3.10"  # v1.9.4 pkg/config/config.go: the flag no patch sets


def _patch(values: dict[str, Any]) -> Registration:
    rendering = render_config({**PATCH, **values})
    (patch,) = [r for r in rendering.registrations if r.type == "kubernetes:apps/v1:DeploymentPatch"]
    return patch


def _applied(deployment: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """What server-side apply makes of `deployment` with `patch`: maps merged, the lists keyed as the
    API declares them (volumes by name, containers by name, volumeMounts by mountPath) merged by key."""
    keys = {"volumes": "name", "containers": "name", "volumeMounts": "mountPath"}

    def merge(live: Any, applied: Any, field: str = "") -> Any:
        if isinstance(live, dict) and isinstance(applied, dict):
            return {k: merge(live.get(k), applied[k], k) if k in live else applied[k] for k in applied} | {
                k: v for k, v in live.items() if k not in applied
            }
        if isinstance(live, list) and field in keys:
            key = keys[field]
            merged = [copy.deepcopy(item) for item in live]
            for item in applied:
                at = next((i for i, m in enumerate(merged) if m[key] == item[key]), None)
                if at is None:
                    merged.append(item)
                else:
                    merged[at] = merge(merged[at], item)
            return merged
        return applied

    return merge(copy.deepcopy(deployment), patch)


def test_the_patch_applies_the_template_its_volume_and_mount_to_kubeflows_deployment_only():
    patch = _patch({})
    assert patch.parent == "training-operator-patch"
    manifest = copy.deepcopy(patch.inputs)
    assert manifest["metadata"].pop("annotations") == {"pulumi.com/patchFieldManager": FIELD_MANAGER}
    assert manifest["metadata"] == {"name": "training-operator", "namespace": "kubeflow"}
    pod = manifest["spec"]["template"]
    assert pod["spec"]["containers"] == [
        {
            "name": "training-operator",
            "volumeMounts": [
                {"name": "pytorch-init-container-template", "mountPath": "/etc/config", "readOnly": True}
            ],
        }
    ]  # no args, no image: the Deployment's own are left as they are
    assert pod["spec"]["volumes"] == [
        {
            "name": "pytorch-init-container-template",
            "downwardAPI": {
                "items": [
                    {
                        "path": "initContainer.yaml",
                        "fieldRef": {"fieldPath": f"metadata.annotations['{TEMPLATE_ANNOTATION}']"},
                    }
                ]
            },
        }
    ]
    assert set(pod["metadata"]["annotations"]) == {TEMPLATE_ANNOTATION}
    assert manifest == patch_manifest(render_config(PATCH).settings)


def test_the_patched_deployment_is_valid_and_keeps_its_own_fields():
    patched = _applied(UPSTREAM_DEPLOYMENT, patch_manifest(render_config(PATCH).settings))
    kubernetes_validate.validate(patched, "1.33.0", strict=True)
    (container,) = patched["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489"
    assert container["command"] == ["/manager"] and "args" not in container
    assert [m["mountPath"] for m in container["volumeMounts"]] == [
        "/tmp/k8s-webhook-server/serving-certs",
        "/etc/config",
    ]
    annotations = patched["spec"]["template"]["metadata"]["annotations"]
    assert annotations["sidecar.istio.io/inject"] == "false"


@pytest.mark.parametrize("image", [OPERATOR_INIT_IMAGE, MIRROR])
def test_the_patched_operators_worker_init_container_is_the_installs_with_the_configured_image(image):
    """The operator fills `{{.InitContainerImage}}` from a flag the patch leaves at upstream's alpine:3.10;
    the template names the configured image itself, so the result is the install's init container."""
    template = patch_manifest(render_config({**PATCH, "operatorInitContainerImage": image}).settings)["spec"][
        "template"
    ]["metadata"]["annotations"][TEMPLATE_ANNOTATION]
    (init,) = render_init_containers(template, "mnist-r1-master-0", UPSTREAM_IMAGE_FLAG_DEFAULT, 100)
    assert [init] == render_init_containers(
        RESTRICTED_INIT_CONTAINER_TEMPLATE, "mnist-r1-master-0", image, 100
    )
    assert init["image"] == image
    # What a job stack declaring it (operatorInitContainerRestricted) models, and admitted under restricted.
    job = render_config(
        {
            "operatorInstall": False,
            "operatorInitContainerRestricted": True,
            "operatorInitContainerImage": image,
        }
    )
    view = cluster_view(job.objects, job.settings)
    worker = view.effective.pods[1]
    assert worker.role == "Worker" and worker.spec["initContainers"] == [init]
    assert view.namespace.level == "restricted" and admit([worker], view.namespace).refusals == []


def test_another_deployment_is_named_by_its_namespace_and_name():
    patch = _patch(
        {"operatorExistingNamespace": "ml-platform", "operatorExistingName": "kf-training-operator"}
    )
    assert patch.inputs["metadata"]["namespace"] == "ml-platform"
    assert patch.inputs["metadata"]["name"] == "kf-training-operator"
    assert patch.inputs["spec"]["template"]["spec"]["containers"][0]["name"] == "training-operator"


def test_the_smoke_check_runs_after_the_patch_and_the_outputs_name_the_deployment():
    rendering = render_config({**PATCH, "operatorSmokeCheck": True})
    (job,) = [r for r in rendering.registrations if r.type == "kubernetes:kubeflow.org/v1:PyTorchJob"]
    assert "training-operator-patch-deployment" in job.dependencies
    assert rendering.outputs["operatorPatched"] == "kubeflow/training-operator"
    assert rendering.outputs["operatorInitContainerImage"] == OPERATOR_INIT_IMAGE
    assert not [r for r in rendering.registrations if r.type.startswith("kubernetes:kustomize")]
    assert "Deployment" not in {o["kind"] for o in rendering.objects}  # a partial object, not a manifest
    assert (
        "# Also patched (server-side apply, existing object): Deployment kubeflow/training-operator"
        in to_yaml(rendering)
    )


def test_an_all_stack_that_patches_runs_restricted_workers_without_the_declaration():
    rendering = render_config({"stackRole": "all", "operatorInstall": False, "operatorPatchExisting": True})
    assert [r.name for r in rendering.registrations if r.type.endswith("DeploymentPatch")] == [
        "training-operator-patch-deployment"
    ]
    (job,) = [o for o in rendering.objects if o["kind"] == "PyTorchJob"]
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] >= 1


PATCH_RULES = [
    (
        {"stackRole": "platform", "operatorPatchExisting": True},
        "config ddp-mnist:operatorPatchExisting=true is invalid: must be false when operatorInstall is true "
        "(the stack's own install already carries the restricted template); set operatorInstall false to "
        "patch an operator installed otherwise (e.g. Kubeflow's)",
    ),
    (
        {"stackRole": "job", "operatorInstall": False, "operatorPatchExisting": True},
        "config ddp-mnist:operatorPatchExisting=true is invalid: must be false when stackRole is job: the "
        "cluster's platform stack patches the operator; a job stack declares it with "
        "operatorInitContainerRestricted true",
    ),
    (
        {"stackRole": "platform", "operatorExistingNamespace": "ml-platform"},
        "config ddp-mnist:operatorExistingNamespace=ml-platform is invalid: must be left unset unless "
        "operatorPatchExisting is true (only read then)",
    ),
    (
        {**PATCH, "operatorExistingName": "Training_Operator"},
        "config ddp-mnist:operatorExistingName=Training_Operator is invalid: must be a DNS-1123 subdomain "
        "(lowercase letters, digits and '-', at most 253 characters)",
    ),
]


@pytest.mark.parametrize(
    ("values", "message"), PATCH_RULES, ids=[m.split("=")[0][17:] for _, m in PATCH_RULES]
)
def test_a_misplaced_patch_is_refused_with_one_line_before_anything_is_registered(values, message):
    mocks = RecordingMocks()
    with pytest.raises(ConfigError) as raised:
        run_program(stack_config({**BASE, **values}), mocks)
    assert mocks.registrations == []
    assert str(raised.value) == message
