"""Operator pods as local processes: what a kubelet would give the pod of each stand-in's Deployment
(operators.py lists them).

The real binaries (built from their pinned modules) run with the container's arguments and environment,
its volumes written as files (secrets and config maps refreshed every pass, as a kubelet does), and a
token of its ServiceAccount (so the operator acts with the RBAC its manifests gave it). A changed pod
template starts a new process at once, as a Deployment's rolling update starts its new pod; the old
process, like a deleted Deployment's, gets SIGTERM and, as a kubelet does, SIGKILL once the pod's
`terminationGracePeriodSeconds` (default 30) has passed, without holding up anything else. The pod itself
stays a KWOK pod, held Pending (fleet.stand_in_hold_stage) until its process answers the container's
readiness probe, as a kubelet would make it Ready; the probe's initial delay and period are not waited
out, and a pod once Ready stays so.

What differs from a pod, and why: every process shares this machine's network, so each listens on
127.0.0.1 at free ports (its flags or its config file say which), save a port the process also writes
into objects other pods read (`StandIn.fixed_ports`). Each runs in its own mount namespace
where /tmp and /run are its pod's (the webhook certificates the operators expect at paths they
hard-code, the ServiceAccount's namespace, token and CA under /var/run/secrets); a mount elsewhere lands
under /tmp/.mounts and the container's arguments are rewritten to it.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import socket
import ssl
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from infra.local.ports import free_port
from infra.localcluster.build import binary
from infra.localcluster.fleet import PROCESS_READY
from infra.localcluster.kube import Client, Obj
from infra.program.common import yamlio

# The paths of a pod's own filesystem the stand-ins need: a private /tmp (the operators' webhook
# certificates, at paths they hard-code) and /run, which holds /var/run/secrets/kubernetes.io/
# serviceaccount (the namespace, token and CA a controller reads in a pod).
PRIVATE = ("/tmp", "/run")
SERVICE_ACCOUNT = "/run/secrets/kubernetes.io/serviceaccount"


@dataclass
class LocalPod:
    """One stand-in's pod as it runs here: the pod, the local port of each of its ports, its directory."""

    pod: Obj
    ports: dict[int, int]
    directory: Path

    def seen_at(self, mount_path: str) -> str:
        """Where the process sees a mount: at its own path under /tmp or /run (the pod's own), any other
        path under /tmp/.mounts (the container's arguments are rewritten to it)."""
        path = "/run" + mount_path[len("/var/run") :] if mount_path.startswith("/var/run/") else mount_path
        if any(path == p or path.startswith(p + "/") for p in PRIVATE):
            return path
        return "/tmp/.mounts/" + path.lstrip("/")

    def path(self, mount_path: str) -> Path:
        """Where a mount lands on this machine: under the pod's directory's `root/`."""
        return self.directory / "root" / self.seen_at(mount_path).lstrip("/")


@dataclass(frozen=True)
class StandIn:
    """A Deployment whose pod runs as a local process."""

    namespace: str
    deployment: str
    container: str
    binary: str
    # The ports the process listens on (its container's, and any it opens by default); each gets a free
    # local port, passed to it through `local_flags` or `local_file`.
    ports: tuple[int, ...]
    # Ports the process keeps at their own number (on every interface, as it listens): those it also
    # writes into objects that other pods read, where a local port would not be the Service's.
    fixed_ports: tuple[int, ...] = ()
    # Flags appended after the container's own.
    local_flags: Callable[[LocalPod], list[str]] = lambda _: []
    # A mounted file's content as the local process reads it: (mount path, content, pod) -> content.
    local_file: Callable[[str, bytes, LocalPod], bytes] = lambda _path, content, _pod: content

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.deployment}"


REVISION = "deployment.kubernetes.io/revision"


@dataclass
class Running:
    process: subprocess.Popen
    digest: str
    pod: LocalPod
    # The Deployment's revision as last read with this template: its ReplicaSet's pods run this process.
    revision: str = ""


# A pod's grace period when its spec sets none (the Pod API's default).
DEFAULT_GRACE_S = 30


@dataclass
class Stopping:
    """A stand-in's process sent SIGTERM: killed at `deadline` (monotonic) if it has not ended."""

    key: str
    process: subprocess.Popen
    since: float
    deadline: float


