"""Least privilege as rendered: the job's NetworkPolicy and ServiceAccount, and the namespace budget."""

from __future__ import annotations

import re

import kubernetes_validate
import pytest

from infra.program.checks import ConfigError
from infra.program.common.isolation import EPHEMERAL_PORTS
from infra.program.common.meta import JOB_LABEL
from tests.infra.conftest import (
    JOB_STACKS,
    by_kind,
    is_training_job,
    one,
    pod_templates,
    render_config,
    shipped,
    team_policies,
)

STACKS = JOB_STACKS
DNS_RULE = {
    "to": [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}},
        {"ipBlock": {"cidr": "169.254.20.10/32"}},  # NodeLocal DNSCache; not the metadata address
    ],
    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
}
RBAC_KINDS = {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}


def _selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items()) and not selector.get(
        "matchExpressions"
    )


def _peer_ports(master_port=23456):
    low, high = EPHEMERAL_PORTS
    return [{"protocol": "TCP", "port": master_port}, {"protocol": "TCP", "port": low, "endPort": high}]


@pytest.mark.parametrize("name", STACKS)
def test_network_policy_selects_exactly_the_jobs_pods(name):
    rendering = shipped(name)
    (policy,) = [p for p in team_policies(rendering) if p["metadata"]["name"] == "mnist-r1"]
    selector = policy["spec"]["podSelector"]
    assert selector == {"matchLabels": {JOB_LABEL: "mnist-r1"}}
    templates = pod_templates(rendering)
    assert all(_selects(selector, t["metadata"]["labels"]) for t in templates)
    others = [o for o in rendering.objects if o["kind"] not in ("PyTorchJob", "Job")]
    others += [o["spec"]["template"] for o in by_kind(rendering, "Job") if not is_training_job(o)]
    assert others and not any(_selects(selector, o["metadata"].get("labels", {})) for o in others)


@pytest.mark.parametrize("name", STACKS)
def test_dns_egress_reaches_the_metadata_address_on_gke_stacks_only(name):
    rendering = shipped(name)
    (policy,) = [p for p in team_policies(rendering) if p["metadata"]["name"] == "mnist-r1"]
    blocks = [peer["ipBlock"]["cidr"] for peer in policy["spec"]["egress"][0]["to"] if "ipBlock" in peer]
    metadata = "169.254.169.254/32" in blocks
    assert metadata == name.startswith("gke-"), (name, blocks)  # GKE's Cloud DNS; IMDS elsewhere


def test_network_policy_of_one_run_does_not_select_another_runs_pods():
    first = job_policy(render_config({"jobRunId": "r1"}))
    second_pods = pod_templates(render_config({"jobRunId": "r2"}))
    assert not any(_selects(first["spec"]["podSelector"], t["metadata"]["labels"]) for t in second_pods)


@pytest.mark.parametrize("kind", ["pytorchjob", "indexed-job"])
def test_only_the_jobs_own_pods_reach_it_on_any_tcp_port_without_end_port(kind):
    """No `endPort` by default: plugins without it apply only its first port, and training hangs."""
    spec = job_policy(render_config({"jobKind": kind, "jobMasterPort": 29500}))["spec"]
    same_job = [{"podSelector": {"matchLabels": {JOB_LABEL: "mnist-r1"}}}]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["ingress"] == [{"from": same_job, "ports": [{"protocol": "TCP"}]}]
    assert spec["egress"] == [DNS_RULE, {"to": same_job, "ports": [{"protocol": "TCP"}]}]
    assert "endPort" not in repr(spec)


@pytest.mark.parametrize("kind", ["pytorchjob", "indexed-job"])
def test_the_narrower_peer_rule_is_rendezvous_and_collective_ports(kind):
    values = {
        "jobKind": kind,
        "jobMasterPort": 29500,
        "jobNetworkPolicyPeerPorts": "rendezvous-and-ephemeral",
    }
    spec = job_policy(render_config(values))["spec"]
    same_job = [{"podSelector": {"matchLabels": {JOB_LABEL: "mnist-r1"}}}]
    assert spec["ingress"] == [{"from": same_job, "ports": _peer_ports(29500)}]
    assert spec["egress"][1] == {"to": same_job, "ports": _peer_ports(29500)}


def test_dns_egress_addresses_are_configurable():
    spec = job_policy(render_config({"jobDnsEgressCidrs": ["10.96.0.10/32"]}))["spec"]
    assert spec["egress"][0]["to"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}},
        {"ipBlock": {"cidr": "10.96.0.10/32"}},
    ]
    assert job_policy(render_config({"jobDnsEgressCidrs": []}))["spec"]["egress"][0]["to"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}
    ]


PUBLIC = [
    {
        "ipBlock": {
            "cidr": "0.0.0.0/0",
            "except": [
                "10.0.0.0/8",
                "100.64.0.0/10",
                "127.0.0.0/8",
                "169.254.0.0/16",
                "172.16.0.0/12",
                "192.168.0.0/16",
            ],
        }
    },
    {"ipBlock": {"cidr": "::/0", "except": ["::1/128", "fc00::/7", "fe80::/10"]}},
]


