"""Least privilege for the training job: its own ServiceAccount (no token, no RBAC) and a NetworkPolicy.

The NetworkPolicy selects the job's pods by `JOB_LABEL` and lets them talk only to each other (on any
TCP port, or only the rendezvous and ephemeral ports), to cluster DNS and to the S3 endpoint (and, for a
TrainJob with trainerProgress, to Kubeflow Trainer's status endpoint).
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from infra.program.common.meta import (
    JOB_LABEL,
    STATUS_SERVER_PORT,
    TRAINER_NAMESPACE,
    TRAINER_POD_LABELS,
    JobNames,
    labels,
)
from infra.program.settings import PROJECT, Settings

net = k8s.networking.v1
meta = k8s.meta.v1

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace
DNS_NAMESPACE = "kube-system"
# gloo and NCCL do not listen on a fixed port: gloo's pair listeners, NCCL's bootstrap root and its
# socket transport bind port 0, so the kernel hands them a port from the pod network namespace's
# net.ipv4.ip_local_port_range, 32768-60999 unless changed. Peers of the same job may reach that whole
# range (TCP); nobody else may reach any port. RDMA (InfiniBand/RoCE) traffic bypasses NetworkPolicy.
EPHEMERAL_PORTS = (32768, 60999)
# What "the public internet" leaves out: private (RFC 1918), shared (RFC 6598, carrier-grade NAT and some
# clouds' pod ranges), loopback and link-local (169.254.169.254, the instance metadata address on every
# cloud) for IPv4; unique-local, link-local and loopback for IPv6.
NOT_PUBLIC_V4 = (
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
)
NOT_PUBLIC_V6 = ("::1/128", "fc00::/7", "fe80::/10")


def public_internet() -> list[net.NetworkPolicyPeerArgs]:
    """Peers for any public address, IPv4 and IPv6, and no cluster-internal or metadata address."""
    return [
        net.NetworkPolicyPeerArgs(ip_block=net.IPBlockArgs(cidr="0.0.0.0/0", except_=list(NOT_PUBLIC_V4))),
        net.NetworkPolicyPeerArgs(ip_block=net.IPBlockArgs(cidr="::/0", except_=list(NOT_PUBLIC_V6))),
    ]


@dataclass(frozen=True)
class Destination:
    """A server the pods connect to: a port, and the namespace when it is an in-cluster Service; for a
    server outside the cluster, the CIDRs the stack declares for it (none: any public address)."""

    port: int
    namespace: str | None
    cidrs: tuple[str, ...] = ()


def destination(host: str, port: int, namespace: str, cidrs: list[str] | None = None) -> Destination:
    """`host` as a NetworkPolicy can express it. For an in-cluster Service the rule's peers are pods (a
    namespace selector) and a NetworkPolicy port is "a numerical or named port on a pod"
    (networking/v1 NetworkPolicyPort), so a Service whose port differs from its targetPort needs the
    targetPort (minioEgressPort, mlflowEgressPort) while the client keeps dialling the Service's port.

    `minio` (one label) is a Service of the job's own `namespace`; `minio.storage.svc` and
    `minio.storage.svc.cluster.local` are Services of namespace `storage`; anything else is outside the
    cluster's Service names: its addresses are `cidrs` when the stack declares them, else any public
    address (never a private, link-local or metadata one).
    """
    parts = host.split(".")
    if len(parts) == 1:
        return Destination(port, namespace)
    if len(parts) >= 3 and parts[2] == "svc":
        return Destination(port, parts[1])
    return Destination(port, None, tuple(cidrs or ()))


def s3_destination(settings: Settings) -> Destination | None:
    """The S3 endpoint, or None when no endpoint is configured; the port is `minioEgressPort` when set,
    else the endpoint's."""
    if not settings.minio_endpoint:
        return None
    host, _, port = settings.minio_endpoint.partition(":")
    number = settings.minio_egress_port or (int(port) if port else (443 if settings.minio_tls else 80))
    return destination(host, number, settings.namespace, settings.minio_egress_cidrs)