class LocalPods:
    """Keeps one local process per existing stand-in Deployment, in step with its pod template."""

    def __init__(
        self,
        stand_ins: tuple[StandIn, ...],
        client: Client,
        directory: Path,
        kubeconfig: Path,
        log: Callable[[str], Path],
    ) -> None:
        self.stand_ins = stand_ins
        self.client = client
        self.directory = directory
        self.kubeconfig = kubeconfig
        self.log = log
        self.running: dict[str, Running] = {}
        self.stopping: list[Stopping] = []

    def reconcile(self) -> None:
        self.reap()
        for stand_in in self.stand_ins:
            deployment = self.client.get(
                f"/apis/apps/v1/namespaces/{stand_in.namespace}/deployments/{stand_in.deployment}"
            )
            template = deployment["spec"]["template"] if deployment else None
            digest = (
                hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest() if template else ""
            )
            current = self.running.get(stand_in.key)
            if current and (current.digest != digest or current.process.poll() is not None):
                self.stop(stand_in.key)
                current = None
            if deployment and current is None:
                current = self.running[stand_in.key] = self.start(stand_in, deployment, digest)
            elif deployment and current:
                self.write_volumes(stand_in, current.pod)
            if deployment and current:
                current.revision = deployment["metadata"].get("annotations", {}).get(REVISION, "")

    def stop(self, key: str) -> None:
        """SIGTERM to the process of `key`, which no longer serves its pod (`reap` ends it), unless it
        has exited on its own."""
        running = self.running.pop(key)
        code = running.process.poll()
        if code is not None:
            print(f"supervisor: {key}: process exited with {code}", flush=True)
            return
        running.process.terminate()
        grace = running.pod.pod["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE_S)
        now = time.monotonic()
        self.stopping.append(Stopping(key, running.process, now, now + grace))

    def reap(self) -> None:
        """Forget the stopped processes that have ended; SIGKILL those past their grace period."""
        for stopping in list(self.stopping):
            took = time.monotonic() - stopping.since
            if stopping.process.poll() is not None:
                print(f"supervisor: {stopping.key}: old process ended {took:.1f} s after SIGTERM", flush=True)
            elif time.monotonic() >= stopping.deadline:
                stopping.process.kill()
                stopping.process.wait()
                print(
                    f"supervisor: {stopping.key}: old process killed after its grace period ({took:.0f} s)",
                    flush=True,
                )
            else:
                continue
            self.stopping.remove(stopping)

    def release(self) -> None:
        """Label the held pods (fleet.stand_in_hold_stage) that may become Ready: a stand-in's pod of
        the ReplicaSet its process runs the template of, once that process answers its readiness
        probe; a pod of any other Deployment in a stand-in's namespace at once (no process runs it)."""
        query = urllib.parse.urlencode(
            {"labelSelector": f"!{PROCESS_READY}", "fieldSelector": "status.phase=Pending"}
        )
        for namespace in sorted({s.namespace for s in self.stand_ins}):
            for pod in self.client.items(f"/api/v1/namespaces/{namespace}/pods?{query}"):
                meta = pod["metadata"]
                owner = next((o for o in meta.get("ownerReferences", []) if o["kind"] == "ReplicaSet"), None)
                if owner is None or meta.get("deletionTimestamp"):
                    continue
                replicas = self.client.get(
                    f"/apis/apps/v1/namespaces/{namespace}/replicasets/{owner['name']}"
                )
                if replicas is not None and self._may_be_ready(namespace, replicas):
                    patch = {"metadata": {"labels": {PROCESS_READY: "true"}}}
                    self.client.request(
                        "PATCH",
                        f"/api/v1/namespaces/{namespace}/pods/{meta['name']}",
                        patch,
                        content_type="application/merge-patch+json",
                    )

    def _may_be_ready(self, namespace: str, replicas: Obj) -> bool:
        meta = replicas["metadata"]
        deployment = next(
            (o["name"] for o in meta.get("ownerReferences", []) if o["kind"] == "Deployment"), ""
        )
        stand_in = next(
            (s for s in self.stand_ins if (s.namespace, s.deployment) == (namespace, deployment)), None
        )
        if stand_in is None:
            return True
        current = self.running.get(stand_in.key)
        return (
            current is not None
            and meta.get("annotations", {}).get(REVISION) == current.revision
            and answers_readiness_probe(current, stand_in)
        )

    def write_volumes(self, stand_in: StandIn, local: LocalPod) -> None:
        pod = local.pod
        container = _container(pod, stand_in.container)
        volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
        for mount in container.get("volumeMounts", []):
            files = self._volume_files(pod, volumes[mount["name"]])
            target = local.path(mount["mountPath"])
            if "subPath" in mount:  # one file of the volume, at the mount path itself
                files = {"": files[mount["subPath"]]} if mount["subPath"] in files else {}
                target.parent.mkdir(parents=True, exist_ok=True)
            else:
                target.mkdir(parents=True, exist_ok=True)
            for name, content in files.items():
                path = target / name if name else target
                _write_if_changed(path, stand_in.local_file(mount["mountPath"], content, local))

    def _volume_files(self, pod: Obj, volume: Obj) -> dict[str, bytes]:
        namespace = pod["metadata"]["namespace"]
        if "secret" in volume:
            name = volume["secret"]["secretName"]
            secret = self.client.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")
            return {k: base64.b64decode(v) for k, v in ((secret or {}).get("data") or {}).items()}
        if "configMap" in volume:
            cm = self.client.get(f"/api/v1/namespaces/{namespace}/configmaps/{volume['configMap']['name']}")
            return {k: v.encode() for k, v in ((cm or {}).get("data") or {}).items()}
        if "downwardAPI" in volume:
            return {
                item["path"]: field_value(pod, item["fieldRef"]["fieldPath"]).encode()
                for item in volume["downwardAPI"]["items"]
            }
        return {}  # emptyDir: the directory alone

    def pod_dir(self, stand_in: StandIn) -> Path:
        return self.directory / f"{stand_in.namespace}-{stand_in.deployment}"

    def start(self, stand_in: StandIn, deployment: Obj, digest: str) -> Running:
        pod = {
            "metadata": {
                **deployment["spec"]["template"].get("metadata", {}),
                "namespace": stand_in.namespace,
                "name": f"{stand_in.deployment}-local",
            },
            "spec": deployment["spec"]["template"]["spec"],
        }
        container = _container(pod, stand_in.container)
        local = LocalPod(pod, local_ports(stand_in, container), self.pod_dir(stand_in))
        for private in PRIVATE:
            local.path(private).mkdir(parents=True, exist_ok=True)
        self.write_volumes(stand_in, local)
        args = [self._rewrite(stand_in, local, a) for a in container.get("args", [])]
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": "/tmp",
            "KUBECONFIG": str(self.service_account(local)),
        }
        for var in container.get("env", []):
            if "value" in var:
                env[var["name"]] = self._rewrite(stand_in, local, var["value"])
            elif "fieldRef" in var.get("valueFrom", {}):
                env[var["name"]] = field_value(pod, var["valueFrom"]["fieldRef"]["fieldPath"])
        log = self.log(f"pod-{stand_in.namespace}-{stand_in.deployment}").open("ab")
        process = subprocess.Popen(
            [
                *in_own_mounts(local),
                str(binary(stand_in.binary)),
                *args,
                *stand_in.local_flags(local),
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=local.directory,
        )
        return Running(process, digest, local)

    @staticmethod
    def _rewrite(stand_in: StandIn, local: LocalPod, text: str) -> str:
        for mount in _container(local.pod, stand_in.container).get("volumeMounts", []):
            text = text.replace(mount["mountPath"], local.seen_at(mount["mountPath"]))
        return text

    def service_account(self, local: LocalPod) -> Path:
        """What a pod has of its ServiceAccount: a token (what its projected token would be), the CA and
        the namespace, at /var/run/secrets/kubernetes.io/serviceaccount; and a kubeconfig with the token
        (the API server is not at the in-cluster address here); the kubeconfig's path."""
        namespace = local.pod["metadata"]["namespace"]
        account = local.pod["spec"].get("serviceAccountName") or "default"
        token = self.client.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 86400},
            },
        )["status"]["token"]
        config = yamlio.load(self.kubeconfig.read_text())
        config["users"] = [{"name": "admin", "user": {"token": token}}]
        cluster = config["clusters"][0]["cluster"]
        ca = Path(cluster.pop("certificate-authority")).read_bytes()  # a path the pod may not see
        cluster["certificate-authority-data"] = base64.b64encode(ca).decode()
        account_dir = local.path(SERVICE_ACCOUNT)
        account_dir.mkdir(parents=True, exist_ok=True)
        for name, content in (("token", token.encode()), ("ca.crt", ca), ("namespace", namespace.encode())):
            _write_if_changed(account_dir / name, content)
        path = local.path("/tmp/kubeconfig")
        _write_if_changed(path, yaml.safe_dump(config).encode())
        path.chmod(0o600)
        return Path("/tmp/kubeconfig")

    def stop_all(self, timeout: float = 10) -> None:
        """Every process ended: SIGTERM to all at once, SIGKILL to those still running `timeout` later."""
        processes = [r.process for r in self.running.values()] + [s.process for s in self.stopping]
        for process in processes:
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + timeout
        for process in processes:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.running.clear()
        self.stopping.clear()


