"""The cluster add-ons the real node runs as pods, as kubeadm installs them: CoreDNS behind the kube-dns
Service at CLUSTER_DNS (what the kubelet's `clusterDNS` names).

CoreDNS runs on the pod network in kube-system, as on kind, kubeadm or a cloud's cluster, so a
NetworkPolicy's peer "kube-system's pods" matches it. The API server listens on 127.0.0.1 only (its
`kubernetes` Service's endpoint is an address where nothing listens), so CoreDNS reaches it through the
node's relay (node.py, API_RELAY_PORT) with a kubeconfig of its own identity, `system:coredns`, with the
rights upstream's CoreDNS manifest gives it (read services, endpoints, endpointslices, pods and
namespaces). It forwards nothing: a name outside the cluster does not resolve from a pod.
"""

from __future__ import annotations

import base64
import time

import yaml

from infra.localcluster import components, pki
from infra.localcluster.cluster import State
from infra.localcluster.kube import Client, Obj
from infra.localcluster.node.config import (
    API_RELAY_PORT,
    API_SERVER_NAME,
    CLUSTER_DNS,
    CLUSTER_DOMAIN,
    NODE_IP,
    NODE_LABEL,
    NODE_TAINT,
)

NAMESPACE = "kube-system"
NAME = "coredns"
USER = "system:coredns"
READY_TIMEOUT_S = 90

COREFILE = f"""\
.:53 {{
    errors
    health :8080
    ready :8181
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig /etc/coredns/kubeconfig ddp-mnist-local
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    cache 5
    loop
    loadbalance
}}
"""


RBAC = "rbac.authorization.k8s.io"


def user_role(user: str, rules: list[Obj], namespace: str = "") -> list[tuple[str, Obj]]:
    """(collection path, object) of a role named `user` with `rules`, bound to the user `user` (an
    identity of a client certificate): a ClusterRole and its binding, or a Role and its binding in
    `namespace`."""
    if namespace:
        kind, where, scoped = "Role", f"/apis/{RBAC}/v1/namespaces/{namespace}", {"namespace": namespace}
    else:
        kind, where, scoped = "ClusterRole", f"/apis/{RBAC}/v1", {}
    meta = {"name": user, **scoped}
    return [
        (
            f"{where}/{kind.lower()}s",
            {"apiVersion": f"{RBAC}/v1", "kind": kind, "metadata": meta, "rules": rules},
        ),
        (
            f"{where}/{kind.lower()}bindings",
            {
                "apiVersion": f"{RBAC}/v1",
                "kind": f"{kind}Binding",
                "metadata": meta,
                "roleRef": {"apiGroup": RBAC, "kind": kind, "name": user},
                "subjects": [{"apiGroup": RBAC, "kind": "User", "name": user}],
            },
        ),
    ]


def _rbac() -> list[tuple[str, Obj]]:
    rules = [
        {
            "apiGroups": [""],
            "resources": ["endpoints", "services", "pods", "namespaces"],
            "verbs": ["list", "watch"],
        },
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
    ]
    return user_role(USER, rules)


def kubeconfig_secret(state: State, user: str, name: str, namespace: str) -> Obj:
    """A Secret `name` holding a kubeconfig for `user` with its certificate inline (the pod reads no file
    of the host's), naming the API server at the node's relay (it listens on 127.0.0.1 only)."""
    crt, key = pki.client_certificate(state.pki, user)
    server = f"https://{NODE_IP}:{API_RELAY_PORT}"
    config = components.kubeconfig(server, state.pki, (crt, key))
    config["clusters"][0]["cluster"] = {
        "server": server,
        "tls-server-name": API_SERVER_NAME,
        "certificate-authority-data": base64.b64encode((state.pki / "ca.crt").read_bytes()).decode(),
    }
    config["users"][0]["user"] = {
        "client-certificate-data": base64.b64encode(crt.read_bytes()).decode(),
        "client-key-data": base64.b64encode(key.read_bytes()).decode(),
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "Opaque",
        "stringData": {"kubeconfig": yaml.safe_dump(config)},
    }


