"""The real node's configuration, read offline: the settings without which nothing starts on our machines
(shared notes: REAL-NODE-NOTES.md), where its servers listen, and the addresses it takes. `make e2e-node`
shows the node running with them."""

from __future__ import annotations

import ipaddress
import json
import ssl
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from infra.local.ports import free_port
from infra.localcluster import cluster, components, pki
from infra.localcluster.node import addons, dockerd, host, images, mirror, netpol, storage
from infra.localcluster.node.config import (
    NODE_IP,
    NODE_LABEL,
    PAUSE_IMAGE,
    POD_SUBNET,
    NodeDirs,
    cni_network,
    containerd_config,
    kube_proxy_config,
    kubelet_config,
)
from infra.localcluster.parts import PARTS, tier_parts
from infra.program.common import yamlio


@pytest.fixture
def dirs(tmp_path: Path) -> NodeDirs:
    return NodeDirs(tmp_path / "node", tmp_path / "cache")


def test_containerd_restricts_oom_score_adj_uses_cgroupfs_and_the_pause_image_built_here(dirs):
    config = tomllib.loads(containerd_config(dirs, Path("/usr/lib/cni")))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True  # root here lacks CAP_SYS_RESOURCE
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False
    assert cri["sandbox_image"] == PAUSE_IMAGE
    assert cri["cni"]["conf_dir"] == str(dirs.cni_conf)
    assert config["grpc"]["address"] == str(dirs.containerd_socket)
    # The image store outlives the cluster (a second run loads nothing); the run's state does not.
    assert Path(config["root"]).is_relative_to(dirs.cache)
    assert Path(config["state"]).is_relative_to(dirs.root)


def test_the_kubelet_accepts_cgroup_v1_asks_no_oom_score_and_serves_on_the_node_address_only(dirs):
    config = kubelet_config(dirs, Path("/pki/ca.crt"))
    assert (config["failCgroupV1"], config["cgroupDriver"], config["oomScoreAdj"]) == (False, "cgroupfs", 0)
    assert (config["address"], config["healthzBindAddress"], config["readOnlyPort"]) == (
        NODE_IP,
        "127.0.0.1",
        0,
    )
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert config["authorization"]["mode"] == "Webhook"
    assert config["clusterDNS"] == [addons._service()["spec"]["clusterIP"]]


def test_kube_proxy_listens_on_loopback_and_leaves_the_hosts_conntrack_limits(tmp_path):
    config = kube_proxy_config(tmp_path / "kubeconfig")
    for key in ("healthzBindAddress", "metricsBindAddress"):
        assert config[key].startswith("127.0.0.1:"), key
    assert config["nodePortAddresses"] == [f"{NODE_IP}/32"]
    assert (config["oomScoreAdj"], config["conntrack"]["maxPerCore"]) == (0, 0)


def test_the_nodes_addresses_meet_no_other_range_of_the_cluster(dirs):
    pods = ipaddress.ip_network(POD_SUBNET)
    others = [ipaddress.ip_network(components.POD_CIDR), ipaddress.ip_network(components.SERVICE_CIDR)]
    assert not any(pods.overlaps(other) for other in others)
    assert not any(ipaddress.ip_address(NODE_IP) in net for net in [pods, *others])
    bridge = cni_network(dirs)["plugins"][0]
    assert bridge["ipMasq"] is False  # pods reach this machine and each other, never beyond it
    assert bridge["ipam"]["ranges"] == [[{"subnet": POD_SUBNET}]]


def test_coredns_runs_on_the_pod_network_and_forwards_nothing():
    """In kube-system's pod network, as on a kubeadm or cloud cluster: a NetworkPolicy's DNS peer
    (kube-system's pods) matches it. The API server it reads is the node's relay, checked by name."""
    assert "bind" not in addons.COREFILE and "forward" not in addons.COREFILE
    pod = addons._deployment("coredns@sha256:1")["spec"]["template"]["spec"]
    assert "hostNetwork" not in pod


def test_the_node_parts_are_built_only_for_the_node_tier():
    node = set(tier_parts("node"))
    assert node == {
        "kubernetes-node",
        "cri-tools",
        "coredns",
        "local-path-provisioner",
        "minio",
        "kube-router",
    }
    assert not node & set(tier_parts("cluster"))
    # The kubelet and kube-proxy come from the control plane's wrapper: one Kubernetes pin.
    assert PARTS["kubernetes-node"].directory == PARTS["kubernetes"].directory
    assert PARTS["kubernetes-node"].ldflags == PARTS["kubernetes"].ldflags