def local_ports(stand_in: StandIn, container: Obj) -> dict[int, int]:
    """The local port of each port the process listens on: a free one, or its own when fixed."""
    return {
        port: port if port in stand_in.fixed_ports else free_port()
        for port in {*stand_in.ports, *(p["containerPort"] for p in container.get("ports", []))}
    }


def in_own_mounts(local: LocalPod) -> list[str]:
    """The command prefix that runs a process in its own mount namespace, where /tmp and /run are the
    pod's (`unshare -Urm`: a user namespace too, so no privilege is needed where the kernel allows
    unprivileged user namespaces). It starts in the pod's directory and names the sources relative to
    it, so a source under /tmp stays reachable once /tmp is mounted over."""
    mounts = " && ".join(f"mount --bind {local.path(p).relative_to(local.directory)} {p}" for p in PRIVATE)
    return [
        "unshare",
        "-Urm",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        f'{mounts} && cd /tmp && exec "$@"',
        "sh",
    ]


def _write_if_changed(path: Path, content: bytes) -> None:
    if not path.exists() or path.read_bytes() != content:
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(content)
        tmp.replace(path)


def _container(pod: Obj, name: str) -> Obj:
    return next(c for c in pod["spec"]["containers"] if c["name"] == name)


def target_port(target: int | str, pod: Obj, local: dict[int, int]) -> int | None:
    """The local port of a Service's target port (a number or a container port's name)."""
    if isinstance(target, str):
        for container in pod["spec"]["containers"]:
            for port in container.get("ports", []):
                if port.get("name") == target:
                    return local.get(port["containerPort"])
        return None
    return local.get(target)