@pytest.mark.parametrize(
    ("endpoint", "tls", "s3_rule"),
    [
        (
            "minio.minio.svc:9000",
            False,
            {
                "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "minio"}}}],
                "ports": [{"protocol": "TCP", "port": 9000}],
            },
        ),
        (
            "minio.storage.svc.cluster.local",
            True,
            {
                "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "storage"}}}],
                "ports": [{"protocol": "TCP", "port": 443}],
            },
        ),
        (
            "minio:9000",
            False,
            {
                "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ddp-mnist"}}}],
                "ports": [{"protocol": "TCP", "port": 9000}],
            },
        ),
        # Outside the cluster: public addresses only, never the VPC's, the node's or the metadata's.
        ("s3.eu-west-1.amazonaws.com", True, {"to": PUBLIC, "ports": [{"protocol": "TCP", "port": 443}]}),
        ("minio.example.internal", False, {"to": PUBLIC, "ports": [{"protocol": "TCP", "port": 80}]}),
        # ... or the addresses the stack declares for it.
        (
            "minio.example.internal|10.20.0.0/16",
            False,
            {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}], "ports": [{"protocol": "TCP", "port": 80}]},
        ),
    ],
)
def test_egress_to_the_s3_endpoint(endpoint, tls, s3_rule):
    endpoint, _, cidr = endpoint.partition("|")
    rendering = render_config(
        {"jobDataSource": "s3", "minioEndpoint": endpoint, "minioTls": tls}
        | ({"minioEgressCidrs": [cidr]} if cidr else {}),
        secrets={"minioAccessKey": "AKIAEXAMPLE", "minioSecretKey": "example"},
    )
    dns, peers, s3 = job_policy(rendering)["spec"]["egress"]
    assert dns == DNS_RULE
    assert s3 == s3_rule


def test_the_tracking_servers_egress_is_its_declared_cidrs_or_public_addresses():
    for extra, to in (
        ({}, PUBLIC),
        ({"mlflowEgressCidrs": ["10.9.0.0/24"]}, [{"ipBlock": {"cidr": "10.9.0.0/24"}}]),
    ):
        rendering = render_config({"mlflowTrackingUri": "https://mlflow.example.com", **extra})
        (rule,) = [
            r
            for r in job_policy(rendering)["spec"]["egress"]
            if r["ports"] == [{"protocol": "TCP", "port": 443}]
        ]
        assert rule["to"] == to


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"minioEndpoint": "10.20.1.5:9000"},
            "minioEgressCidrs=[] is invalid: must be the CIDR of 10.20.1.5 (minioEndpoint), a private, "
            "link-local or shared address: without it the pods may reach public addresses only",
        ),
        (
            {"minioEndpoint": "minio.minio.svc:9000", "minioEgressCidrs": ["10.0.0.0/8"]},
            'minioEgressCidrs=["10.0.0.0/8"] is invalid: must be empty when minioEndpoint is unset or a '
            "Service name: the pods reach that Service's namespace",
        ),
        (
            {"minioEndpoint": "minio.minio.svc:9000", "mlflowTrackingUri": "http://169.254.169.254/"},
            "mlflowEgressCidrs=[] is invalid: must be the CIDR of 169.254.169.254 (mlflowTrackingUri)",
        ),
        ({"minioEgressCidrs": ["10.20.0.1/16"]}, "minioEgressCidrs=.* is invalid: must be CIDRs such as"),
    ],
)
def test_egress_cidrs_only_for_a_server_outside_the_cluster_and_required_for_a_private_address(
    values, message
):
    with pytest.raises(ConfigError, match=re.escape(message) if "=.*" not in message else message):
        render_config(
            {"jobDataSource": "s3", **values},
            secrets={"minioAccessKey": "AKIAEXAMPLE", "minioSecretKey": "example"},
        )


def test_network_policy_exists_before_the_job_and_can_be_turned_off():
    for kind, job_type in (
        ("pytorchjob", "kubernetes:kubeflow.org/v1:PyTorchJob"),
        ("indexed-job", "kubernetes:batch/v1:Job"),
    ):
        (job,) = [r for r in render_config({"jobKind": kind}).registrations if r.type == job_type]
        assert "network-policy" in job.dependencies
    rendering = render_config({"jobNetworkPolicy": False})
    assert team_policies(rendering) == []
    (job,) = [r for r in rendering.registrations if r.type.endswith(":PyTorchJob") and r.custom]
    assert "network-policy" not in job.dependencies


@pytest.mark.parametrize("name", STACKS)
def test_pods_run_as_their_own_service_account_without_token_or_rbac(name):
    rendering = shipped(name)
    (account,) = [
        a
        for a in by_kind(rendering, "ServiceAccount")
        if a["metadata"]["labels"]["app.kubernetes.io/component"] == "trainer"
    ]
    assert account["metadata"]["name"] == "mnist-r1"
    assert account["automountServiceAccountToken"] is False
    for template in pod_templates(rendering):
        assert template["spec"]["serviceAccountName"] == "mnist-r1"
        assert template["spec"]["automountServiceAccountToken"] is False
    assert not RBAC_KINDS & {r.type.rsplit(":", 1)[-1] for r in rendering.registrations}
    assert rendering.outputs["serviceAccount"] == "mnist-r1"


