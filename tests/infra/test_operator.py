"""The training operator as the stack installs it, and the Worker pods it then creates.

The upstream overlay's Deployment below is the shape `kubectl kustomize` renders for
kubeflow/trainer v1.9.4 `manifests/overlays/standalone` (trimmed to the fields the transform touches).
"""

from __future__ import annotations

import copy

import kubernetes_validate
import pulumi
import pytest

from infra.program.common import yamlio
from infra.program.platform.training_operator import TEMPLATE_ANNOTATION
from infra.program.settings import OPERATOR_INIT_IMAGE
from infra.review.admission import admit
from infra.review.cluster import cluster_view
from infra.review.effective.pytorchjob import render_init_containers
from tests.infra.conftest import render_config

UPSTREAM_DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "training-operator", "namespace": "kubeflow"},
    "spec": {
        "replicas": 1,
        "selector": {"matchLabels": {"control-plane": "kubeflow-training-operator"}},
        "template": {
            "metadata": {
                "annotations": {"sidecar.istio.io/inject": "false"},
                "labels": {"control-plane": "kubeflow-training-operator"},
            },
            "spec": {
                "containers": [
                    {
                        "name": "training-operator",
                        "image": "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489",
                        "command": ["/manager"],
                        "securityContext": {"allowPrivilegeEscalation": False},
                        "volumeMounts": [
                            {
                                "name": "cert",
                                "mountPath": "/tmp/k8s-webhook-server/serving-certs",
                                "readOnly": True,
                            }
                        ],
                    }
                ],
                "serviceAccountName": "training-operator",
                "volumes": [{"name": "cert", "secret": {"secretName": "training-operator-webhook-cert"}}],
            },
        },
    },
}


def _transform(values: dict):
    rendering = render_config(values)
    (install,) = [r for r in rendering.registrations if r.type == "kubernetes:kustomize/v2:Directory"]
    (transform,) = install.transforms
    return transform


def _apply(transform, type_: str, props: dict):
    args = pulumi.ResourceTransformArgs(
        custom=True, type_=type_, name="training-operator-manifests:kubeflow/x", props=props, opts=None
    )
    return transform(args)


def test_the_operator_deployment_gets_the_restricted_template_and_pinned_init_image():
    result = _apply(_transform({}), "kubernetes:apps/v1:Deployment", copy.deepcopy(UPSTREAM_DEPLOYMENT))
    pod = result.props["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["args"] == [
        "--pytorch-init-container-image=docker.io/library/alpine:3.20@sha256:"
        "d9e853e87e55526f6b2917df91a2115c36dd7c696a35be12163d44e6e2a4b6bc",
        "--pytorch-init-container-template-file=/etc/config/initContainer.yaml",
        "--enable-scheme=pytorchjob",
    ]
    assert container["image"] == "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489"
    assert {"name": "pytorch-init-container-template", "mountPath": "/etc/config", "readOnly": True} in (
        container["volumeMounts"]
    )
    assert container["volumeMounts"][0]["name"] == "cert"  # upstream's own mount kept
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "pytorch-init-container-template")
    assert volume["downwardAPI"]["items"] == [
        {
            "path": "initContainer.yaml",
            "fieldRef": {"fieldPath": f"metadata.annotations['{TEMPLATE_ANNOTATION}']"},
        }
    ]
    assert "securityContext" in pod["metadata"]["annotations"][TEMPLATE_ANNOTATION]
    kubernetes_validate.validate(result.props, "1.33.0", strict=True)
    assert UPSTREAM_DEPLOYMENT["spec"]["template"]["spec"]["containers"][0].get("args") is None  # not mutated


