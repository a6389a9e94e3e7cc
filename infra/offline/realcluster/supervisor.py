"""The local cluster's stand-ins for what a cluster's other parts do, in one process.

- **Egress proxy** (the API server's `cluster` egress, HTTP CONNECT on a Unix socket): a call to a Service
  (an admission webhook) goes to the local process whose pod labels the Service selects, at the local
  port of the Service's target port.
- **Volume provisioner**: what a CSI driver's external-provisioner does for a claim of a StorageClass
  whose provisioner is not the in-tree one: a PersistentVolume bound to the claim (after the scheduler
  picks a node when the class waits for the first consumer), deleted when released under `Delete`.
- **Operator pods**: the Deployments of `STAND_INS` run as local processes (the real binaries built from
  their pinned modules) with what a kubelet would give their pod: the container's arguments and
  environment, its volumes written as files, and its ServiceAccount's token (so the operator acts with
  the RBAC the platform stack gave it). A changed pod template restarts the process; a deleted
  Deployment stops it. The pod itself stays a KWOK pod.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import json
import os
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from infra.offline.local.ports import free_port
from infra.offline.realcluster.build import binary
from infra.offline.realcluster.cluster import State
from infra.offline.realcluster.kube import ApiError, Client, Obj

SELECTED_NODE = "volume.kubernetes.io/selected-node"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
IN_TREE = {"kubernetes.io/no-provisioner"}


@dataclass(frozen=True)
class StandIn:
    """A Deployment whose pod runs as a local process."""

    namespace: str
    deployment: str
    container: str
    binary: str
    # The ports the process listens on (its container's, and any it opens by default); each gets a free
    # local port, passed to it through `local_flags`.
    ports: tuple[int, ...]
    # Flags appended after the container's own, given the local ports of the container's ports.
    local_flags: Callable[[dict[int, int]], list[str]]


def _training_operator_flags(ports: dict[int, int]) -> list[str]:
    # The webhook server's host is not settable in v1.9.4 (cmd/training-operator.v1/main.go:
    # webhook.NewServer(webhook.Options{Port: ...})): it listens on every interface, at a free port.
    return [
        f"--metrics-bind-address=127.0.0.1:{ports[8080]}",
        f"--health-probe-bind-address=127.0.0.1:{ports[8081]}",
        f"--webhook-server-port={ports[9443]}",
    ]


STAND_INS = (
    StandIn(
        "kubeflow",
        "training-operator",
        "training-operator",
        "training-operator",
        (8080, 8081, 9443),  # metrics, health probes, webhook (cmd/training-operator.v1/main.go defaults)
        _training_operator_flags,
    ),
)


class Supervisor:
    def __init__(self, state: State) -> None:
        self.state = state
        self.client: Client | None = None
        self.running: dict[str, tuple[subprocess.Popen, str, dict[int, int], Obj]] = {}

    # --- the egress proxy -------------------------------------------------------------------------
    def backend(self, host: str, port: int) -> int | None:
        """The local port that serves `host:port` (a Service's ClusterIP or DNS name)."""
        assert self.client is not None
        for svc in self.client.items("/api/v1/services"):
            meta, spec = svc["metadata"], svc["spec"]
            names = {spec.get("clusterIP"), f"{meta['name']}.{meta['namespace']}.svc"}
            if host not in names:
                continue
            for svc_port in spec.get("ports", []):
                if svc_port["port"] != port:
                    continue
                for process, _, local, pod in self.running.values():
                    labels = pod["metadata"].get("labels", {})
                    if pod["metadata"]["namespace"] != meta["namespace"] or process.poll() is not None:
                        continue
                    if spec.get("selector") and spec["selector"].items() <= labels.items():
                        return _target(svc_port.get("targetPort", port), pod, local)
        return None

    async def proxy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await reader.readuntil(b"\r\n\r\n")
            method, target = request.split(b" ")[:2]
            host, _, port = target.decode().rpartition(":")
            local = await asyncio.to_thread(self.backend, host, int(port)) if method == b"CONNECT" else None
            if local is None:
                writer.write(b"HTTP/1.1 503 Service Unavailable\r\n\r\n")
                await writer.drain()
                return
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", local)
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except (OSError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    # --- the volume provisioner -------------------------------------------------------------------
    def provision(self) -> None:
        assert self.client is not None
        classes = {
            c["metadata"]["name"]: c for c in self.client.items("/apis/storage.k8s.io/v1/storageclasses")
        }
        for claim in self.client.items("/api/v1/persistentvolumeclaims"):
            meta, spec = claim["metadata"], claim["spec"]
            sc = classes.get(spec.get("storageClassName") or "")
            if spec.get("volumeName") or claim.get("status", {}).get("phase") != "Pending" or sc is None:
                continue
            if sc["provisioner"] in IN_TREE or meta.get("deletionTimestamp"):
                continue
            waits = sc.get("volumeBindingMode") == "WaitForFirstConsumer"
            if waits and SELECTED_NODE not in meta.get("annotations", {}):
                continue
            self.client.create("/api/v1/persistentvolumes", _volume(claim, sc))
        for volume in self.client.items("/api/v1/persistentvolumes"):
            if (
                volume.get("status", {}).get("phase") == "Released"
                and volume["spec"].get("persistentVolumeReclaimPolicy") == "Delete"
                and PROVISIONED_BY in volume["metadata"].get("annotations", {})
            ):
                self.client.delete(f"/api/v1/persistentvolumes/{volume['metadata']['name']}")

    # --- operator pods ----------------------------------------------------------------------------
    def reconcile_stand_ins(self) -> None:
        assert self.client is not None
        for stand_in in STAND_INS:
            key = f"{stand_in.namespace}/{stand_in.deployment}"
            deployment = self.client.get(
                f"/apis/apps/v1/namespaces/{stand_in.namespace}/deployments/{stand_in.deployment}"
            )
            template = deployment["spec"]["template"] if deployment else None
            digest = (
                hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest() if template else ""
            )
            current = self.running.get(key)
            if current and (current[1] != digest or current[0].poll() is not None):
                _terminate(current[0])
                del self.running[key]
                current = None
            if deployment and current is None:
                self.running[key] = self.start_pod(stand_in, deployment, digest)
            elif deployment and current:
                self.write_volumes(stand_in, current[3])

    def pod_dir(self, stand_in: StandIn) -> Path:
        return self.state.directory / "pods" / f"{stand_in.namespace}-{stand_in.deployment}"

    def mount_path(self, stand_in: StandIn, mount_path: str) -> Path:
        """Where a volume mount lands: paths under /tmp as they are (the binaries hard-code some there,
        e.g. the operator's serving-certs), any other path under the pod's directory."""
        if mount_path.startswith("/tmp/"):
            return Path(mount_path)
        return self.pod_dir(stand_in) / "mounts" / mount_path.lstrip("/")

    def write_volumes(self, stand_in: StandIn, pod: Obj) -> None:
        assert self.client is not None
        container = _container(pod, stand_in.container)
        volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
        for mount in container.get("volumeMounts", []):
            volume = volumes[mount["name"]]
            files: dict[str, bytes] = {}
            if "secret" in volume:
                secret = (
                    self.client.get(
                        f"/api/v1/namespaces/{stand_in.namespace}/secrets/{volume['secret']['secretName']}"
                    )
                    or {}
                )
                files = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
            elif "configMap" in volume:
                cm = (
                    self.client.get(
                        f"/api/v1/namespaces/{stand_in.namespace}/configmaps/{volume['configMap']['name']}"
                    )
                    or {}
                )
                files = {k: v.encode() for k, v in (cm.get("data") or {}).items()}
            elif "downwardAPI" in volume:
                for item in volume["downwardAPI"]["items"]:
                    files[item["path"]] = _field(pod, item["fieldRef"]["fieldPath"]).encode()
            target = self.mount_path(stand_in, mount["mountPath"])
            target.mkdir(parents=True, exist_ok=True)
            for name, content in files.items():
                path = target / name
                if not path.exists() or path.read_bytes() != content:
                    tmp = path.with_name(f".{name}.tmp")
                    tmp.write_bytes(content)
                    tmp.replace(path)

    def start_pod(
        self, stand_in: StandIn, deployment: Obj, digest: str
    ) -> tuple[subprocess.Popen, str, dict, Obj]:
        assert self.client is not None
        pod = {
            "metadata": {
                **deployment["spec"]["template"].get("metadata", {}),
                "namespace": stand_in.namespace,
                "name": f"{stand_in.deployment}-local",
            },
            "spec": deployment["spec"]["template"]["spec"],
        }
        container = _container(pod, stand_in.container)
        self.write_volumes(stand_in, pod)
        ports = {
            port: free_port()
            for port in {*stand_in.ports, *(p["containerPort"] for p in container.get("ports", []))}
        }
        args = [self._rewrite(stand_in, pod, a) for a in container.get("args", [])]
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.pod_dir(stand_in)),
            "KUBECONFIG": str(self.token_kubeconfig(stand_in, pod)),
        }
        for var in container.get("env", []):
            if "value" in var:
                env[var["name"]] = self._rewrite(stand_in, pod, var["value"])
            elif "fieldRef" in var.get("valueFrom", {}):
                env[var["name"]] = _field(pod, var["valueFrom"]["fieldRef"]["fieldPath"])
        log = self.state.log(f"pod-{stand_in.namespace}-{stand_in.deployment}").open("ab")
        process = subprocess.Popen(
            [str(binary(stand_in.binary)), *args, *stand_in.local_flags(ports)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.pod_dir(stand_in),
        )
        return process, digest, ports, pod

    def _rewrite(self, stand_in: StandIn, pod: Obj, text: str) -> str:
        for mount in _container(pod, stand_in.container).get("volumeMounts", []):
            text = text.replace(mount["mountPath"], str(self.mount_path(stand_in, mount["mountPath"])))
        return text

    def token_kubeconfig(self, stand_in: StandIn, pod: Obj) -> Path:
        """A kubeconfig with a token of the pod's ServiceAccount (what its projected token would be)."""
        assert self.client is not None
        account = pod["spec"].get("serviceAccountName") or "default"
        token = self.client.create(
            f"/api/v1/namespaces/{stand_in.namespace}/serviceaccounts/{account}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 86400},
            },
        )["status"]["token"]
        config = yaml.safe_load(self.state.kubeconfig.read_text())
        config["users"] = [{"name": "admin", "user": {"token": token}}]
        path = self.pod_dir(stand_in) / "kubeconfig"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def stop_all(self) -> None:
        for process, *_ in self.running.values():
            _terminate(process)
        self.running.clear()


