"""The real node itself, shown by what it runs: the kubelet at our Kubernetes pin under containerd and
runc, our trainer image (built from our Dockerfile) as the pods' restricted securityContext runs it,
cluster DNS from the CoreDNS pod, a ClusterIP Service through kube-proxy, and container logs read
through the API server from the kubelet.

Every value asserted here comes from the real node: the Node object the kubelet registered, and what a
process in a container printed.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from infra.localcluster.node.config import NODE_IP, NODE_LABEL, NODE_NAME, NODE_TAINT
from infra.localcluster.parts import KUBERNETES_VERSION
from tests.e2e import live

pytestmark = pytest.mark.e2e_node

NAMESPACE = "node-probe"
ECHO_PORT = 8080

# What the probe pod prints, one JSON line: who it runs as, whether its root is writable, what the
# cluster's DNS answers, and what the echo Service answered through its ClusterIP.
PROBE = """
import json, os, socket, urllib.request
try:
    open("/probe", "w")
    root = "writable"
except OSError as error:
    root = error.strerror
echo = urllib.request.urlopen("http://echo.node-probe.svc.cluster.local:8080/", timeout=20).read().decode()
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(), "groups": sorted(os.getgroups()), "root": root,
    "kubernetes": socket.gethostbyname("kubernetes.default.svc.cluster.local"),
    "echo_ip": socket.gethostbyname("echo.node-probe.svc.cluster.local"),
    "echo": echo, "torch": __import__("torch").__version__,
}))
"""
# The echo pod: the standard library's HTTP server answering with its own hostname.
ECHO = """
import http.server, socket
class Echo(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = socket.gethostname().encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
http.server.HTTPServer(("0.0.0.0", 8080), Echo).serve_forever()
"""


def restricted_pod(name: str, image: str, code: str, labels: dict[str, str] | None = None) -> dict:
    """A pod as our stacks write them: Pod Security "restricted", uid/gid 1000, a read-only root with an
    emptyDir at /tmp, placed on the real node by its label and taint."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels or {}},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "nodeSelector": {NODE_LABEL[0]: NODE_LABEL[1]},
            "tolerations": [{"key": NODE_TAINT[0], "operator": "Exists", "effect": NODE_TAINT[2]}],
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "runAsGroup": 1000,
                "fsGroup": 1000,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["python", "-c", code],
                    "env": [{"name": "OMP_NUM_THREADS", "value": "1"}],
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "128Mi"},
                        "limits": {"memory": "1Gi"},
                    },
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                }
            ],
            "volumes": [{"name": "tmp", "emptyDir": {}}],
        },
    }


def apply(obj: dict) -> None:
    live.kubectl("apply", "-f", "-", stdin=json.dumps(obj))


def wait_phase(name: str, phases: set[str], timeout_s: float = 180) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        pod = live.get("pod", name, NAMESPACE)
        if pod.get("status", {}).get("phase") in phases:
            return pod
        assert time.monotonic() < deadline, f"pod {name} not {phases} in {timeout_s} s: {pod.get('status')}"
        time.sleep(1)


def test_the_kubelet_registers_the_node_at_our_pin(node_cluster: object) -> None:
    node = live.get("node", NODE_NAME)
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"] == KUBERNETES_VERSION
    # kube-proxy's version is no longer on the Node (1.33 leaves kubeProxyVersion empty): its metrics say.
    with urllib.request.urlopen("http://127.0.0.1:10249/metrics", timeout=10) as response:
        metrics = response.read().decode()
    assert (
        f'git_version="{KUBERNETES_VERSION}"' in metrics.split("kubernetes_build_info{", 1)[1].split("}")[0]
    )
    assert info["containerRuntimeVersion"].startswith("containerd://1.")
    assert {"type": "InternalIP", "address": NODE_IP} in node["status"]["addresses"]
    assert node["metadata"]["labels"][NODE_LABEL[0]] == NODE_LABEL[1]
    assert {"key": NODE_TAINT[0], "value": NODE_TAINT[1], "effect": NODE_TAINT[2]} in node["spec"]["taints"]
    ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True", ready


def test_a_restricted_pod_of_our_image_resolves_and_reaches_a_service(node_images: dict[str, str]) -> None:
    image = node_images["trainer"]
    live.kubectl("create", "namespace", NAMESPACE)
    live.kubectl("label", "namespace", NAMESPACE, "pod-security.kubernetes.io/enforce=restricted")
    apply(restricted_pod("echo", image, ECHO, {"app": "echo"}))
    apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "echo", "namespace": NAMESPACE},
            "spec": {"selector": {"app": "echo"}, "ports": [{"port": ECHO_PORT, "targetPort": ECHO_PORT}]},
        }
    )
    wait_phase("echo", {"Running"})
    apply(restricted_pod("probe", image, PROBE))
    pod = wait_phase("probe", {"Succeeded", "Failed"})
    logs = live.kubectl("logs", "-n", NAMESPACE, "probe")
    assert pod["status"]["phase"] == "Succeeded", logs
    seen = json.loads(logs.strip().splitlines()[-1])
    assert seen.pop("torch").split("+")[0] == "2.13.0"  # the pin, from PyPI's CUDA build in the base
    service = live.get("service", "echo", NAMESPACE)
    assert seen == {
        "uid": 1000,
        "gid": 1000,
        "groups": [1000],
        "root": "Read-only file system",
        "kubernetes": "10.96.0.1",
        "echo_ip": service["spec"]["clusterIP"],
        "echo": "echo",
    }
    live.kubectl("delete", "namespace", NAMESPACE, "--wait=false")