def test_the_trainer_images_key_follows_the_dockerfile_and_the_trainer_but_not_bytecode(
    monkeypatch, tmp_path
):
    for name in ("Dockerfile", ".dockerignore"):
        (tmp_path / name).write_text(name)
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "train.py").write_text("a")
    monkeypatch.setattr(images, "ROOT", tmp_path)
    key = images.trainer_key("base:1")
    (tmp_path / "trainer" / "__pycache__").mkdir()
    (tmp_path / "trainer" / "__pycache__" / "train.cpython-311.pyc").write_text("x")
    assert images.trainer_key("base:1") == key
    assert images.trainer_key("base:2") != key
    (tmp_path / "trainer" / "train.py").write_text("b")
    assert images.trainer_key("base:1") != key


def test_the_base_key_follows_the_ca_it_adds():
    assert images.base_key(b"ca-1") == images.base_key(b"ca-1")
    assert images.base_key(b"ca-1") != images.base_key(b"ca-2")


@pytest.mark.parametrize(
    ("ref", "repo"),
    [
        ("ddp-mnist.local/trainer:0123abcd", "ddp-mnist.local/trainer"),
        ("ddp-mnist.local/trainer@sha256:" + "a" * 64, "ddp-mnist.local/trainer"),
        ("registry.local:5000/tools", "registry.local:5000/tools"),
        ("registry.local:5000/tools:1", "registry.local:5000/tools"),
    ],
)
def test_an_images_repository_is_read_from_a_tag_or_a_digest_reference(ref, repo):
    assert dockerd.repository(ref) == repo


def test_the_provisioner_makes_shared_directories_on_the_real_node_alone(tmp_path):
    state = cluster.State(tmp_path / "cluster")
    pki.make(state.pki, "10.96.0.1")
    state.write({"server": "https://127.0.0.1:6443"})
    made = storage.objects(state, "lpp@sha256:1", "tools@sha256:2", tmp_path / "volumes")
    objects = {obj["kind"]: obj for _, obj in made}
    config = objects["ConfigMap"]["data"]
    assert json.loads(config["config.json"]) == {"sharedFileSystemPath": str(tmp_path / "volumes")}
    helper = yamlio.load(config["helperPod.yaml"])["spec"]
    # The provisioner tolerates every taint on its helper pods: the selector keeps them off KWOK's nodes.
    assert helper["nodeSelector"] == {NODE_LABEL[0]: NODE_LABEL[1]}
    assert helper["containers"][0]["image"] == "tools@sha256:2"
    assert objects["StorageClass"]["provisioner"] == storage.PROVISIONER
    assert objects["StorageClass"]["volumeBindingMode"] == "Immediate"
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    assert "hostNetwork" not in pod and pod["securityContext"]["runAsNonRoot"]
    assert "--kubeconfig=/etc/local-path/kubeconfig" in pod["containers"][0]["args"]


def test_the_mirror_serves_the_four_files_over_tls_its_ca_verifies(tmp_path, monkeypatch):
    monkeypatch.setattr(mirror, "NODE_IP", "127.0.0.1")
    monkeypatch.setattr(mirror, "PORT", free_port())
    mnist = tmp_path / "mnist"
    mnist.mkdir()
    for name in mirror.FILES:
        (mnist / name).write_bytes(name.encode())
    (mnist / "secret.txt").write_text("not served")
    cache = tmp_path / "cache"
    cache.mkdir()
    with mirror.serving(mnist, cache) as url:
        context = ssl.create_default_context(cafile=str(mirror.ca_certificate(cache)))
        body = urllib.request.urlopen(url + mirror.FILES[0], context=context, timeout=10).read()
        assert body == mirror.FILES[0].encode()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url + "secret.txt", context=context, timeout=10)
        assert refused.value.code == 404
        with pytest.raises(urllib.error.URLError):  # a client that does not trust the tier's CA
            urllib.request.urlopen(url + mirror.FILES[0], context=ssl.create_default_context(), timeout=10)


def test_kube_router_runs_its_policy_controller_alone_with_health_on_loopback():
    argv = netpol.args("/bin/kube-router", "/k/kubeconfig")
    assert {"--run-firewall=true", "--run-router=false", "--run-service-proxy=false"} <= set(argv)
    assert "--health-addr=127.0.0.1" in argv
    assert not [a for a in argv if "pprof" in a or a.startswith("--metrics-port")]
    # The Services' range is the cluster's, not kube-router's default 10.96.0.0/12.
    assert f"--service-cluster-ip-range={components.SERVICE_CIDR}" in argv
    # Same-bridge pod traffic reaches its rules only through bridge netfilter, which the node sets.
    assert host.SYSCTLS["net.bridge.bridge-nf-call-iptables"] == "1"