def field_value(pod: Obj, path: str) -> str:
    if path == "metadata.namespace":
        return str(pod["metadata"]["namespace"])
    if path == "metadata.name":
        return str(pod["metadata"]["name"])
    if path.startswith("metadata.annotations['"):
        return str(pod["metadata"].get("annotations", {}).get(path[len("metadata.annotations['") : -2], ""))
    if path.startswith("metadata.labels['"):
        return str(pod["metadata"].get("labels", {}).get(path[len("metadata.labels['") : -2], ""))
    raise ValueError(f"unsupported downward API field {path}")


def answers_readiness_probe(running: Running, stand_in: StandIn) -> bool:
    """What a kubelet's readiness probe of the container would find (an HTTP GET answered 200-399, a
    TCP port that accepts), asked once of the running process at its local port; with neither: running."""
    if running.process.poll() is not None:
        return False
    probe = _container(running.pod.pod, stand_in.container).get("readinessProbe") or {}
    check = probe.get("httpGet") or probe.get("tcpSocket")
    if check is None:
        return True
    port = target_port(check["port"], running.pod.pod, running.pod.ports)
    if port is None:
        return False
    timeout = probe.get("timeoutSeconds", 1)
    try:
        if "httpGet" not in probe:
            socket.create_connection(("127.0.0.1", port), timeout=timeout).close()
            return True
        scheme = check.get("scheme", "HTTP").lower()
        context = ssl._create_unverified_context() if scheme == "https" else None  # as a kubelet's probe
        url = f"{scheme}://127.0.0.1:{port}{check.get('path', '/')}"
        with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
            return 200 <= response.status < 400
    except (OSError, http.client.HTTPException):  # refused, timed out, or not HTTP: not ready
        return False
