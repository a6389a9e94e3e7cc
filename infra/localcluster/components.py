"""The command lines of the local cluster's control plane, and the files they read.

etcd, kube-apiserver (default admission plugins, RBAC, service account tokens, the egress selector),
kube-controller-manager, kube-scheduler and KWOK, each on 127.0.0.1 at the ports `cluster.up` picked.
"""

from __future__ import annotations

import socket
from pathlib import Path

from infra.localcluster import fleet

SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"


def advertise_address() -> str:
    """A non-loopback IPv4 address of this machine: the API server refuses to advertise a loopback one
    and cannot find one itself on a host without a default route. Nothing is bound to it."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing address
            address = probe.getsockname()[0]
        except OSError:
            address = ""
    if address and not address.startswith("127."):
        return address
    return "192.0.2.10"


def kubeconfig(server: str, pki: Path, certificate: tuple[Path, Path] | None = None) -> dict:
    """The kubeconfig of the admin (group system:masters), or of the user whose client `certificate`
    (and key) it is (`pki.client_certificate`)."""
    crt, key = certificate or (pki / "admin.crt", pki / "admin.key")
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "ddp-mnist-local",
                "cluster": {"server": server, "certificate-authority": str(pki / "ca.crt")},
            }
        ],
        "users": [
            {
                "name": "admin",
                "user": {
                    "client-certificate": str(crt),
                    "client-key": str(key),
                },
            }
        ],
        "contexts": [{"name": "ddp-mnist-local", "context": {"cluster": "ddp-mnist-local", "user": "admin"}}],
        "current-context": "ddp-mnist-local",
    }


def egress_config(socket_path: Path) -> dict:
    """Webhook and aggregated-API traffic to Services goes through the supervisor's CONNECT proxy,
    which sends it to the local process standing in for the Service's pods (k8s.io/apiserver
    `pkg/util/webhook/authentication.go`: a Service reference dials through the `cluster` selection).
    A Unix socket: the TCP transport always wants TLS (`egressselector.getTLSConfig`)."""
    return {
        "apiVersion": "apiserver.k8s.io/v1beta1",
        "kind": "EgressSelectorConfiguration",
        "egressSelections": [
            {
                "name": "cluster",
                "connection": {
                    "proxyProtocol": "HTTPConnect",
                    "transport": {"uds": {"udsName": str(socket_path)}},
                },
            }
        ],
    }


def etcd(binary: Path, data: Path, client_port: int, peer_port: int) -> list[str]:
    client_url, peer_url = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
    return [
        str(binary),
        "--data-dir",
        str(data),
        "--unsafe-no-fsync",
        "--listen-client-urls",
        client_url,
        "--advertise-client-urls",
        client_url,
        "--listen-peer-urls",
        peer_url,
        "--initial-advertise-peer-urls",
        peer_url,
        "--initial-cluster",
        f"default={peer_url}",
        "--log-level",
        "warn",
    ]


def kube_apiserver(binary: Path, pki: Path, etcd_port: int, port: int, egress: Path) -> list[str]:
    return [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{etcd_port}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--advertise-address={advertise_address()}",
        f"--cert-dir={pki}",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        # The issuer is the API server's own loopback URL and its keys are published there, so a local
        # process finds its token's issuer by OpenID discovery as a pod does in a cluster. Kubeflow
        # Trainer v2.3.0's status server does it at start and its whole manager exits if it cannot
        # (kubeflow/trainer v2.3.0 pkg/statusserver/auth.go Init: `iss` of its own token, then go-oidc
        # NewProvider through rest.HTTPClientFor of its API config, which trusts this cluster's CA; the
        # API server's certificate names 127.0.0.1, pki.py). The jwks_uri is set because its default
        # is built from the advertised address, where nothing listens (kubernetes
        # pkg/serviceaccount/openidmetadata.go, NewOpenIDMetadataProvider).
        f"--service-account-issuer=https://127.0.0.1:{port}",
        f"--service-account-jwks-uri=https://127.0.0.1:{port}/openid/v1/jwks",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        "--authorization-mode=RBAC",
        # Namespaces placed on a node pool by annotation, as platform teams do: the real node's
        # scenarios put a stack's namespace on that node (tests/e2e_node). Without the annotations
        # (scheduler.alpha.kubernetes.io/node-selector, .../defaultTolerations) both do nothing.
        "--enable-admission-plugins=PodNodeSelector,PodTolerationRestriction",
        "--allow-privileged=true",
        f"--egress-selector-config-file={egress}",
        # Logs and exec on the real node (node/): the API server reaches its kubelet at the node's
        # address, as the admin (the kubelet authorizes it through a SubjectAccessReview).
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        f"--kubelet-client-certificate={pki / 'admin.crt'}",
        f"--kubelet-client-key={pki / 'admin.key'}",
        "--profiling=false",
        "--v=1",
    ]


def _serving_component(binary: Path, kubeconfig: Path, port: int) -> list[str]:
    """What the controller manager and the scheduler share: the admin kubeconfig for their API calls
    and for authenticating and authorizing their own secure port, on 127.0.0.1, no leader election."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        "--leader-elect=false",
        "--profiling=false",
    ]


def kube_controller_manager(binary: Path, pki: Path, kubeconfig: Path, port: int) -> list[str]:
    return [
        *_serving_component(binary, kubeconfig, port),
        f"--root-ca-file={pki / 'ca.crt'}",
        f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--cluster-signing-cert-file={pki / 'ca.crt'}",
        f"--cluster-signing-key-file={pki / 'ca.key'}",
        "--use-service-account-credentials=false",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
    ]


def kube_scheduler(binary: Path, kubeconfig: Path, port: int) -> list[str]:
    return _serving_component(binary, kubeconfig, port)


def kwok(binary: Path, kubeconfig: Path, port: int) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--manage-nodes-with-annotation-selector={fleet.FAKE_NODE_ANNOTATION}=fake",
        f"--cidr={POD_CIDR}",
        "--node-ip=10.250.0.1",
        f"--server-address=127.0.0.1:{port}",
        "--enable-crds=Stage",
        "--node-lease-duration-seconds=40",
    ]
