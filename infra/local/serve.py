"""The stack's model server, run locally after its training job succeeded, as the cluster would run it.

The server's pods are the effective pods of the rendered Deployment (`serveKind: deployment`) or
InferenceService (`infra.review.effective.serving`), after admission: each runs its container's own
command, args and env (`python -m trainer.serve ...`), with the checkpoint PVC mapped to the local
volume directory and the S3 endpoint and keys replaced by the local stand-in's. Only the listening
address changes: each pod gets a free loopback port, and a local "Service" (`LocalService`, a small
HTTP proxy on one fixed loopback port) forwards every request to a Ready pod (round robin), as
kube-proxy forwards to a Service's ready endpoints. A pod is Ready once `GET /v2/health/ready`
answers 200 (the rendered readinessProbe's path); one that exits before that fails the run here
(a cluster would restart it until `serveWaitTimeoutSeconds`).

`LocalDeployment.rollout` models the Deployment's RollingUpdate with maxUnavailable 0 and maxSurge 1
(`infra.program.job.serving.rolling_update`; kubernetes `pkg/controller/deployment/rolling.go`, read at
`03e0602`: reconcileNewReplicaSet/reconcileOldReplicaSets): one new pod is started, and only once it is Ready
does it join the Service and an old pod leave it and get SIGTERM; so the endpoint always has a Ready
server.

`evaluate` sends the whole MNIST test set through the Service in V2 JSON batches (UINT8 [N, 28, 28])
and counts correct labels, timing each request.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TextIO

from infra.local.plan import LOCALHOST, _local_container, _pod_dns, local_name
from infra.local.ports import free_port
from infra.program.job.tensorboard import BOARD_LABEL
from infra.review.effective import EffectivePod

READY_PATH = "/v2/health/ready"
SERVER_OWNERS = ("Deployment/", "InferenceService/")


class ServeFailed(RuntimeError):
    """The local server could not be started, never got Ready, or served other predictions: one line."""


@dataclass
class ServerPlan:
    """One server pod, ready to start: its container's argv and env, localized."""

    name: str
    argv: list[str]
    env: dict[str, str]
    version: str = ""
    health_port: bool = False  # the probes on a port of their own (--health-port), as the pod's are


def server_pods(pods: Sequence[EffectivePod]) -> list[EffectivePod]:
    """The model server's pods (the TensorBoard Deployment's are not: see `stack.say_curves`)."""
    return [
        p
        for p in pods
        if p.owner.startswith(SERVER_OWNERS)
        and BOARD_LABEL not in (p.manifest["metadata"].get("labels") or {})
    ]


def _flag(argv: Sequence[str], name: str) -> str:
    return next((a.split("=", 1)[1] for a in argv if a.startswith(f"{name}=")), "")


def plan_servers(
    pods: Sequence[EffectivePod],
    root: Path,
    secret_value: Callable[[str, str], str],
    overrides: dict[str, str],
) -> list[ServerPlan]:
    """The server's pods as local processes; the container listens on a loopback port chosen at start."""
    plans = []
    for pod in server_pods(pods):
        version = _flag(pod.spec["containers"][0].get("args", []), "--model-version")
        name = local_name(pod).replace("<hash>", version or "0") + f"-{pod.node_rank}"
        shutil.rmtree(root / "pods" / name, ignore_errors=True)  # a new pod's emptyDirs are empty
        container, _ = _local_container(
            pod.spec["containers"][0], pod, root, name, secret_value, _pod_dns(name, None), 0, overrides
        )
        ports = ("--port=", "--host=", "--health-port=")
        argv = [a for a in container.argv if not a.startswith(ports)]
        health = any(a.startswith("--health-port=") for a in container.argv)
        plans.append(ServerPlan(name, argv, container.env, version, health))
    return plans


def _get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read()


