"""Ingress to the platform's controllers (infra/program/platform/operator_ingress.py): each controller's pods
admit the ports its Services name, and nothing else; other pods of their namespaces are left alone.

What the policies do on a cluster is NetworkPolicy semantics, evaluated here by the same small model the
NetworkPolicy check's tests use (ingress side, TCP). The real control plane with fake nodes admits the
policies and shows that they select the controllers' pods (tests/e2e_local scenario 13); no tier here
runs a controller in a pod behind them (the controllers run as local processes), so no call through
them is shown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from infra.program.common.vendored import KSERVE, TRAINER, TRAINING_OPERATOR, vendored
from infra.program.platform import operator_ingress
from infra.program.platform.operator_ingress import ingress_policies, policy_name, read_objects
from tests.infra.conftest import by_kind, render_config
from tests.infra.test_network_check import allowed, selects

EVERYTHING = {
    "stackRole": "platform",
    "operatorInstall": True,
    "trainerInstall": True,
    "allowBothOperators": True,
    "kserveInstall": True,
}

# What each controller's Services send to, read from the pinned manifests (named ports resolved): the
# webhook port the API server calls, the metrics port, and Trainer v2's status server.
EXPECTED = {
    ("kubeflow", "training-operator"): {8080, 9443},
    ("kubeflow-system", "kubeflow-trainer-controller-manager"): {8443, 9443, 10443},
    ("kubeflow-system", "jobset-controller-manager"): {8443, 9443},
    ("kserve", "kserve-controller-manager"): {8443, 9443},
}
# Ports those pods listen on that no Service names: the kubelet's probes (which come from the pod's own
# node, never blocked by a NetworkPolicy) and the metrics listeners behind kube-rbac-proxy.
UNNAMED = {8081, 8080}
SOMEONE = {"app": "someone-elses", "in": "any-namespace"}


def _deployments(rendering: Any) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (a.obj["metadata"]["namespace"], a.obj["metadata"]["name"]): a.obj
        for install in rendering.upstream
        for a in install.objects
        if a.obj["kind"] == "Deployment"
    }


def _policies(rendering: Any, namespace: str) -> list[dict[str, Any]]:
    return [p for p in by_kind(rendering, "NetworkPolicy") if p["metadata"]["namespace"] == namespace]


def test_each_controller_admits_from_anywhere_only_the_ports_its_services_name():
    rendering = render_config(EVERYTHING)
    deployments = _deployments(rendering)
    assert set(deployments) == set(EXPECTED)  # KServe's unused controllers are not applied at all
    for (namespace, name), ports in EXPECTED.items():
        pod = deployments[(namespace, name)]["spec"]["template"]["metadata"]["labels"]
        policies = _policies(rendering, namespace)
        assert [p["metadata"]["name"] for p in policies if selects(p["spec"]["podSelector"], pod)] == [
            policy_name(name)
        ]
        for port in ports:
            assert allowed(policies, SOMEONE, pod, port), (name, port)
        for port in UNNAMED - ports | {6443, 22}:
            assert not allowed(policies, SOMEONE, pod, port), (name, port)


def test_other_pods_of_the_controllers_namespaces_are_left_alone():
    """`kubeflow` is also where a Kubeflow platform runs its other components: no policy selects them."""
    rendering = render_config(EVERYTHING)
    for namespace in ("kubeflow", "kubeflow-system", "kserve"):
        policies = _policies(rendering, namespace)
        assert policies
        assert allowed(policies, SOMEONE, {"app": "ml-pipeline", "application-crd-id": "kubeflow"}, 8888)


def test_the_policies_follow_the_objects_the_stack_applies(tmp_path: Path):
    """A release that adds a port to a controller's Service moves its policy with it (kserveSource is
    read by the program, as the vendored files are)."""
    text = vendored(KSERVE).manifest.read_text()
    moved = text.replace("targetPort: webhook-server", "targetPort: 9444", 1)
    assert moved != text
    mirror = tmp_path / "kserve.yaml"
    mirror.write_text(moved)
    rendering = render_config({**EVERYTHING, "kserveSource": str(mirror)})
    (policy,) = [p for p in _policies(rendering, "kserve")]
    ports = {p["port"] for p in policy["spec"]["ingress"][0]["ports"]}
    assert 9444 in ports


def test_a_controller_with_no_service_admits_nothing():
    deployment = {
        "kind": "Deployment",
        "metadata": {"name": "quiet", "namespace": "ops"},
        "spec": {
            "selector": {"matchLabels": {"app": "quiet"}},
            "template": {"metadata": {"labels": {"app": "quiet"}}, "spec": {"containers": [{"name": "c"}]}},
        },
    }
    other = {
        "kind": "Service",
        "metadata": {"name": "s", "namespace": "ops"},
        "spec": {"selector": {"app": "x"}, "ports": [{"port": 80}]},
    }
    (policy,) = ingress_policies([deployment, other])
    assert policy["spec"] == {
        "podSelector": {"matchLabels": {"app": "quiet"}},
        "policyTypes": ["Ingress"],
        "ingress": [],
    }
    assert not allowed([policy], SOMEONE, {"app": "quiet"}, 80)


def test_a_named_port_the_pod_does_not_declare_is_kept_by_name():
    deployment = {
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "ops"},
        "spec": {
            "selector": {"matchLabels": {"app": "d"}},
            "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c"}]}},
        },
    }
    service = {
        "kind": "Service",
        "metadata": {"name": "d", "namespace": "ops"},
        "spec": {
            "selector": {"app": "d"},
            "ports": [{"port": 443, "targetPort": "webhook", "protocol": "TCP"}],
        },
    }
    (policy,) = ingress_policies([deployment, service])
    assert policy["spec"]["ingress"] == [{"ports": [{"protocol": "TCP", "port": "webhook"}]}]


@pytest.mark.parametrize("component", [TRAINING_OPERATOR, TRAINER])
def test_a_kustomize_source_the_program_does_not_read_gets_no_policy_and_says_so(component, monkeypatch):
    warned: list[str] = []
    monkeypatch.setattr(operator_ingress.pulumi.log, "warn", lambda message, *_, **__: warned.append(message))
    key = {TRAINING_OPERATOR: "operatorSource", TRAINER: "trainerSource"}[component]
    source = "https://github.com/example/mirror//manifests?ref=v1.9.4"
    rendering = render_config({**EVERYTHING, key: source})
    namespaces = {p["metadata"]["namespace"] for p in by_kind(rendering, "NetworkPolicy")}
    gone = {TRAINING_OPERATOR: "kubeflow", TRAINER: "kubeflow-system"}[component]
    assert gone not in namespaces and "kserve" in namespaces
    assert [m for m in warned if key in m] == [
        f"config ddp-mnist:{key}={source} is a kustomize source this program does not read: "
        f"{ {TRAINING_OPERATOR: 'the training operator', TRAINER: 'Trainer v2'}[component] }'s pods get no "
        "ingress NetworkPolicy from this stack (docs/explanation/controllers.md)"
    ]


def test_reading_the_vendored_files_skips_their_crds():
    for name in (TRAINING_OPERATOR, TRAINER, KSERVE):
        objects = read_objects(str(vendored(name).manifest))
        assert objects and not [o for o in objects if o["kind"] == "CustomResourceDefinition"]
        assert [o for o in objects if o["kind"] == "Deployment"]