def add_on_deployment(namespace: str, name: str, labels: dict[str, str], pod: Obj) -> Obj:
    """A one-replica Deployment of an add-on whose pod (`pod`, its spec) runs on the real node alone:
    the node's selector, a toleration of its taint, no service account token."""
    spec = {
        "automountServiceAccountToken": False,
        "nodeSelector": {NODE_LABEL[0]: NODE_LABEL[1]},
        "tolerations": [{"key": NODE_TAINT[0], "operator": "Exists", "effect": NODE_TAINT[2]}],
        **pod,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


def _deployment(image: str) -> Obj:
    pod = {
        "dnsPolicy": "Default",
        "priorityClassName": "system-cluster-critical",
        "containers": [
            {
                "name": "coredns",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "args": ["-conf", "/etc/coredns/Corefile"],
                "resources": {"requests": {"cpu": "50m", "memory": "70Mi"}, "limits": {"memory": "170Mi"}},
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    # Port 53: root with that one capability (upstream's image gives its non-root
                    # binary the file capability instead; a one-file image made here carries no xattrs).
                    "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
                    "runAsUser": 0,
                },
                "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}],
                "livenessProbe": {
                    "httpGet": {"path": "/health", "port": 8080},
                    "periodSeconds": 10,
                    "failureThreshold": 5,
                },
                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, "periodSeconds": 2},
            }
        ],
        "volumes": [
            {
                "name": "config",
                "projected": {
                    "sources": [{"configMap": {"name": NAME}}, {"secret": {"name": f"{NAME}-kubeconfig"}}]
                },
            }
        ],
    }
    return add_on_deployment(NAMESPACE, NAME, {"k8s-app": "kube-dns"}, pod)


def _service() -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "kube-dns", "namespace": NAMESPACE, "labels": {"k8s-app": "kube-dns"}},
        "spec": {
            "clusterIP": CLUSTER_DNS,
            "selector": {"k8s-app": "kube-dns"},
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
            ],
        },
    }


def objects(state: State, image: str) -> list[tuple[str, Obj]]:
    """(collection path, object) of everything CoreDNS needs, in the order they are applied."""
    ns = f"/api/v1/namespaces/{NAMESPACE}"
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "data": {"Corefile": COREFILE},
    }
    return [
        *_rbac(),
        (f"{ns}/configmaps", config_map),
        (f"{ns}/secrets", kubeconfig_secret(state, USER, f"{NAME}-kubeconfig", NAMESPACE)),
        (f"{ns}/services", _service()),
        (f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments", _deployment(image)),
    ]


def apply_and_wait(client: Client, objects: list[tuple[str, Obj]], what: str) -> float:
    """Apply `objects` in order and wait until the Deployment among them has a ready replica; the
    seconds it took. Not ready in READY_TIMEOUT_S: TimeoutError, one line naming `what`."""
    started = time.monotonic()
    for path, obj in objects:
        client.apply(path, obj)
    (deployment,) = [obj for _, obj in objects if obj["kind"] == "Deployment"]
    namespace, name = deployment["metadata"]["namespace"], deployment["metadata"]["name"]
    deadline = started + READY_TIMEOUT_S
    while True:
        got = client.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}") or {}
        if (got.get("status") or {}).get("readyReplicas", 0) >= 1:
            return time.monotonic() - started
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"node: {what} not ready after {READY_TIMEOUT_S} s (kubectl -n {namespace} describe pods)"
            )
        time.sleep(1)


def install(state: State, client: Client, image: str) -> float:
    """Apply CoreDNS and wait until its pod is ready (its readiness probe passed); the seconds it took."""
    return apply_and_wait(client, objects(state, image), "CoreDNS")