def tracking_destination(settings: Settings) -> Destination | None:
    """The MLflow tracking server, or None without mlflowTrackingUri; the port is `mlflowEgressPort`
    when set, else the URI's, else 80 for http and 443 for https."""
    if not settings.mlflow_tracking_uri:
        return None
    scheme, _, rest = settings.mlflow_tracking_uri.partition("://")
    host, _, port = rest.split("/", 1)[0].partition(":")
    number = settings.mlflow_egress_port or (int(port) if port else (443 if scheme == "https" else 80))
    return destination(host, number, settings.namespace, settings.mlflow_egress_cidrs)


def job_pods(names: JobNames) -> meta.LabelSelectorArgs:
    """The job's pods, and only them: every pod template of the job carries this label, nothing else does."""
    return meta.LabelSelectorArgs(match_labels={JOB_LABEL: names.job})


def namespace_peer(name: str) -> net.NetworkPolicyPeerArgs:
    return net.NetworkPolicyPeerArgs(
        namespace_selector=meta.LabelSelectorArgs(match_labels={NAMESPACE_NAME_LABEL: name})
    )


def peer_ports(settings: Settings) -> list[net.NetworkPolicyPortArgs]:
    """Every TCP port by default: `endPort` is applied as its first port alone by network plugins that
    lack it (the Kubernetes docs say so; Azure Network Policy Manager is one), and training then hangs
    until the collective timeout. The narrower rule: rendezvous (torchrun's TCPStore on the master port)
    and the collectives' ephemeral ports."""
    if settings.job_network_policy_peer_ports == "all":
        return [net.NetworkPolicyPortArgs(protocol="TCP")]
    low, high = EPHEMERAL_PORTS
    return [
        net.NetworkPolicyPortArgs(protocol="TCP", port=settings.job_master_port),
        net.NetworkPolicyPortArgs(protocol="TCP", port=low, end_port=high),
    ]


def dns_peers(settings: Settings) -> list[net.NetworkPolicyPeerArgs]:
    """Where DNS is answered: kube-system's pods (kube-dns, CoreDNS), and node-local addresses that no
    pod selector matches (NodeLocal DNSCache's 169.254.20.10, default on GKE Standard from 1.33.1; GKE
    Cloud DNS at 169.254.169.254, which only the GKE stacks add: on EKS and AKS that address is the
    instance metadata service)."""
    blocks = [
        net.NetworkPolicyPeerArgs(ip_block=net.IPBlockArgs(cidr=c)) for c in settings.job_dns_egress_cidrs
    ]
    return [namespace_peer(DNS_NAMESPACE), *blocks]


def dns_egress(settings: Settings) -> net.NetworkPolicyEgressRuleArgs:
    """Out to DNS (port 53, UDP and TCP) wherever the cluster answers it (`dns_peers`)."""
    return net.NetworkPolicyEgressRuleArgs(
        to=dns_peers(settings),
        ports=[net.NetworkPolicyPortArgs(protocol=p, port=53) for p in ("UDP", "TCP")],
    )


def egress_to(server: Destination) -> net.NetworkPolicyEgressRuleArgs:
    """Out to the server's pods (their namespace) on its port; for a server outside the cluster, to the
    CIDRs declared for it, else to public addresses only, on that port."""
    if server.namespace:
        to = [namespace_peer(server.namespace)]
    else:
        declared = [net.NetworkPolicyPeerArgs(ip_block=net.IPBlockArgs(cidr=c)) for c in server.cidrs]
        to = declared or public_internet()
    return net.NetworkPolicyEgressRuleArgs(
        to=to, ports=[net.NetworkPolicyPortArgs(protocol="TCP", port=server.port)]
    )


def trainer_status_egress() -> net.NetworkPolicyEgressRuleArgs:
    """Out to Kubeflow Trainer's controller pods on its status endpoint's port (trainerProgress): the
    TrainJob progress report (`trainer/trainjob_status.py`)."""

    controller = net.NetworkPolicyPeerArgs(
        namespace_selector=meta.LabelSelectorArgs(match_labels={NAMESPACE_NAME_LABEL: TRAINER_NAMESPACE}),
        pod_selector=meta.LabelSelectorArgs(match_labels=TRAINER_POD_LABELS),
    )
    return net.NetworkPolicyEgressRuleArgs(
        to=[controller], ports=[net.NetworkPolicyPortArgs(protocol="TCP", port=STATUS_SERVER_PORT)]
    )


