"""The host side of the real node: the Debian packages it runs, the interface its address lives on, the
kernel settings pods need, and the check that teardown left nothing behind.

Everything the node changes on this machine is made here and undone here: the interface
`ddpm-node0` (the node's address, on an empty bridge), the CNI bridge `ddpm-br0`, the iptables chains
kube-proxy, kube-router and the CNI plugins write, kube-router's ip sets, the network namespaces of
pods, the mounts under the node's directory, the kubelet's cgroups, and two sysctls (restored to what
they were).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from infra.localcluster.node.config import BRIDGE, NODE_INTERFACE, NODE_IP

# Debian package -> a file it installs that the node uses.
PACKAGES = {
    "containerd": "/usr/bin/containerd",
    "runc": "/usr/sbin/runc",
    "containernetworking-plugins": "/usr/lib/cni/bridge",
    "iptables": "/usr/sbin/iptables",
    "nftables": "/usr/sbin/nft",
    "conntrack": "/usr/sbin/conntrack",
    "socat": "/usr/bin/socat",
    "ethtool": "/usr/sbin/ethtool",
    "iproute2": "/usr/bin/ip",
    "docker.io": "/usr/sbin/dockerd",
    "debootstrap": "/usr/sbin/debootstrap",
    "gcc": "/usr/bin/gcc",
    "libc6-dev": "/usr/include/signal.h",
    "ipset": "/usr/sbin/ipset",
}
CNI_BIN = Path("/usr/lib/cni")
# Sysctls the node's pods need: routing between the bridge and the node's address, and bridged
# traffic through iptables (kube-proxy's Service rules between two pods on the bridge).
SYSCTLS = {"net.ipv4.ip_forward": "1", "net.bridge.bridge-nf-call-iptables": "1"}
KUBELET_CGROUP = "kubepods"
# The ip sets kube-router's policy controller makes (upstream pkg/controllers/netpol: KUBE-SRC-*,
# KUBE-DST-*, and kube-router-local-pods with its default deny).
IPSET_PREFIXES = ("KUBE-SRC-", "KUBE-DST-", "kube-router-")


class HostError(Exception):
    """The host cannot run the node; the message is one line for the user."""


def missing_packages() -> list[str]:
    return [name for name, path in PACKAGES.items() if not Path(path).exists()]


def ensure_packages(say: Callable[[str], None]) -> None:
    """Install what is missing from Debian's packages (as root, `apt-get`), or say what to install."""
    missing = missing_packages()
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise HostError(
            f"node: missing Debian packages {' '.join(missing)}; install them as root with "
            f"`apt-get install {' '.join(missing)}` (the real node needs root and apt)"
        )
    say(f"node: installing {' '.join(missing)} from Debian's packages")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", *missing]):
        result = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        if result.returncode != 0:
            last = (result.stderr or result.stdout).strip().splitlines()[-1:]
            raise HostError(f"node: `{' '.join(argv[:2])}` failed: {' '.join(last)}")
    still = missing_packages()
    if still:
        raise HostError(f"node: packages still missing after apt-get install: {' '.join(still)}")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise HostError(f"node: `ip {' '.join(args)}` failed: {result.stderr.strip()}")
    return result


def _load_module(name: str) -> None:
    """A kernel module, where modprobe exists (a kernel with it built in needs none)."""
    if shutil.which("modprobe"):
        subprocess.run(["modprobe", name], capture_output=True, check=False)


def link_exists(name: str) -> bool:
    return _ip("link", "show", name, check=False).returncode == 0


def add_node_interface() -> None:
    """The node's address on an interface of its own (the kubelet refuses a loopback one): an empty
    bridge, since our kernels have no dummy driver. An address of this machine, on no wire."""
    if not link_exists(NODE_INTERFACE):
        _ip("link", "add", NODE_INTERFACE, "type", "bridge")
    _ip("addr", "replace", f"{NODE_IP}/32", "dev", NODE_INTERFACE)
    _ip("link", "set", NODE_INTERFACE, "up")


def set_sysctls(saved: dict[str, str]) -> dict[str, str]:
    """Set SYSCTLS; the values they had (kept in the node's state, restored by `restore_sysctls`)."""
    _load_module("br_netfilter")
    for key, value in SYSCTLS.items():
        path = Path("/proc/sys") / key.replace(".", "/")
        if not path.exists():
            raise HostError(f"node: the kernel has no {key} (bridge netfilter is needed for Services)")
        saved.setdefault(key, path.read_text().strip())
        path.write_text(value)
    return saved


def restore_sysctls(saved: dict[str, str]) -> None:
    for key, value in saved.items():
        with contextlib.suppress(OSError):
            (Path("/proc/sys") / key.replace(".", "/")).write_text(value)


def _chains(table: str) -> list[str]:
    result = subprocess.run(["iptables-save", "-t", table], capture_output=True, text=True, check=False)
    return [line[1:].split()[0] for line in result.stdout.splitlines() if line.startswith(":")]


