"""Start, join and stop the real node of a running local cluster.

    python -m infra.localcluster.node up [--state DIR]     # after `make cluster-up`
    python -m infra.localcluster.node down [--state DIR]   # `make cluster-down` does it too

`up`: the Debian packages (installed when missing, as root), the node's interface and sysctls,
containerd, the images (images.py: built once, loaded once), then the kubelet and kube-proxy with
identities of their own; it returns once the node is Ready. `down`: the kubelet and kube-proxy stop,
every pod sandbox is removed through the CRI (so the CNI plugins release each pod's network),
containerd stops, kube-proxy's rules and the node's chains, interfaces, mounts, network namespaces,
cgroups and sysctls are undone, and what is left is checked: a leftover is an error naming it.

Everything of the node's lives in `<state>/node/`, except what a second run reuses: containerd's image
store and docker's build cache under `$DDP_MNIST_CACHE/realcluster/node/`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from infra.localcluster import components, pki
from infra.localcluster.build import binary, cache_root
from infra.localcluster.cluster import State, alive
from infra.localcluster.kube import ApiError, Client
from infra.localcluster.node import addons, host, images, mirror, netpol, storage
from infra.localcluster.node.config import (
    API_RELAY_PORT,
    CLUSTER_DOMAIN,
    NODE_IP,
    NODE_NAME,
    NodeDirs,
    cni_network,
    containerd_config,
    kube_proxy_config,
    kubelet_args,
    kubelet_config,
)

READY_TIMEOUT_S = 120
# The node's processes, stopped in this order.
STOP_ORDER = ("kube-router", "kube-proxy", "kubelet", "api-relay", "containerd")


class NodeError(Exception):
    """The node could not start; the message is one line for the user."""


def dirs_of(state: State) -> NodeDirs:
    return NodeDirs(state.directory / "node", cache_root() / "node")


def loaded_images(state: State) -> dict[str, str]:
    """The images the running node has loaded: name -> digest reference (pause, coredns, minio,
    local-path-provisioner, tools, trainer)."""
    return dict(_read(dirs_of(state)).get("images", {}))


def _read(dirs: NodeDirs) -> dict:
    path = dirs.file("state.json")
    return json.loads(path.read_text()) if path.exists() else {}


def _write(dirs: NodeDirs, data: dict) -> None:
    path = dirs.file("state.json")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(path)


def _start(dirs: NodeDirs, name: str, argv: list[str]) -> int:
    log = (dirs.root / "logs" / f"{name}.log").open("ab")
    process = subprocess.Popen(
        argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
    )
    return process.pid


def _wait(what: str, ready: Callable[[], bool], pid: int, dirs: NodeDirs, name: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not ready():
        if not alive(pid):
            log = dirs.root / "logs" / f"{name}.log"
            tail = log.read_text(errors="replace").strip().splitlines()[-3:]
            raise NodeError(f"node: {name} exited while starting: {' | '.join(tail)}")
        if time.monotonic() > deadline:
            raise NodeError(f"node: {what} not ready after {READY_TIMEOUT_S} s (see {dirs.root / 'logs'})")
        time.sleep(0.5)


def _identity(state: State, dirs: NodeDirs, user: str, groups: tuple[str, ...], name: str) -> Path:
    """A kubeconfig for `user` (a client certificate of the cluster's CA), written as `name`."""
    certificate = pki.client_certificate(state.pki, user, groups)
    path = dirs.file(name)
    path.write_text(yaml.safe_dump(components.kubeconfig(state.read()["server"], state.pki, certificate)))
    return path


def _grant_node(client: Client) -> None:
    """The kubelet's rights: the `system:node` ClusterRole for this node's user (the cluster authorizes
    by RBAC alone; a cloud's API server adds the Node authorizer on top)."""
    client.apply(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"ddp-mnist:{NODE_NAME}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:node",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": f"system:node:{NODE_NAME}"}
            ],
        },
    )


