"""Ingress to the platform's controllers: the ports their own Services name, and nothing else.

Each controller Deployment a platform stack applies (the training operator in `kubeflow`, Trainer v2's
controller and JobSet's in `kubeflow-system`, KServe's in `kserve`) gets a NetworkPolicy of its own,
`ddp-mnist-<deployment>-ingress`, selecting its pods by the Deployment's selector and admitting, from
any address, the ports that the manifest's Services send to those pods: the webhook port the API server
calls, the metrics port, and Trainer v2's status server (port 10443, where a TrainJob's pods report
progress). Every other port of those pods is closed to other pods.

- **From any address:** the API server's address is not a pod's, and it differs per cloud (GKE's and
  EKS's control planes sit outside the cluster's network), so the webhook port cannot be narrowed to it
  without breaking every admission call on some cluster. Metrics scrapers live in namespaces of the
  platform team's choosing.
- **Probes still work:** the kubelet's probes (port 8081) come from the pod's own node, which a
  NetworkPolicy cannot block (kubernetes.io, "Network Policies": traffic to and from the node where a
  Pod is running is always allowed).
- **The controllers' pods only, not their namespaces:** `kubeflow` is also where a Kubeflow platform
  installs its other components; a namespace-wide default deny would close theirs too.
- **Egress is left open:** each controller calls the API server, at an address no policy here can name
  on every cloud.

The policies are derived from the objects the stack applies (the vendored file, or `kserveSource`'s
file, which the program reads), so a release that adds or moves a port moves its policy with it. A
kustomize source the program does not read (`operatorSource`, `trainerSource`) gets none, and `up` says
so in one line.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.program.common import yamlio
from infra.program.common.meta import labels
from infra.program.settings import PROJECT, Settings

WORKLOAD_KINDS = ("Deployment",)
# A YAML stream's documents: a `---` line at column 0 always starts one (even inside a block scalar).
DOCUMENT_START = re.compile(r"(?m)^---[ \t]*(?:#[^\n]*)?(?:\n|$)")
CRD_DOCUMENT = re.compile(r"(?m)^kind:[ \t]*CustomResourceDefinition[ \t]*$")


def policy_name(deployment: str) -> str:
    return f"{PROJECT}-{deployment}-ingress"


def _selects(selector: Mapping[str, str], pod_labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(pod_labels.get(key) == value for key, value in selector.items())


def _container_ports(pod: Mapping[str, Any]) -> dict[str, tuple[int, str]]:
    """A pod's named container ports: name -> (number, protocol)."""
    found = {}
    for container in pod.get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name"):
                found[port["name"]] = (int(port["containerPort"]), port.get("protocol", "TCP"))
    return found


def _ports(
    services: Iterable[Mapping[str, Any]], pod: Mapping[str, Any], pod_labels: Mapping[str, str]
) -> list[dict[str, Any]]:
    """The pod's ports that `services` send to (a named targetPort resolved to its number where the pod
    names it), each once, in the order the Services name them."""
    named = _container_ports(pod)
    found: list[dict[str, Any]] = []
    for service in services:
        if not _selects((service.get("spec") or {}).get("selector") or {}, pod_labels):
            continue
        for port in service["spec"].get("ports") or []:
            target = port.get("targetPort", port["port"])
            protocol = port.get("protocol", "TCP")
            if isinstance(target, str) and target in named:
                target, protocol = named[target]
            entry = {"protocol": protocol, "port": target}
            if entry not in found:
                found.append(entry)
    return found


def ingress_policies(objects: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One NetworkPolicy (as a manifest) per Deployment in `objects`: its pods admit, from any address,
    the ports the Services of `objects` send to them, and nothing else (no port: nothing)."""
    objects = [o for o in objects if isinstance(o, Mapping)]
    services = [o for o in objects if o.get("kind") == "Service"]
    policies = []
    for workload in objects:
        if workload.get("kind") not in WORKLOAD_KINDS:
            continue
        metadata = workload["metadata"]
        template = workload["spec"]["template"]
        pod_labels = (template.get("metadata") or {}).get("labels") or {}
        namespaced = [s for s in services if s["metadata"].get("namespace") == metadata.get("namespace")]
        ports = _ports(namespaced, template["spec"], pod_labels)
        policies.append(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": {"name": policy_name(metadata["name"]), "namespace": metadata["namespace"]},
                "spec": {
                    "podSelector": {"matchLabels": dict(workload["spec"]["selector"]["matchLabels"])},
                    "policyTypes": ["Ingress"],
                    "ingress": [{"ports": ports}] if ports else [],
                },
            }
        )
    return policies


def read_objects(path: str) -> list[dict[str, Any]]:
    """The objects of a YAML stream on disk, less its CRDs (most of the vendored files' bytes, and no
    workload or Service among them), parsed once per content."""
    data = Path(path).read_bytes()
    return json.loads(_objects(hashlib.sha256(data).hexdigest(), data.decode()))


@functools.lru_cache(maxsize=8)
def _objects(_sha256: str, text: str) -> str:
    found = []
    for document in DOCUMENT_START.split(text):
        if CRD_DOCUMENT.search(document):
            continue
        obj = yamlio.load(document)
        if isinstance(obj, dict):
            found.append(obj)
    return json.dumps(found)


def apply(
    name: str,
    settings: Settings,
    component: str,
    objects: Iterable[Mapping[str, Any]],
    opts: pulumi.ResourceOptions,
) -> list[k8s.networking.v1.NetworkPolicy]:
    """The ingress policies of `objects`' controllers, registered with `opts` (the caller's parent, and
    the manifests they follow: the namespace must exist first)."""
    registered = []
    for policy in ingress_policies(objects):
        metadata = policy["metadata"]
        registered.append(
            k8s.networking.v1.NetworkPolicy(
                f"{name}-{metadata['name']}",
                metadata=k8s.meta.v1.ObjectMetaArgs(
                    name=metadata["name"], namespace=metadata["namespace"], labels=labels(settings, component)
                ),
                spec=policy["spec"],
                opts=opts,
            )
        )
    return registered


def not_read(key: str, source: str, controller: str) -> None:
    """The one line `up` shows when a controller's source is a kustomize source the program does not read."""
    pulumi.log.warn(
        f"config {PROJECT}:{key}={source} is a kustomize source this program does not read: {controller}'s "
        "pods get no ingress NetworkPolicy from this stack (docs/explanation/controllers.md)"
    )