def test_the_operator_pod_meets_restricted_with_requests_and_its_namespace_enforces_it():
    from infra.review.admission import podsecurity

    props = _apply(_transform({}), "kubernetes:apps/v1:Deployment", copy.deepcopy(UPSTREAM_DEPLOYMENT)).props
    pod = props["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert pod["spec"]["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["resources"] == {
        "requests": {"cpu": "100m", "memory": "128Mi"},
        "limits": {"memory": "1Gi"},
    }
    assert podsecurity.violations(pod, "restricted") == []
    upstream = copy.deepcopy(UPSTREAM_DEPLOYMENT)["spec"]["template"]
    assert podsecurity.violations(upstream, "restricted") != []  # what upstream's manifest sets is not enough
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubeflow"}}
    labelled = _apply(_transform({}), "kubernetes:core/v1:Namespace", namespace).props
    assert labelled["metadata"]["labels"] == {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/warn": "restricted",
        "pod-security.kubernetes.io/audit": "restricted",
    }


def test_the_operators_cluster_role_keeps_what_the_pytorchjob_controller_uses():
    """The vendored ClusterRole as the platform applies it: no exec into pods, no Roles, RoleBindings or
    ServiceAccounts (MPIJob's), no other job kinds; pods, services, events, PyTorchJobs stay."""

    from infra.program.common.vendored import MANIFESTS

    docs = yamlio.load_all((MANIFESTS / "training-operator" / "manifests.yaml").read_text())
    (role,) = [
        d for d in docs if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == "training-operator"
    ]
    before = {r for rule in role["rules"] for r in rule["resources"]}
    assert {"pods/exec", "roles", "rolebindings", "serviceaccounts", "mpijobs"} <= before
    result = _apply(_transform({}), "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole", role)
    after = {r for rule in result.props["rules"] for r in rule["resources"]}
    assert before - after == {
        "pods/exec",
        "roles",
        "rolebindings",
        "serviceaccounts",
        *(
            f"{k}{s}"
            for k in ("tfjobs", "mpijobs", "xgboostjobs", "paddlejobs", "jaxjobs")
            for s in ("", "/status", "/finalizers")
        ),
    }
    assert {"pods", "services", "events", "pytorchjobs", "pytorchjobs/status", "secrets"} <= after


def test_the_mirror_keys_cover_every_image_the_operator_pulls():
    mirror = {
        "operatorImage": "registry.internal/kubeflow/training-operator:v1-93c5489",
        "operatorInitContainerImage": "registry.internal/library/alpine:3.20@sha256:" + "a" * 64,
    }
    props = _apply(
        _transform(mirror), "kubernetes:apps/v1:Deployment", copy.deepcopy(UPSTREAM_DEPLOYMENT)
    ).props
    (container,) = props["spec"]["template"]["spec"]["containers"]
    assert container["image"] == mirror["operatorImage"]
    assert f"--pytorch-init-container-image={mirror['operatorInitContainerImage']}" in container["args"]


@pytest.mark.parametrize(
    ("type_", "name"),
    [
        ("kubernetes:core/v1:Service", "training-operator"),
        ("kubernetes:apps/v1:Deployment", "other"),
        ("kubernetes:core/v1:Secret", "other"),
    ],
)
def test_the_transform_leaves_everything_else_alone(type_, name):
    props = copy.deepcopy(UPSTREAM_DEPLOYMENT)
    props["metadata"]["name"] = name
    assert _apply(_transform({}), type_, props) is None


def test_the_webhook_certificate_data_is_left_to_the_operator():
    """Its cert-controller writes the data; with it in the diff, each `up` replaced the Secret (found by
    the local cluster tier, tests/e2e_local scenario 3)."""
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "training-operator-webhook-cert"}}
    result = _apply(_transform({}), "kubernetes:core/v1:Secret", secret)
    assert result.props == secret
    assert result.opts.ignore_changes == ["data"]


def test_the_templated_init_container_is_admitted_under_restricted():
    props = _apply(_transform({}), "kubernetes:apps/v1:Deployment", copy.deepcopy(UPSTREAM_DEPLOYMENT)).props
    template = props["spec"]["template"]["metadata"]["annotations"][TEMPLATE_ANNOTATION]
    (init,) = render_init_containers(template, "mnist-r1-master-0", OPERATOR_INIT_IMAGE, 100)
    rendering = render_config({})
    view = cluster_view(rendering.objects, rendering.settings)
    worker = view.effective.pods[1]
    assert worker.role == "Worker"
    assert worker.spec["initContainers"] == [init]
    assert admit([worker], view.namespace).refusals == []


