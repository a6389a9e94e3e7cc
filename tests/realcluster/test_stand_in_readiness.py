"""A stand-in's pod is Ready only once its process answers its readiness probe (`make e2e-local` shows
it on the real control plane: scenario 1): KWOK's hold stage, the probe, and which held pods the
supervisor lets go."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.localcluster import fleet
from infra.localcluster.kube import Obj
from infra.localcluster.standins import (
    REVISION,
    LocalPod,
    LocalPods,
    Running,
    StandIn,
    answers_readiness_probe,
)

STAND_IN = StandIn("ctl-system", "ctl", "manager", "ctl", (8081,))
POD_READY = {  # the shape of KWOK v0.8.0's kustomize/stage/pod/fast/pod-ready.yaml
    "apiVersion": "kwok.x-k8s.io/v1alpha1",
    "kind": "Stage",
    "metadata": {"name": "pod-ready"},
    "spec": {
        "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
        "selector": {"matchExpressions": [{"key": ".status.phase", "operator": "In", "values": ["Pending"]}]},
        "next": {"statusTemplate": "phase: Running"},
    },
}


class Probe(http.server.BaseHTTPRequestHandler):
    status = 500

    def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
        self.send_response(type(self).status if self.path == "/readyz" else 404)
        self.end_headers()

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def probe() -> Iterator[tuple[type[Probe], int]]:
    handler = type("Handler", (Probe,), {"status": 500})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield handler, server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def running(probe, tmp_path: Path) -> Iterator[Running]:
    container = {
        "name": "manager",
        "ports": [{"name": "health", "containerPort": 8081}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "health"}, "timeoutSeconds": 3},
    }
    pod = {"metadata": {"name": "ctl-local", "namespace": "ctl-system"}, "spec": {"containers": [container]}}
    process = subprocess.Popen(["sleep", "60"])
    yield Running(process, "digest", LocalPod(pod, {8081: probe[1]}, tmp_path), revision="2")
    process.kill()
    process.wait()


def test_the_hold_stage_keeps_new_replica_set_pods_of_the_stand_ins_namespaces_pending_until_labelled(
    tmp_path: Path,
) -> None:
    ready = tmp_path / "kustomize" / "stage" / "pod" / "fast" / "pod-ready.yaml"
    ready.parent.mkdir(parents=True)
    ready.write_text(json.dumps(POD_READY))  # JSON is YAML
    hold = fleet.stand_in_hold_stage(tmp_path, ["kserve", "kubeflow"])
    expressions = hold["spec"]["selector"]["matchExpressions"]
    assert expressions[0] == POD_READY["spec"]["selector"]["matchExpressions"][0]  # upstream's pods
    assert {"key": ".metadata.namespace", "operator": "In", "values": ["kserve", "kubeflow"]} in expressions
    assert {
        "key": ".metadata.ownerReferences.[].kind",
        "operator": "In",
        "values": ["ReplicaSet"],
    } in expressions
    label = {"key": f'.metadata.labels["{fleet.PROCESS_READY}"]', "operator": "DoesNotExist"}
    assert label in expressions  # labelled, a pod is upstream's pod-ready's again
    assert hold["spec"]["weight"] > 0  # KWOK never picks upstream's weight-0 pod-ready over it
    assert hold["spec"]["delay"]["durationMilliseconds"] >= 3600 * 1000
    assert hold["spec"]["next"] == POD_READY["spec"]["next"]


def test_the_probe_answers_as_the_processs_readyz_does_and_never_once_the_process_ended(probe, running):
    handler, _port = probe
    assert not answers_readiness_probe(running, STAND_IN)  # 500
    handler.status = 200
    assert answers_readiness_probe(running, STAND_IN)
    with socket.create_server(("127.0.0.1", 0)) as other:  # a listener that answers no HTTP
        running.pod.ports[8081] = other.getsockname()[1]
        threading.Thread(target=lambda: other.accept()[0].sendall(b"not http\r\n\r\n"), daemon=True).start()
        assert not answers_readiness_probe(running, STAND_IN)
    running.process.kill()
    running.process.wait()
    assert not answers_readiness_probe(running, STAND_IN)


class Cluster:
    """The few reads and the label patch `LocalPods.release` makes, of pods and ReplicaSets held here."""

    def __init__(self, pods: list[Obj], replica_sets: dict[str, Obj]) -> None:
        self.pods, self.replica_sets, self.labelled = pods, replica_sets, []

    def items(self, path: str) -> list[Obj]:
        assert path.startswith("/api/v1/namespaces/ctl-system/pods?")
        assert "labelSelector=%21ddp-mnist.local%2Fprocess-ready" in path
        return self.pods

    def get(self, path: str) -> Obj | None:
        return self.replica_sets.get(path.rsplit("/", 1)[1])

    def request(self, method: str, path: str, body: Obj, content_type: str) -> Obj:
        assert (method, content_type) == ("PATCH", "application/merge-patch+json")
        assert body == {"metadata": {"labels": {fleet.PROCESS_READY: "true"}}}
        self.labelled.append(path.rsplit("/", 1)[1])
        return {}


def _pod(name: str, replica_set: str) -> Obj:
    return {"metadata": {"name": name, "ownerReferences": [{"kind": "ReplicaSet", "name": replica_set}]}}


def _replica_set(deployment: str, revision: str) -> Obj:
    owner = [{"kind": "Deployment", "name": deployment}]
    return {"metadata": {"annotations": {REVISION: revision}, "ownerReferences": owner}}


def test_a_held_pod_is_let_go_once_its_process_is_ready_an_older_revisions_never_another_deployments_at_once(
    probe, running, tmp_path: Path
) -> None:
    handler, _port = probe
    cluster = Cluster(
        [_pod("ctl-new", "ctl-b"), _pod("ctl-old", "ctl-a"), _pod("other", "other-a")],
        {
            "ctl-b": _replica_set("ctl", "2"),
            "ctl-a": _replica_set("ctl", "1"),
            "other-a": _replica_set("other", "1"),
        },
    )
    client: Any = cluster  # what LocalPods reads of a Client
    pods = LocalPods((STAND_IN,), client, tmp_path, tmp_path / "kubeconfig", lambda name: tmp_path / name)
    pods.running[STAND_IN.key] = running
    pods.release()
    assert cluster.labelled == ["other"]  # its process does not answer yet
    handler.status = 200
    pods.release()
    assert cluster.labelled == ["other", "ctl-new", "other"]  # ctl-old: not the template it runs
