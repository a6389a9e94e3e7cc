"""NetworkPolicies of the prerequisites stack's namespaces: each gets the namespace default deny, and each
of its pods a policy of its own with what it serves and what it reaches, nothing more.

- MinIO (namespace minio): in, TCP 9000 from the pods of every namespace (the job stacks' seeds, trainers
  and servers, wherever their namespaces are); out, DNS alone.
- The bucket fill Job: in, nothing; out, DNS, MinIO's pods on 9000, and HTTPS to its MNIST mirrors
  (seedHttpsEgressCidrs, else public addresses only, never a private, link-local or metadata one).
- The NFS server (namespace nfs-system): in, its NFS ports (2049/TCP, 111/UDP) from any address (the
  kubelets mount it from their nodes' addresses, which no pod selector matches; csi-driver-nfs's
  controller mounts it to make each volume's directory); out, nothing.

A kubelet's probes come from the node, which a NetworkPolicy never blocks.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from infra.program.common.isolation import default_deny, dns_egress, https_egress
from infra.program.common.meta import JOB_LABEL, labels
from infra.program.settings import Settings
from infra.program.settings.prerequisites import MINIO_PORT

net = k8s.networking.v1
meta = k8s.meta.v1
ANY_ADDRESS = ("0.0.0.0/0", "::/0")


def minio_policy_spec(settings: Settings, minio: dict[str, str]) -> net.NetworkPolicySpecArgs:
    """MinIO's pods (`minio`: the labels its Service selects)."""
    every_namespace = net.NetworkPolicyPeerArgs(namespace_selector=meta.LabelSelectorArgs())
    return net.NetworkPolicySpecArgs(
        pod_selector=meta.LabelSelectorArgs(match_labels=minio),
        policy_types=["Ingress", "Egress"],
        ingress=[
            net.NetworkPolicyIngressRuleArgs(
                from_=[every_namespace], ports=[net.NetworkPolicyPortArgs(protocol="TCP", port=MINIO_PORT)]
            )
        ],
        egress=[dns_egress(settings)],
    )


def fill_policy_spec(settings: Settings, fill_job: str, minio: dict[str, str]) -> net.NetworkPolicySpecArgs:
    """The fill Job's pods, reaching MinIO's (`minio`: the labels its Service selects)."""
    store = net.NetworkPolicyPeerArgs(pod_selector=meta.LabelSelectorArgs(match_labels=minio))
    return net.NetworkPolicySpecArgs(
        pod_selector=meta.LabelSelectorArgs(match_labels={JOB_LABEL: fill_job}),
        policy_types=["Ingress", "Egress"],
        egress=[
            dns_egress(settings),
            net.NetworkPolicyEgressRuleArgs(
                to=[store], ports=[net.NetworkPolicyPortArgs(protocol="TCP", port=MINIO_PORT)]
            ),
            https_egress(settings),
        ],
    )


def nfs_policy_spec(
    server: dict[str, str], ports: tuple[tuple[str, int, str], ...]
) -> net.NetworkPolicySpecArgs:
    """The NFS server's pods (`server`: the labels its Service selects) on its `ports`."""
    anywhere = [net.NetworkPolicyPeerArgs(ip_block=net.IPBlockArgs(cidr=c)) for c in ANY_ADDRESS]
    every_namespace = net.NetworkPolicyPeerArgs(namespace_selector=meta.LabelSelectorArgs())
    return net.NetworkPolicySpecArgs(
        pod_selector=meta.LabelSelectorArgs(match_labels=server),
        policy_types=["Ingress", "Egress"],
        ingress=[
            net.NetworkPolicyIngressRuleArgs(
                from_=[*anywhere, every_namespace],
                ports=[
                    net.NetworkPolicyPortArgs(protocol=protocol, port=number) for _, number, protocol in ports
                ],
            )
        ],
    )


def namespace_policies(
    name: str,
    settings: Settings,
    namespace: pulumi.Input[str],
    specs: dict[str, net.NetworkPolicySpecArgs],
    opts: pulumi.ResourceOptions,
) -> list[net.NetworkPolicy]:
    """The namespace's default deny and one named policy per spec, as children of the calling component
    (what a pod of the namespace waits for: without its own policy the default deny isolates it)."""
    return [
        default_deny(settings, namespace, f"{name}-default-deny", opts),
        *(
            net.NetworkPolicy(
                f"{name}-{policy}-policy",
                metadata=meta.ObjectMetaArgs(
                    name=policy, namespace=namespace, labels=labels(settings, policy)
                ),
                spec=spec,
                opts=opts,
            )
            for policy, spec in specs.items()
        ),
    ]
