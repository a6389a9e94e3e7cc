"""What the real node's processes read: containerd's config, the CNI network, the kubelet's and
kube-proxy's configurations. Pure functions of the node's directories, so a test reads them offline.

The settings that a trial run on our machines showed nothing starts without (shared notes,
REAL-NODE-NOTES.md, "Three things that fail until set"):
- root here lacks CAP_SYS_RESOURCE, so no process may lower its `oom_score_adj`: containerd's CRI plugin
  restricts it (`restrict_oom_score_adj`), the kubelet and kube-proxy ask for 0 (`oomScoreAdj`);
- the host's cgroups are v1: the kubelet is told not to refuse them (`failCgroupV1: false`) and both it
  and runc use the cgroupfs driver;
- the kubelet refuses a loopback node IP: the node's address is on an interface the tier creates.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

NODE_NAME = "real-node-0"
# The node's address, on an interface the tier creates (an empty bridge, host.py): nothing outside
# this machine routes to it, and the node's servers (kubelet, CoreDNS) listen on it alone.
NODE_IP = "10.251.0.1"
# Where the node's add-ons (CoreDNS, the volume provisioner) reach the API server, which listens on
# 127.0.0.1 only: a relay on the node's address (node.py), checked against the name `kubernetes` that
# the API server's certificate carries (pki.py).
API_RELAY_PORT = 6443
API_SERVER_NAME = "kubernetes"
NODE_INTERFACE = "ddpm-node0"
BRIDGE = "ddpm-br0"
# The real node's pods; KWOK's fake pods take their addresses from 10.244.0.0/16 (components.POD_CIDR).
POD_SUBNET = "10.246.0.0/24"
CLUSTER_DNS = "10.96.0.10"  # the kube-dns Service's ClusterIP, inside components.SERVICE_CIDR
CLUSTER_DOMAIN = "cluster.local"
# What places a pod here, and keeps every other pod off: a label and a taint of the node's own.
NODE_LABEL = ("ddp-mnist.local/node", "real")
NODE_TAINT = ("ddp-mnist.local/real-node", "true", "NoSchedule")
PAUSE_IMAGE = "ddp-mnist.local/pause:3.10"
KUBELET_PORT = 10250


@dataclass(frozen=True)
class NodeDirs:
    """Everything of the node's under one directory (`<cluster state>/node`), but what a second run
    reuses (containerd's image store, docker's build cache), under `cache`."""

    root: Path
    cache: Path

    @property
    def containerd_root(self) -> Path:
        return self.cache / "containerd"

    @property
    def containerd_state(self) -> Path:
        return self.root / "containerd" / "state"

    @property
    def containerd_socket(self) -> Path:
        return self.root / "containerd" / "containerd.sock"

    @property
    def cni_conf(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_ipam(self) -> Path:
        return self.root / "cni" / "ipam"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def resolv_conf(self) -> Path:
        return self.root / "resolv.conf"

    def file(self, name: str) -> Path:
        return self.root / name


def containerd_config(dirs: NodeDirs, cni_bin: Path) -> str:
    """containerd 1.6's config (version 2): its own root, state and socket, runc through the v2 shim with
    cgroupfs, the CNI network of `cni_network`, the pause image built here, and no registry mirrors:
    every image is loaded before a pod names it."""
    return f"""\
version = 2
root = {json.dumps(str(dirs.containerd_root))}
state = {json.dumps(str(dirs.containerd_state))}
oom_score = 0

[grpc]
  address = {json.dumps(str(dirs.containerd_socket))}

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = {json.dumps(PAUSE_IMAGE)}
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = {json.dumps(str(cni_bin))}
    conf_dir = {json.dumps(str(dirs.cni_conf))}
"""


def cni_network(dirs: NodeDirs) -> dict:
    """A bridge with the pods' gateway on it, host-local addresses from POD_SUBNET, hostPort through
    portmap. No masquerading: a pod reaches this machine's addresses and other pods, never beyond."""
    return {
        "cniVersion": "1.0.0",
        "name": "ddp-mnist",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(dirs.cni_ipam),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kubelet_config(dirs: NodeDirs, ca: Path) -> dict:
    """The KubeletConfiguration (kubelet.config.k8s.io/v1beta1) of the node: its API on NODE_IP only,
    clients by the cluster's CA and the API server's SubjectAccessReview, the cluster's DNS, the node's
    taint from its first registration, and no image garbage collection (no image here can be pulled
    again)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": NODE_IP,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "oomScoreAdj": 0,
        "containerRuntimeEndpoint": f"unix://{dirs.containerd_socket}",
        "clusterDNS": [CLUSTER_DNS],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": str(dirs.resolv_conf),
        "registerWithTaints": [{"key": NODE_TAINT[0], "value": NODE_TAINT[1], "effect": NODE_TAINT[2]}],
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "2%",
            "imagefs.available": "2%",
            "nodefs.inodesFree": "2%",
        },
        "serializeImagePulls": False,
        "maxPods": 30,
        "shutdownGracePeriod": "0s",
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "protectKernelDefaults": False,
    }


def kubelet_args(binary: Path, dirs: NodeDirs, kubeconfig: Path) -> list[str]:
    return [
        str(binary),
        f"--config={dirs.file('kubelet.yaml')}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={dirs.kubelet_root}",
        f"--cert-dir={dirs.root / 'kubelet-pki'}",
        f"--node-ip={NODE_IP}",
        f"--hostname-override={NODE_NAME}",
        f"--node-labels={NODE_LABEL[0]}={NODE_LABEL[1]}",
        "--v=2",
    ]


def kube_proxy_config(kubeconfig: Path) -> dict:
    """kube-proxy in iptables mode (this kernel has no IPVS), its servers on loopback, NodePorts only on
    the node's address, and the host's conntrack limits left as they are."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "clusterCIDR": POD_SUBNET,
        "hostnameOverride": NODE_NAME,
        "bindAddress": NODE_IP,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "nodePortAddresses": [f"{NODE_IP}/32"],
        "oomScoreAdj": 0,
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
    }