def node_chains() -> list[str]:
    """iptables chains the node's kube-proxy, kubelet and CNI plugins make (KUBE-*, CNI-*)."""
    found = []
    for table in ("filter", "nat", "mangle"):
        found += [f"{table}/{c}" for c in _chains(table) if c.startswith(("KUBE-", "CNI-"))]
    return found


def flush_chains() -> None:
    """Remove the rules that jump to the node's chains, then the chains (what `kube-proxy --cleanup`
    leaves: the kubelet's KUBE-FIREWALL and KUBE-KUBELET-CANARY, the CNI plugins' chains)."""
    for table in ("filter", "nat", "mangle"):
        saved = subprocess.run(["iptables-save", "-t", table], capture_output=True, text=True, check=False)
        for line in saved.stdout.splitlines():
            if line.startswith("-A ") and ("KUBE-" in line or "CNI-" in line):
                rule = shlex.split(line)[1:]  # a rule's comment may be quoted (kube-router's are)
                chain, spec = rule[0], rule[1:]
                if chain.startswith(("KUBE-", "CNI-")):
                    continue  # flushed with its chain below
                subprocess.run(
                    ["iptables", "-t", table, "-D", chain, *spec], capture_output=True, check=False
                )
        chains = [c for c in _chains(table) if c.startswith(("KUBE-", "CNI-"))]
        for chain in chains:
            subprocess.run(["iptables", "-t", table, "-F", chain], capture_output=True, check=False)
        for chain in chains:
            subprocess.run(["iptables", "-t", table, "-X", chain], capture_output=True, check=False)


def node_ipsets() -> list[str]:
    """The ip sets of the node's policy engine."""
    if shutil.which("ipset") is None:
        return []
    listed = subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True, check=False).stdout
    return [name for name in listed.split() if name.startswith(IPSET_PREFIXES)]


def destroy_ipsets() -> None:
    """Remove the policy engine's ip sets (after the rules that match them are gone)."""
    for name in node_ipsets():
        subprocess.run(["ipset", "destroy", name], capture_output=True, check=False)


def mounts_under(root: Path) -> list[str]:
    prefix = str(root.resolve())
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        target = line.split()[1].replace("\\040", " ")
        if target == prefix or target.startswith(prefix + "/"):
            found.append(target)
    return found


def unmount_under(root: Path) -> None:
    for target in sorted(mounts_under(root), key=len, reverse=True):
        subprocess.run(["umount", "-l", target], capture_output=True, check=False)


def pod_netns() -> list[str]:
    """Network namespaces the CRI made for pods (containerd 1.6 pins them at /var/run/netns/cni-*)."""
    run = Path("/var/run/netns")
    return sorted(str(p) for p in run.glob("cni-*")) if run.is_dir() else []


def remove_pod_netns() -> None:
    for path in pod_netns():
        subprocess.run(["umount", path], capture_output=True, check=False)
        with contextlib.suppress(OSError):
            Path(path).unlink()


def kubelet_cgroups() -> list[str]:
    found = []
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        path = hierarchy / KUBELET_CGROUP
        if path.is_dir():
            found.append(str(path))
    return found


def remove_kubelet_cgroups() -> None:
    """The kubelet's cgroup tree in every hierarchy, leaves first (a cgroup goes once it is empty)."""
    for top in kubelet_cgroups():
        for directory, _subdirs, _files in sorted(os.walk(top), key=lambda w: -len(w[0])):
            with contextlib.suppress(OSError):
                os.rmdir(directory)


def processes_naming(text: str) -> list[str]:
    """Processes whose command line contains `text` (the node's directory): shims, pods, servers."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if text in cmdline:
                found.append(f"{proc.name} {cmdline.strip()[:120]}")
    return found


def leftovers(root: Path) -> list[str]:
    """What the node left on this machine: empty after a clean teardown."""
    found = [f"process {p}" for p in processes_naming(str(root))]
    found += [f"interface {name}" for name in (NODE_INTERFACE, BRIDGE) if link_exists(name)]
    found += [f"iptables chain {c}" for c in node_chains()]
    found += [f"ip set {s}" for s in node_ipsets()]
    found += [f"mount {m}" for m in mounts_under(root)]
    found += [f"network namespace {n}" for n in pod_netns()]
    found += [f"cgroup {c}" for c in kubelet_cgroups()]
    return found


def clean(root: Path, saved_sysctls: dict[str, str]) -> None:
    """Undo what the node did to this machine (after its processes stopped)."""
    remove_pod_netns()
    unmount_under(root)
    flush_chains()
    destroy_ipsets()
    for name in (BRIDGE, NODE_INTERFACE):
        if link_exists(name):
            _ip("link", "delete", name, check=False)
    remove_kubelet_cgroups()
    restore_sysctls(saved_sysctls)