def test_new_objects_are_children_named_after_their_components():
    rendering = render_config({"namespaceGpuQuota": 8, "namespaceMaxGpusPerContainer": 4})
    parents = {r.name: (r.type, r.parent) for r in rendering.registrations}
    assert parents["identity"] == ("ddp-mnist:isolation:JobServiceAccount", "")
    assert parents["network"] == ("ddp-mnist:isolation:JobNetworkPolicy", "")
    assert parents["budget"] == ("ddp-mnist:budget:NamespaceBudget", "")
    assert parents["identity-account"] == ("kubernetes:core/v1:ServiceAccount", "identity")
    assert parents["network-policy"] == ("kubernetes:networking.k8s.io/v1:NetworkPolicy", "network")
    assert parents["budget-quota"] == ("kubernetes:core/v1:ResourceQuota", "budget")
    assert parents["budget-limits"] == ("kubernetes:core/v1:LimitRange", "budget")


@pytest.mark.parametrize("name", STACKS)
def test_no_budget_unless_configured(name):
    rendering = shipped(name)
    assert by_kind(rendering, "ResourceQuota") == by_kind(rendering, "LimitRange") == []
    assert not any(r.type.endswith(":NamespaceBudget") for r in rendering.registrations)


def test_namespace_budget_from_config():
    rendering = render_config(
        {
            "jobGpusPerNode": 2,
            "jobProcsPerNode": 2,
            "namespaceGpuQuota": 8,
            "namespaceCpuQuota": "64",
            "namespaceMemoryQuota": "256Gi",
            "namespaceMaxGpusPerContainer": 4,
            "namespaceDefaultCpuRequest": "250m",
            "namespaceDefaultMemoryRequest": "256Mi",
        }
    )
    quota, limits = one(rendering, "ResourceQuota"), one(rendering, "LimitRange")
    assert (quota["metadata"]["name"], quota["metadata"]["namespace"]) == ("ddp-mnist-budget", "ddp-mnist")
    assert quota["spec"] == {
        "hard": {"requests.nvidia.com/gpu": "8", "requests.cpu": "64", "requests.memory": "256Gi"}
    }
    assert limits["spec"] == {
        "limits": [
            {
                "type": "Container",
                "max": {"nvidia.com/gpu": "4"},
                # Without it the API server would default every container's GPU limit to the max.
                "default": {"nvidia.com/gpu": "0"},
                "defaultRequest": {"cpu": "250m", "memory": "256Mi"},
            }
        ]
    }
    for obj in (quota, limits):
        kubernetes_validate.validate(obj, "1.33.0", strict=True)


def test_budget_parts_are_independent():
    only_quota = render_config({"namespaceGpuQuota": 4})
    assert one(only_quota, "ResourceQuota")["spec"]["hard"] == {"requests.nvidia.com/gpu": "4"}
    assert by_kind(only_quota, "LimitRange") == []
    only_defaults = render_config({"namespaceDefaultMemoryRequest": "128Mi"})
    assert by_kind(only_defaults, "ResourceQuota") == []
    assert one(only_defaults, "LimitRange")["spec"]["limits"] == [
        {"type": "Container", "defaultRequest": {"memory": "128Mi"}}
    ]


def job_policy(rendering) -> dict:
    """The job's own NetworkPolicy (not the namespace's default deny)."""
    (policy,) = [p for p in team_policies(rendering) if p["metadata"]["name"] != "ddp-mnist-default-deny"]
    return policy


def test_the_namespace_denies_every_pod_without_a_policy_of_its_own():
    rendering = render_config({"serveKind": "deployment", "jobWait": True, "seedSource": "https"})
    (deny,) = [p for p in team_policies(rendering) if p["metadata"]["name"] == "ddp-mnist-default-deny"]
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    # Every pod the stack runs has a policy of its own that lets it do its work.
    selectors = [p["spec"]["podSelector"]["matchLabels"] for p in team_policies(rendering) if p is not deny]
    workloads = [o for o in rendering.objects if o["kind"] in ("Job", "PyTorchJob", "Deployment")]
    assert sorted(w["kind"] for w in workloads) == ["Deployment", "Job", "PyTorchJob"]  # seed, job, server
    for workload in workloads:
        templates = (
            [r["template"] for r in workload["spec"]["pytorchReplicaSpecs"].values()]
            if workload["kind"] == "PyTorchJob"
            else [workload["spec"]["template"]]
        )
        for template in templates:
            pod_labels = template["metadata"]["labels"]
            assert any(all(pod_labels.get(k) == v for k, v in s.items()) for s in selectors), workload["kind"]
    # Without the job's own policy there is no default deny either: the job's pods would reach nothing.
    assert [p["metadata"]["name"] for p in team_policies(render_config({"jobNetworkPolicy": False}))] == []