def test_worker_pods_carry_the_operator_init_container_and_the_master_does_not():
    rendering = render_config({"jobNodes": 3, "jobBatchSize": 255})
    pods = cluster_view(rendering.objects, rendering.settings).effective.pods
    assert [p.name for p in pods] == ["mnist-r1-master-0", "mnist-r1-worker-0", "mnist-r1-worker-1"]
    assert "initContainers" not in pods[0].spec
    for worker in pods[1:]:
        (init,) = worker.spec["initContainers"]
        assert init["name"] == "init-pytorch"
        assert "getent hosts mnist-r1-master-0;" in init["command"][2]
        assert init["securityContext"]["allowPrivilegeEscalation"] is False
        assert init["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_operator_env_reaches_the_main_container_only():
    rendering = render_config({"jobNodes": 3, "jobBatchSize": 255})
    worker = cluster_view(rendering.objects, rendering.settings).effective.pods[2]
    env = {e["name"]: e.get("value") for e in worker.spec["containers"][0]["env"]}
    assert {k: env[k] for k in ("MASTER_ADDR", "RANK", "PET_NODE_RANK", "WORLD_SIZE", "PET_NNODES")} == {
        "MASTER_ADDR": "mnist-r1-master-0",
        "RANK": "2",
        "PET_NODE_RANK": "2",
        "WORLD_SIZE": "3",
        "PET_NNODES": "3",
    }
    assert "env" not in worker.spec["initContainers"][0]


def test_a_present_operator_declared_restricted_is_admitted():
    rendering = render_config({"operatorInstall": False, "operatorInitContainerRestricted": True})
    assert not [r for r in rendering.registrations if r.type.startswith("kubernetes:kustomize")]
    view = cluster_view(rendering.objects, rendering.settings)
    assert view.effective.pods[1].spec["initContainers"][0]["securityContext"]["runAsNonRoot"] is True
    assert view.admission.refusals == []


def test_upstream_init_container_under_baseline_is_admitted_and_refused_under_restricted():
    rendering = render_config({"operatorInstall": False, "namespacePodSecurity": "baseline"})
    namespace = next(o for o in rendering.objects if o["kind"] == "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    view = cluster_view(rendering.objects, rendering.settings)
    (init,) = view.effective.pods[1].spec["initContainers"]
    assert init["image"] == "alpine:3.10" and "securityContext" not in init
    assert view.admission.refusals == []
    restricted = view.namespace.__class__(view.namespace.name, "restricted")
    assert admit(view.effective.pods, restricted).refusals == [
        'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": '
        'allowPrivilegeEscalation != false (container "init-pytorch" must set '
        "securityContext.allowPrivilegeEscalation=false)",
        'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": '
        'unrestricted capabilities (container "init-pytorch" must set securityContext.capabilities.drop=["ALL"])',
    ]


def test_a_job_that_fills_its_own_quota_is_admitted_and_one_gpu_less_is_refused():
    values = {"jobGpusPerNode": 2, "jobProcsPerNode": 2, "jobNodes": 2, "namespaceGpuQuota": 4}
    rendering = render_config(values)
    view = cluster_view(rendering.objects, rendering.settings)
    assert view.admission.refusals == []
    quota = next(o for o in rendering.objects if o["kind"] == "ResourceQuota")
    quota["spec"]["hard"]["requests.nvidia.com/gpu"] = "3"
    assert cluster_view(rendering.objects, rendering.settings).admission.refusals == [
        'pods "mnist-r1-worker-0" is forbidden: exceeded quota: ddp-mnist-budget, requested: '
        "requests.nvidia.com/gpu=2, used: requests.nvidia.com/gpu=2, limited: requests.nvidia.com/gpu=3"
    ]
