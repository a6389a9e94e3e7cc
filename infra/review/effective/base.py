"""The effective model's types, its registry of derivers, and what the kinds' derivers share."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]


@dataclass(frozen=True)
class Controllers:
    """How the cluster's controllers are configured, as far as it changes the pods they create.

    `operator_init_template` is the Go template of the training operator's Worker init containers
    (None: no operator in play), rendered with `operator_init_image` and `operator_max_tries`.
    `rendered` is every object of the stack (`derive` fills it), for a controller that reads another
    object than the workload: Kubeflow Trainer reads a TrainJob's TrainingRuntime.
    """

    operator_init_template: str | None = None
    operator_init_image: str = ""
    operator_max_tries: int = 100
    rendered: tuple[Obj, ...] = field(default=(), compare=False, hash=False, repr=False)


@dataclass(frozen=True)
class EffectivePod:
    """One pod a controller creates: the Pod object as submitted to the API server."""

    owner: str  # "PyTorchJob/mnist-r1"
    role: str  # "Master", "Worker", "Index"
    index: int  # replica index (Worker i) or completion index
    node_rank: int
    manifest: Obj

    @property
    def name(self) -> str:
        """The pod's name; for a generated name, the prefix with the API server's 5 random characters
        shown as `xxxxx`."""
        meta = self.manifest["metadata"]
        return meta.get("name") or f"{meta['generateName']}xxxxx"

    @property
    def spec(self) -> Obj:
        return self.manifest["spec"]


@dataclass
class Effective:
    """Everything the controllers of one rendered workload create."""

    pods: list[EffectivePod] = field(default_factory=list)
    services: list[Obj] = field(default_factory=list)

    def extend(self, other: Effective) -> None:
        self.pods += other.pods
        self.services += other.services


Deriver = Callable[[Obj, Controllers], Effective]
DERIVERS: dict[tuple[str, str], Deriver] = {}  # (apiVersion group, kind) -> deriver


def deriver(group: str, kind: str) -> Callable[[Deriver], Deriver]:
    def register(fn: Deriver) -> Deriver:
        DERIVERS[(group, kind)] = fn
        return fn

    return register


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def is_workload(obj: Mapping[str, Any]) -> bool:
    return (_group(obj.get("apiVersion", "")), obj.get("kind", "")) in DERIVERS


def pod_from_template(template: Obj, name: str | None, namespace: str, generate_name: str = "") -> Obj:
    """A Pod object from a pod template: the template's metadata and spec, named, in `namespace`."""
    meta = copy.deepcopy(template.get("metadata") or {})
    meta["namespace"] = namespace
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = generate_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": copy.deepcopy(template["spec"])}


def field_value(pod: Obj, field_path: str) -> str | None:
    """A downward-API fieldRef's value for a pod (the fields the workloads here use)."""
    import re

    meta = pod["metadata"]
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName"),
    }
    if field_path in simple:
        return simple[field_path]
    match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", field_path)
    if match:
        return (meta.get(match.group(1)) or {}).get(match.group(2))
    return None
