"""The local cluster's stand-ins for what a cluster's other parts do, in one process.

- **Egress proxy** (the API server's `cluster` egress, HTTP CONNECT on a Unix socket): a call to a Service
  (an admission webhook) goes to the local process whose pod labels the Service selects, at the local
  port of the Service's target port; a call to a real node's kubelet (logs, exec) goes to it as is.
- **Volume provisioner**: what a CSI driver's external-provisioner does for a claim of a StorageClass
  whose provisioner is neither the in-tree one nor the real node's: a PersistentVolume bound to the
  claim (after the scheduler picks a node when the class waits for the first consumer), deleted when
  released under `Delete`.
- **cert-manager**: self-signed certificates and CA injection (certmanager.py).
- **Operator pods**: the Deployments of the operators (the training operator, Kueue) run as local
  processes with what a kubelet would give their pod (standins.py), each pod Ready once its process
  answers its readiness probe.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from pathlib import Path

from infra.localcluster import certmanager
from infra.localcluster.cluster import State
from infra.localcluster.fleet import FAKE_NODE_ANNOTATION
from infra.localcluster.kube import ApiError, Client, Obj
from infra.localcluster.node.storage import PROVISIONER as REAL_NODE_PROVISIONER
from infra.localcluster.operators import STAND_INS
from infra.localcluster.standins import LocalPods, target_port

SELECTED_NODE = "volume.kubernetes.io/selected-node"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
# Classes this stand-in leaves alone: the in-tree "no provisioner" (static volumes), and the real node's
# provisioner, which runs for real there (node/storage.py).
NOT_OURS = {"kubernetes.io/no-provisioner", REAL_NODE_PROVISIONER}


class Supervisor:
    def __init__(self, state: State, client: Client) -> None:
        self.state = state
        self.client = client
        self.pods = LocalPods(STAND_INS, client, state.directory / "pods", state.kubeconfig, state.log)

    # --- the egress proxy -------------------------------------------------------------------------
    def backend(self, host: str, port: int) -> int | None:
        """The local port that serves `host:port` (a Service's ClusterIP or DNS name)."""
        for svc in self.client.items("/api/v1/services"):
            meta, spec = svc["metadata"], svc["spec"]
            names = {spec.get("clusterIP"), f"{meta['name']}.{meta['namespace']}.svc"}
            if host not in names:
                continue
            for svc_port in spec.get("ports", []):
                if svc_port["port"] != port:
                    continue
                for running in self.pods.running.values():
                    pod = running.pod.pod
                    labels = pod["metadata"].get("labels", {})
                    ended = running.process.poll() is not None
                    if pod["metadata"]["namespace"] != meta["namespace"] or ended:
                        continue
                    if spec.get("selector") and spec["selector"].items() <= labels.items():
                        return target_port(svc_port.get("targetPort", port), pod, running.pod.ports)
        return None

    def target(self, host: str, port: int) -> tuple[str, int] | None:
        """Where a CONNECT to `host:port` goes: a Service's local process, or a real node's kubelet
        (logs, exec: the API server sends its kubelet traffic through the same egress) at the node's
        own address, which is this machine's."""
        local = self.backend(host, port)
        if local is not None:
            return "127.0.0.1", local
        for node in self.client.items("/api/v1/nodes"):
            if FAKE_NODE_ANNOTATION in node["metadata"].get("annotations", {}):
                continue
            addresses = node.get("status", {}).get("addresses", [])
            if any(a["type"] == "InternalIP" and a["address"] == host for a in addresses):
                return host, port
        return None

    async def proxy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await reader.readuntil(b"\r\n\r\n")
            method, requested = request.split(b" ")[:2]
            host, _, port = requested.decode().rpartition(":")
            target = await asyncio.to_thread(self.target, host, int(port)) if method == b"CONNECT" else None
            if target is None:
                writer.write(b"HTTP/1.1 503 Service Unavailable\r\n\r\n")
                await writer.drain()
                return
            up_reader, up_writer = await asyncio.open_connection(*target)
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except (OSError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    # --- cert-manager ------------------------------------------------------------------------------
    def certificates(self) -> None:
        certmanager.issue(self.client)
        certmanager.inject(self.client)

    # --- the volume provisioner -------------------------------------------------------------------
    def provision(self) -> None:
        classes = {
            c["metadata"]["name"]: c for c in self.client.items("/apis/storage.k8s.io/v1/storageclasses")
        }
        for claim in self.client.items("/api/v1/persistentvolumeclaims"):
            meta, spec = claim["metadata"], claim["spec"]
            sc = classes.get(spec.get("storageClassName") or "")
            if spec.get("volumeName") or claim.get("status", {}).get("phase") != "Pending" or sc is None:
                continue
            if sc["provisioner"] in NOT_OURS or meta.get("deletionTimestamp"):
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


async def run(state: State) -> None:
    supervisor = Supervisor(state, Client(state.read()["server"], state.pki))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = await asyncio.start_unix_server(supervisor.proxy, str(state.egress_socket))
    while not supervisor.client.ready() and not stop.is_set():
        await asyncio.sleep(0.2)
    try:
        while not stop.is_set():
            for step in (
                supervisor.provision,
                supervisor.certificates,
                supervisor.pods.reconcile,
                supervisor.pods.release,
            ):
                try:
                    await asyncio.to_thread(step)
                except (ApiError, OSError, KeyError, ValueError) as error:
                    print(f"supervisor: {step.__name__}: {error}", flush=True)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
    finally:
        server.close()
        supervisor.pods.stop_all()


def main() -> None:
    parser = argparse.ArgumentParser(description="the local cluster's stand-ins (started by `up`)")
    parser.add_argument("--state", type=Path, required=True)
    args = parser.parse_args()
    print(f"supervisor: started for {args.state}", flush=True)
    asyncio.run(run(State(args.state)))


if __name__ == "__main__":
    main()