class ServerPod:
    """One running server process, its output streamed prefixed by its pod name."""

    def __init__(self, plan: ServerPlan, out: TextIO, lock: threading.Lock, cwd: Path) -> None:
        self.plan = plan
        self.port = free_port()
        # Where the readiness probe asks: the probes' own port when the pod has one, as the kubelet does.
        self.probe_port = free_port() if plan.health_port else self.port
        ports = [f"--port={self.port}", *([f"--health-port={self.probe_port}"] if plan.health_port else [])]
        self.out, self.lock = out, lock
        self.tail: deque[str] = deque(maxlen=40)
        self.terminated = False  # SIGTERM sent: the kubelet sends one, then SIGKILL after the grace period
        self.proc = subprocess.Popen(
            [*plan.argv, f"--host={LOCALHOST}", *ports],
            env=plan.env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.tail.append(line.rstrip())
            with self.lock:
                print(f"[{self.plan.name}] {line.rstrip()}", file=self.out, flush=True)

    @property
    def url(self) -> str:
        return f"http://{LOCALHOST}:{self.port}"

    def wait_ready(self, timeout: float) -> None:
        """Polls the readiness path, as the readinessProbe does, until 200; fails if the process ends."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                self.reader.join(5)
                last = next((line for line in reversed(self.tail) if line.strip()), "")
                raise ServeFailed(
                    f"server pod {self.plan.name} exited with {code} before it was Ready: {last}"
                )
            with contextlib.suppress(OSError):
                if _get(f"http://{LOCALHOST}:{self.probe_port}{READY_PATH}")[0] == 200:
                    return
            time.sleep(0.2)
        self.stop()
        raise ServeFailed(f"server pod {self.plan.name} not Ready on {READY_PATH} within {timeout:.0f}s")

    def terminate(self) -> None:
        """SIGTERM, as the kubelet sends when the pod is deleted: once. A second one came while the
        server drained (`_retire` signals first and stops it later)."""
        if not self.terminated and self.proc.poll() is None:
            self.terminated = True
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, grace: float = 30) -> int:
        """SIGTERM (unless sent already); SIGKILL after the grace period; the exit code."""
        self.terminate()
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(5)
        return self.proc.returncode


# How late a deleted pod's endpoint leaves the local Service after the pod got SIGTERM: in a cluster the
# kubelet signals the pod while the endpoint's removal travels through the EndpointSlice controller to
# every node's kube-proxy, so new connections keep arriving for a while after the signal.
ENDPOINT_LAG_S = 1.0


class LocalService:
    """A Service stand-in: an HTTP proxy on a fixed loopback port, forwarding each request to one of the
    Ready backends (round robin); 503 when it has none. As with a Service's endpoints (kube-proxy), a
    backend taken out stops getting new requests, while the requests already sent to it are answered
    by it: `remove` returns once they are."""

    def __init__(self, port: int) -> None:
        self.backends: list[str] = []
        self._turn = itertools.count()
        self._in_flight: dict[str, int] = {}
        self._idle = threading.Condition()
        service = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                del format, args

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                with service.forwarding() as backend:
                    if backend is None:
                        self._answer(503, b'{"error": "no ready endpoint"}', "application/json")
                        return
                    status, payload, content_type = self._relay(backend, body)
                self._answer(status, payload, content_type)

            def _relay(self, backend: str, body: bytes | None) -> tuple[int, bytes, str | None]:
                conn = http.client.HTTPConnection(backend, timeout=120)
                try:
                    headers = {
                        k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")
                    }
                    conn.request(self.command, self.path, body=body, headers=headers)
                    response = conn.getresponse()
                    status, payload = response.status, response.read()
                    content_type = response.getheader("Content-Type")
                except (OSError, http.client.HTTPException) as error:
                    status, content_type = 502, "application/json"
                    payload = json.dumps({"error": f"backend {backend}: {error}"}).encode()
                finally:
                    conn.close()
                return status, payload, content_type

            def _answer(self, status: int, body: bytes, content_type: str | None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type or "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _forward

        self.server = ThreadingHTTPServer((LOCALHOST, port), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://{LOCALHOST}:{self.port}"

    @contextlib.contextmanager
    def forwarding(self) -> Iterator[str | None]:
        """The next Ready backend (round robin; None when there is none), counted as busy meanwhile."""
        with self._idle:
            backends = self.backends
            backend = backends[next(self._turn) % len(backends)] if backends else None
            if backend is not None:
                self._in_flight[backend] = self._in_flight.get(backend, 0) + 1
        try:
            yield backend
        finally:
            if backend is not None:
                with self._idle:
                    self._in_flight[backend] -= 1
                    self._idle.notify_all()

    def add(self, pod: ServerPod) -> None:
        with self._idle:
            self.backends = [*self.backends, f"{LOCALHOST}:{pod.port}"]

    def remove(self, pod: ServerPod, timeout: float = 120) -> None:
        """No new request goes to `pod`; returns once those already sent to it are answered."""
        backend = f"{LOCALHOST}:{pod.port}"
        with self._idle:
            self.backends = [b for b in self.backends if b != backend]
            self._idle.wait_for(lambda: not self._in_flight.get(backend), timeout)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class LocalDeployment:
    """The server's pods behind one `LocalService`, started, rolled and stopped as the Deployment
    controller would with maxUnavailable 0 and maxSurge 1."""

    service: LocalService
    out: TextIO
    cwd: Path
    ready_timeout: float
    pods: list[ServerPod] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def say(self, line: str) -> None:
        with self.lock:
            print(line, file=self.out, flush=True)

    def _surge(self, plan: ServerPlan) -> ServerPod:
        pod = ServerPod(plan, self.out, self.lock, self.cwd)
        try:
            pod.wait_ready(self.ready_timeout)
        except BaseException:  # not Ready, or the run interrupted meanwhile: not left running
            pod.stop()
            raise
        self.service.add(pod)
        self.say(f"[local] server pod {plan.name} Ready (model version {plan.version}); in the Service")
        return pod

    def start(self, plans: Sequence[ServerPlan]) -> None:
        for plan in plans:
            self.pods.append(self._surge(plan))

    def rollout(self, plans: Sequence[ServerPlan]) -> None:
        """A new pod template: each new pod Ready before an old one leaves the Service and is stopped."""
        old = list(self.pods)
        for index, plan in enumerate(plans):
            self.pods.append(self._surge(plan))  # a new pod that never gets Ready leaves the old serving
            if index < len(old):
                self._retire(old[index])
        for pod in old[len(plans) :]:
            self._retire(pod)

    def _retire(self, pod: ServerPod) -> None:
        """As a deleted pod goes: SIGTERM first, its endpoint leaves the Service `ENDPOINT_LAG_S` later
        (requests sent meanwhile still reach it), then the process gets its grace period to exit."""
        pod.terminate()
        time.sleep(ENDPOINT_LAG_S)
        self.service.remove(pod)
        self.pods.remove(pod)
        code = pod.stop()
        self.say(f"[local] server pod {pod.plan.name} left the Service and stopped (SIGTERM: exit {code})")
        if code != 0:
            raise ServeFailed(f"server pod {pod.plan.name} exited with {code} on SIGTERM (expected 0)")

    def stop(self) -> None:
        """Every pod retired in turn. One that fails to, or a stop interrupted (Ctrl-C, SIGTERM), still
        leaves none running: the first error is raised once all are stopped."""
        first: BaseException | None = None
        for pod in list(self.pods):
            try:
                self._retire(pod)
            except BaseException as error:
                pod.stop()
                first = first or error
        if first is not None:
            raise first


@contextlib.contextmanager
def local_service(port: int, chosen: bool = True, out: TextIO = sys.stdout) -> Iterator[LocalService]:
    """The Service stand-in on `port`. A port the user chose (`--serve-port`) that is taken is one line
    and a failure; the stack's own port (`servePort`) that is taken here gives way to a free one, and
    the output says so (on a cluster the Service has its own address)."""
    try:
        service = LocalService(port)
    except OSError as error:
        if chosen or port == 0:
            raise ServeFailed(
                f"--serve-port={port}: cannot listen on {LOCALHOST}:{port} ({error.strerror}); pick a free "
                "port (0 picks one)"
            ) from None
        service = LocalService(0)
        print(
            f"[local] port {port} (servePort) is taken on {LOCALHOST} ({error.strerror}); the local Service "
            f"listens on {service.url} instead (--serve-port picks one)",
            file=out,
            flush=True,
        )
    try:
        yield service
    finally:
        service.close()