def _node_ready(client: Client) -> bool:
    try:
        got = client.get(f"/api/v1/nodes/{NODE_NAME}") or {}
    except (ApiError, OSError):
        return False
    conditions = (got.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _socket_ready(path: Path) -> Callable[[], bool]:
    def check() -> bool:
        return (
            path.exists()
            and subprocess.run(
                ["ctr", "--address", str(path), "version"], capture_output=True, check=False
            ).returncode
            == 0
        )

    return check


def _write_files(state: State, dirs: NodeDirs) -> None:
    for directory in (dirs.root / "logs", dirs.cni_conf, dirs.cni_ipam, dirs.kubelet_root, dirs.cache):
        directory.mkdir(parents=True, exist_ok=True)
    dirs.file("containerd.toml").write_text(containerd_config(dirs, host.CNI_BIN))
    (dirs.cni_conf / "10-ddp-mnist.conflist").write_text(json.dumps(cni_network(dirs), indent=2))
    dirs.file("kubelet.yaml").write_text(yaml.safe_dump(kubelet_config(dirs, state.pki / "ca.crt")))
    # Pods resolve through the cluster's DNS alone: no upstream resolver of this machine's is inherited.
    dirs.resolv_conf.write_text(f"search {CLUSTER_DOMAIN}\n")


def up(state: State, say: Callable[[str], None] = print) -> dict:
    """Start the node on the running cluster of `state`; the node's state (pids, image references).

    Long on purpose: each part of the node started in the order the next one needs it, with the wait that
    proves it ready."""
    dirs = dirs_of(state)
    if _read(dirs).get("pids"):
        raise NodeError(f"node: already running from {dirs.root} (stop it with `make cluster-down`)")
    started = time.monotonic()
    host.ensure_packages(say)
    bins = {
        name: binary(name)
        for name in (
            "kubelet",
            "kube-proxy",
            "kube-router",
            "crictl",
            "coredns",
            "minio",
            "local-path-provisioner",
        )
    }
    _write_files(state, dirs)
    data: dict = {"pids": {}, "sysctls": {}}
    _write(dirs, data)
    client = state.client()
    try:
        host.add_node_interface()
        host.set_sysctls(data["sysctls"])
        _write(dirs, data)
        pids = data["pids"]
        pids["containerd"] = _start(
            dirs, "containerd", ["containerd", "--config", str(dirs.file("containerd.toml"))]
        )
        _write(dirs, data)
        _wait("containerd", _socket_ready(dirs.containerd_socket), pids["containerd"], dirs, "containerd")
        data["images"] = images.build_all(
            dirs.cache / "docker",
            dirs.root / "docker",
            dirs.containerd_socket,
            {name: bins[name] for name in ("coredns", "minio", "local-path-provisioner")},
            mirror.ca_certificate(dirs.cache).read_bytes(),
            say,
        )
        _write(dirs, data)
        _grant_node(client)
        kubelet_kubeconfig = _identity(
            state, dirs, f"system:node:{NODE_NAME}", ("system:nodes",), "kubelet.kubeconfig"
        )
        proxy_kubeconfig = _identity(state, dirs, "system:kube-proxy", (), "kube-proxy.kubeconfig")
        dirs.file("kube-proxy.yaml").write_text(yaml.safe_dump(kube_proxy_config(proxy_kubeconfig)))
        pids["kubelet"] = _start(dirs, "kubelet", kubelet_args(bins["kubelet"], dirs, kubelet_kubeconfig))
        pids["kube-proxy"] = _start(
            dirs, "kube-proxy", [str(bins["kube-proxy"]), f"--config={dirs.file('kube-proxy.yaml')}"]
        )
        # The API server for the add-ons' pods: a TCP relay on the node's address to its loopback port.
        api_port = urlsplit(state.read()["server"]).port
        pids["api-relay"] = _start(
            dirs,
            "api-relay",
            [
                "socat",
                f"TCP-LISTEN:{API_RELAY_PORT},bind={NODE_IP},fork,reuseaddr",
                f"TCP:127.0.0.1:{api_port}",
            ],
        )
        _write(dirs, data)
        _wait("the node", lambda: _node_ready(client), pids["kubelet"], dirs, "kubelet")
        netpol.grant(client)
        router_kubeconfig = _identity(state, dirs, netpol.USER, (), "kube-router.kubeconfig")
        pids["kube-router"] = _start(
            dirs, "kube-router", netpol.args(str(bins["kube-router"]), str(router_kubeconfig))
        )
        _write(dirs, data)
        _wait("kube-router's policy controller", netpol.healthy, pids["kube-router"], dirs, "kube-router")
        refs = data["images"]
        try:
            data["coredns_seconds"] = round(addons.install(state, client, refs["coredns"]), 1)
            data["storage_seconds"] = round(
                storage.install(
                    state, client, refs["local-path-provisioner"], refs["tools"], dirs.root / "volumes"
                ),
                1,
            )
        except TimeoutError as error:
            raise NodeError(str(error)) from None
    except BaseException:
        down(state, say=lambda _line: None, check=False)
        raise
    data["ready_seconds"] = round(time.monotonic() - started, 1)
    _write(dirs, data)
    say(f"node: {NODE_NAME} Ready in {data['ready_seconds']} s (images: {', '.join(data['images'])})")
    return data


def _stop(pid: int, timeout_s: float = 20) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def _remove_pods(dirs: NodeDirs) -> None:
    """Every pod sandbox stopped and removed through the CRI: its containers killed, CNI DEL run."""
    crictl = binary("crictl")
    subprocess.run(
        [
            str(crictl),
            f"--runtime-endpoint=unix://{dirs.containerd_socket}",
            "--timeout=60s",
            "rmp",
            "-a",
            "-f",
        ],
        capture_output=True,
        check=False,
        timeout=180,
    )


def down(state: State, say: Callable[[str], None] = print, check: bool = True) -> list[str]:
    """Stop the node and undo what it did to this machine; what was left behind (empty when clean)."""
    dirs = dirs_of(state)
    if not dirs.file("state.json").exists():
        return []  # no node ever joined this cluster
    data = _read(dirs)
    pids = data.get("pids", {})
    for name in ("kube-router", "kube-proxy", "kubelet", "api-relay"):
        if name in pids:
            _stop(pids[name])
    if "containerd" in pids and alive(pids["containerd"]):
        _remove_pods(dirs)
    if "kube-proxy" in pids:
        subprocess.run([str(binary("kube-proxy")), "--cleanup"], capture_output=True, check=False)
    if "containerd" in pids:
        _stop(pids["containerd"])
    for line in host.processes_naming(str(dirs.root)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line.split()[0]), signal.SIGKILL)
    host.clean(dirs.root, data.get("sysctls", {}))
    host.unmount_under(dirs.cache)
    if data:
        _write(dirs, {**data, "pids": {}})
    left = host.leftovers(dirs.root) + [f"mount {m}" for m in host.mounts_under(dirs.cache)]
    if pids:
        say(f"node: stopped {len(pids)} processes" + (f"; left behind: {'; '.join(left)}" if left else ""))
    if left and check:
        raise NodeError(f"node: teardown left {'; '.join(left)}")
    return left