def network_policy_spec(settings: Settings, names: JobNames) -> net.NetworkPolicySpecArgs:
    """Ingress only from the same job's pods; egress only to them, to DNS, to the S3 endpoint, to the
    MLflow tracking server and, for a TrainJob reporting its progress, to Trainer's status endpoint."""
    peers = [net.NetworkPolicyPeerArgs(pod_selector=job_pods(names))]
    egress = [dns_egress(settings), net.NetworkPolicyEgressRuleArgs(to=peers, ports=peer_ports(settings))]
    s3 = s3_destination(settings)
    if s3 is not None:
        egress.append(egress_to(s3))
    tracking = tracking_destination(settings)
    if tracking is not None:
        egress.append(egress_to(tracking))
    if settings.job_kind == "trainjob" and settings.trainer_progress:
        egress.append(trainer_status_egress())
    return net.NetworkPolicySpecArgs(
        pod_selector=job_pods(names),
        policy_types=["Ingress", "Egress"],
        ingress=[net.NetworkPolicyIngressRuleArgs(from_=peers, ports=peer_ports(settings))],
        egress=egress,
    )


class JobNetworkPolicy(pulumi.ComponentResource):
    """The NetworkPolicy of one training job, named after the job."""

    def __init__(
        self,
        name: str,
        settings: Settings,
        names: JobNames,
        namespace: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{PROJECT}:isolation:JobNetworkPolicy", name, {}, opts)
        policy = net.NetworkPolicy(
            f"{name}-policy",
            metadata=meta.ObjectMetaArgs(
                name=names.job, namespace=namespace, labels=labels(settings, "trainer")
            ),
            spec=network_policy_spec(settings, names),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.policy_name = policy.metadata.name
        self.register_outputs({"policy_name": self.policy_name})


DEFAULT_DENY = f"{PROJECT}-default-deny"


def default_deny(
    settings: Settings,
    namespace: pulumi.Input[str],
    resource_name: str = "default-deny",
    opts: pulumi.ResourceOptions | None = None,
) -> net.NetworkPolicy:
    """Every pod of the namespace isolated both ways unless a policy of its own allows it (the job's,
    the seed's, the server's): a pod nobody wrote a policy for reaches nothing and nothing reaches it."""
    return net.NetworkPolicy(
        resource_name,
        metadata=meta.ObjectMetaArgs(
            name=DEFAULT_DENY, namespace=namespace, labels=labels(settings, "namespace")
        ),
        spec=net.NetworkPolicySpecArgs(
            pod_selector=meta.LabelSelectorArgs(), policy_types=["Ingress", "Egress"]
        ),
        opts=opts,
    )


def mirror_ports(settings: Settings) -> list[int]:
    """The TCP ports of the seedMirrors' URLs (443 where a URL names none), each once."""
    return sorted({urllib.parse.urlsplit(url).port or 443 for url in settings.seed_mirrors})


def https_egress(settings: Settings) -> net.NetworkPolicyEgressRuleArgs:
    """Out to the MNIST mirrors' ports (`mirror_ports`), at seedHttpsEgressCidrs, else at public
    addresses only."""
    to = [
        net.NetworkPolicyPeerArgs(ip_block=net.IPBlockArgs(cidr=c)) for c in settings.seed_https_egress_cidrs
    ] or public_internet()
    return net.NetworkPolicyEgressRuleArgs(
        to=to, ports=[net.NetworkPolicyPortArgs(protocol="TCP", port=p) for p in mirror_ports(settings)]
    )


class JobServiceAccount(pulumi.ComponentResource):
    """The job's own identity: a ServiceAccount without a token and without any Role bound to it.

    The trainer never calls the Kubernetes API, so it needs no RBAC; a dedicated account (rather than
    the namespace's `default`) keeps anything bound to `default` later from reaching the trainer.
    """

    service_account_name: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        settings: Settings,
        names: JobNames,
        namespace: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{PROJECT}:isolation:JobServiceAccount", name, {}, opts)
        account = k8s.core.v1.ServiceAccount(
            f"{name}-account",
            metadata=meta.ObjectMetaArgs(
                name=names.job, namespace=namespace, labels=labels(settings, "trainer")
            ),
            automount_service_account_token=False,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.service_account_name = account.metadata.name
        self.register_outputs({"service_account_name": self.service_account_name})
