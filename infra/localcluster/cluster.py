"""Start and stop the local cluster: real etcd, kube-apiserver, kube-controller-manager, kube-scheduler
and KWOK on 127.0.0.1, and the supervisor that runs the cluster's stand-ins (see supervisor.py).

Everything lives in one state directory (default `.local/realcluster/`): certificates, the kubeconfig,
etcd's data, a log per process and `state.json` (the processes, their ports). `down` stops every process
it lists and removes the directory, so nothing keeps running and nothing is left for the next `up`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from infra.local.ports import free_port
from infra.localcluster import certmanager, components, fleet, pki
from infra.localcluster.build import binary, module_dir
from infra.localcluster.kube import ApiError, Client
from infra.localcluster.operators import STAND_INS
from infra.localcluster.parts import PARTS, PARTS_DIR

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_STATE = ROOT / ".local" / "realcluster"
SERVICE_IP = "10.96.0.1"  # the `kubernetes` Service: the first address of components.SERVICE_CIDR
READY_TIMEOUT_S = 60


class ClusterError(Exception):
    """The cluster could not be started; the message is one line for the user."""


@dataclass(frozen=True)
class State:
    directory: Path

    @property
    def pki(self) -> Path:
        return self.directory / "pki"

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    @property
    def egress_socket(self) -> Path:
        return self.directory / "egress.sock"

    @property
    def file(self) -> Path:
        return self.directory / "state.json"

    def log(self, name: str) -> Path:
        return self.directory / "logs" / f"{name}.log"

    def read(self) -> dict:
        return json.loads(self.file.read_text()) if self.file.exists() else {}

    def write(self, data: dict) -> None:
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(self.file)

    def client(self) -> Client:
        return Client(self.read()["server"], self.pki)


def _start(state: State, name: str, argv: list[str], env: dict[str, str] | None = None) -> int:
    log = state.log(name).open("ab")
    process = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
        cwd=state.directory,
    )
    return process.pid


def _wait(what: str, ready: Callable[[], bool], pid: int, state: State, name: str, deadline: float) -> None:
    while not ready():
        if not alive(pid):
            tail = state.log(name).read_text(errors="replace").strip().splitlines()[-3:]
            raise ClusterError(f"cluster: {name} exited while starting: {' | '.join(tail)}")
        if time.monotonic() > deadline:
            raise ClusterError(f"cluster: {what} not ready after {READY_TIMEOUT_S} s (see {state.log(name)})")
        time.sleep(0.2)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True  # not our child (a later `status`): it exists
    return waited == 0


def _tcp_open(port: int) -> Callable[[], bool]:
    def check() -> bool:
        with socket.socket() as sock:
            sock.settimeout(0.5)
            return sock.connect_ex(("127.0.0.1", port)) == 0

    return check


def up(state: State, say: Callable[[str], None] = print) -> dict:
    """Start the cluster; its state (ports, pids, kubeconfig) once every part is ready.

    Long on purpose: each part of the control plane started in the order the next one needs it, with the wait
    that proves it ready."""
    if state.read().get("pids"):
        raise ClusterError(
            f"cluster: already running from {state.directory} (stop it with `make cluster-down`)"
        )
    started = time.monotonic()
    bins = {
        name: binary(name)
        for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
    }
    (state.directory / "logs").mkdir(parents=True, exist_ok=True)
    pki.make(state.pki, SERVICE_IP)
    ports = {
        name: free_port()
        for name in ("etcd", "etcd-peer", "apiserver", "controller-manager", "scheduler", "kwok")
    }
    server = f"https://127.0.0.1:{ports['apiserver']}"
    state.kubeconfig.write_text(yaml.safe_dump(components.kubeconfig(server, state.pki)))
    egress = state.directory / "egress.yaml"
    egress.write_text(yaml.safe_dump(components.egress_config(state.egress_socket)))
    data: dict = {"server": server, "ports": ports, "pids": {}, "kubeconfig": str(state.kubeconfig)}
    pids = data["pids"]
    deadline = time.monotonic() + READY_TIMEOUT_S
    try:
        pids["etcd"] = _start(
            state,
            "etcd",
            components.etcd(bins["etcd"], state.directory / "etcd", ports["etcd"], ports["etcd-peer"]),
        )
        state.write(data)
        _wait("etcd", _tcp_open(ports["etcd"]), pids["etcd"], state, "etcd", deadline)
        # The supervisor first: its CONNECT proxy carries the API server's calls to webhooks.
        pids["supervisor"] = _start(
            state,
            "supervisor",
            [
                sys.executable,
                "-m",
                "infra.localcluster.supervisor",
                "--state",
                str(state.directory),
            ],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        state.write(data)
        pids["kube-apiserver"] = _start(
            state,
            "kube-apiserver",
            components.kube_apiserver(
                bins["kube-apiserver"], state.pki, ports["etcd"], ports["apiserver"], egress
            ),
        )
        state.write(data)
        client = Client(server, state.pki)
        _wait("the API server", client.ready, pids["kube-apiserver"], state, "kube-apiserver", deadline)
        pids["kube-controller-manager"] = _start(
            state,
            "kube-controller-manager",
            components.kube_controller_manager(
                bins["kube-controller-manager"], state.pki, state.kubeconfig, ports["controller-manager"]
            ),
        )
        pids["kube-scheduler"] = _start(
            state,
            "kube-scheduler",
            components.kube_scheduler(bins["kube-scheduler"], state.kubeconfig, ports["scheduler"]),
        )
        state.write(data)
        kwok_module = module_dir(PARTS["kwok"].directory, "sigs.k8s.io/kwok")
        client.apply("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", fleet.stage_crd(kwok_module))
        # cert-manager's API (its controllers stand in: certmanager.py), as a cluster KServe needs has it.
        for crd in certmanager.crds(module_dir(PARTS_DIR / "cert-manager", certmanager.MODULE)):
            client.apply("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        _wait_established(client, "stages.kwok.x-k8s.io", deadline)
        for stage in fleet.stages(kwok_module, sorted({s.namespace for s in STAND_INS})):
            client.apply("/apis/kwok.x-k8s.io/v1alpha1/stages", stage)
        pids["kwok"] = _start(state, "kwok", components.kwok(bins["kwok"], state.kubeconfig, ports["kwok"]))
        state.write(data)
        for node in fleet.nodes():
            client.apply("/api/v1/nodes", node)
        _wait("the nodes", lambda: _nodes_ready(client), pids["kwok"], state, "kwok", deadline)
        _wait(
            "the default service account",
            lambda: client.get("/api/v1/namespaces/default/serviceaccounts/default") is not None,
            pids["kube-controller-manager"],
            state,
            "kube-controller-manager",
            deadline,
        )
    except BaseException:
        stop(state)  # the logs stay for the user to read
        raise
    data["ready_seconds"] = round(time.monotonic() - started, 1)
    state.write(data)
    say(
        f"cluster: ready in {data['ready_seconds']} s: {server}, {len(fleet.nodes())} nodes; "
        f"KUBECONFIG={state.kubeconfig}"
    )
    return data


def _wait_established(client: Client, crd: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        got = client.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}") or {}
        if any(
            c["type"] == "Established" and c["status"] == "True"
            for c in (got.get("status") or {}).get("conditions") or []
        ):
            return
        time.sleep(0.2)
    raise ClusterError(f"cluster: the CRD {crd} was not established in time")


def _nodes_ready(client: Client) -> bool:
    try:
        listed = client.items("/api/v1/nodes")
    except (ApiError, OSError):
        return False
    ready = [
        n
        for n in listed
        if any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (n.get("status") or {}).get("conditions") or []
        )
    ]
    return len(ready) == len(fleet.nodes())


STOP_ORDER = ("supervisor", "kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd")


def _stop(pid: int, timeout_s: float = 10) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def stop(state: State) -> int:
    """Stop every process the state lists (the supervisor stops the ones it started); how many."""
    data = state.read()
    pids = data.get("pids", {})
    for name in sorted(pids, key=lambda n: STOP_ORDER.index(n) if n in STOP_ORDER else -1):
        _stop(pids[name])
    if data:
        state.write({**data, "pids": {}})
    return len(pids)


def down(state: State, say: Callable[[str], None] = print) -> int:
    """Stop every process and remove the state directory; the number of processes stopped."""
    stopped = stop(state)
    if state.directory.exists():
        import shutil

        shutil.rmtree(state.directory)
    say(f"cluster: stopped {stopped} processes and removed {state.directory}")
    return stopped
