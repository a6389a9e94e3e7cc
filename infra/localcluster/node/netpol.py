"""The real node's NetworkPolicy engine: kube-router v2.10.0's network policy controller alone
(parts/kube-router), a host process beside kube-proxy, as its DaemonSet runs it on a node.

Only the firewall runs (`--run-firewall`, no router, no service proxy: kube-proxy keeps the Services).
It finds its node by name and the node's address on a local interface (upstream pkg/utils/node.go), and
enforces the policies of the pods whose host address is the node's (pkg/controllers/netpol/pod.go), so
KWOK's pods are peers in its sets, never filtered. Pods on the same bridge are filtered only with
`net.bridge.bridge-nf-call-iptables=1`, which the node sets (host.SYSCTLS). Its health port is on
127.0.0.1; metrics and pprof stay off.

It leaves its rules behind when it stops (upstream: SIGTERM only closes its stop channel): the node's
teardown removes them (host.flush_chains, its chains start with KUBE-) and its ip sets (host.IPSET_PREFIXES).
"""

from __future__ import annotations

import urllib.request

from infra.localcluster.components import SERVICE_CIDR
from infra.localcluster.kube import Client, Obj
from infra.localcluster.node.addons import user_role
from infra.localcluster.node.config import NODE_NAME

USER = "system:kube-router"
HEALTH_PORT = 20244


def rbac() -> list[tuple[str, Obj]]:
    """Upstream's ClusterRole for the informers it starts even firewall-only (pkg/cmd/kube-router.go):
    services, endpointslices, pods, nodes, namespaces and networkpolicies."""
    rules = [
        {
            "apiGroups": [""],
            "resources": ["namespaces", "pods", "services", "nodes"],
            "verbs": ["get", "list", "watch"],
        },
        {
            "apiGroups": ["discovery.k8s.io"],
            "resources": ["endpointslices"],
            "verbs": ["get", "list", "watch"],
        },
        {
            "apiGroups": ["networking.k8s.io"],
            "resources": ["networkpolicies"],
            "verbs": ["get", "list", "watch"],
        },
    ]
    return user_role(USER, rules)


def grant(client: Client) -> None:
    for path, obj in rbac():
        client.apply(path, obj)


def args(binary: str, kubeconfig: str) -> list[str]:
    return [
        binary,
        f"--kubeconfig={kubeconfig}",
        f"--hostname-override={NODE_NAME}",
        "--run-firewall=true",
        "--run-router=false",
        "--run-service-proxy=false",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--health-addr=127.0.0.1",
        f"--health-port={HEALTH_PORT}",
        "--v=1",
    ]


def healthy() -> bool:
    """Its controllers report healthy (upstream pkg/healthcheck: /healthz once each has synced)."""
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy of the environment's
    try:
        with direct.open(f"http://127.0.0.1:{HEALTH_PORT}/healthz", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False