def _target(target: int | str, pod: Obj, local: dict[int, int]) -> int | None:
    if isinstance(target, str):
        for container in pod["spec"]["containers"]:
            for port in container.get("ports", []):
                if port.get("name") == target:
                    return local.get(port["containerPort"])
        return None
    return local.get(target)


def _container(pod: Obj, name: str) -> Obj:
    return next(c for c in pod["spec"]["containers"] if c["name"] == name)


def _field(pod: Obj, path: str) -> str:
    if path == "metadata.namespace":
        return str(pod["metadata"]["namespace"])
    if path == "metadata.name":
        return str(pod["metadata"]["name"])
    if path.startswith("metadata.annotations['"):
        return str(pod["metadata"].get("annotations", {}).get(path[len("metadata.annotations['") : -2], ""))
    if path.startswith("metadata.labels['"):
        return str(pod["metadata"].get("labels", {}).get(path[len("metadata.labels['") : -2], ""))
    raise ValueError(f"unsupported downward API field {path}")


def _volume(claim: Obj, storage_class: Obj) -> Obj:
    meta, spec = claim["metadata"], claim["spec"]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": f"pvc-{meta['uid']}",
            "annotations": {PROVISIONED_BY: storage_class["provisioner"]},
        },
        "spec": {
            "capacity": {"storage": spec["resources"]["requests"]["storage"]},
            "accessModes": spec["accessModes"],
            "volumeMode": spec.get("volumeMode", "Filesystem"),
            "storageClassName": storage_class["metadata"]["name"],
            "persistentVolumeReclaimPolicy": storage_class.get("reclaimPolicy", "Delete"),
            "mountOptions": storage_class.get("mountOptions", []),
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
            "csi": {
                "driver": storage_class["provisioner"],
                "volumeHandle": meta["uid"],
                "volumeAttributes": storage_class.get("parameters", {}),
            },
        },
    }


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            writer.close()


def _terminate(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


async def run(state: State) -> None:
    supervisor = Supervisor(state)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = await asyncio.start_unix_server(supervisor.proxy, str(state.egress_socket))
    client = Client(state.read()["server"], state.pki)
    while not client.ready() and not stop.is_set():
        await asyncio.sleep(0.2)
    supervisor.client = client
    try:
        while not stop.is_set():
            for step in (supervisor.provision, supervisor.reconcile_stand_ins):
                try:
                    await asyncio.to_thread(step)
                except (ApiError, OSError, KeyError, ValueError) as error:
                    print(f"supervisor: {step.__name__}: {error}", flush=True)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
    finally:
        server.close()
        supervisor.stop_all()


def main() -> None:
    parser = argparse.ArgumentParser(description="the local cluster's stand-ins (started by `up`)")
    parser.add_argument("--state", type=Path, required=True)
    args = parser.parse_args()
    print(f"supervisor: started for {args.state}", flush=True)
    asyncio.run(run(State(args.state)))


if __name__ == "__main__":
    main()
