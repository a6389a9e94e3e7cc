"""The policy pack's modules as the Pulumi CLI imports them (the pack directory on sys.path), and
the objects every stack renders (with the URNs the engine gives them), computed once per test session."""

from __future__ import annotations

import copy
import functools
import sys
from typing import Any

from infra.program.settings import PROJECT
from infra.review.manifest import Rendering
from infra.review.upstream import summarised
from infra.stackconfig import ROOT, stack_names
from tests.infra.conftest import JOB_STACKS, is_training_job, shared_shipped

POLICY_DIR = ROOT / "policy"
if str(POLICY_DIR) not in sys.path:
    sys.path.insert(0, str(POLICY_DIR))

STACKS = JOB_STACKS  # the stacks that render a training job
ALL_STACKS = stack_names()  # and the platform and prerequisites stacks


def _rendering(stack: str) -> Rendering:
    return shared_shipped(stack)  # one render per test process, shared with tests/infra's `shipped`


def _objects(stack: str) -> tuple[dict[str, Any], ...]:
    return tuple(_rendering(stack).objects)


def resources_of(rendering: Rendering) -> list[tuple[str, dict[str, Any]]]:
    """Each rendered object with its URN as the engine makes it: `urn:pulumi:<stack>::<project>::<its
    parents' types and its own, joined by $>::<name>` (what the pack reads a resource's components from)."""
    components = {r.name: r for r in rendering.registrations if not r.custom}

    def qualified_type(registration: Any) -> str:
        types = [registration.type]
        while registration.parent:
            registration = components[registration.parent]
            types.append(registration.type)
        return "$".join(reversed(types))

    urns = {}
    for r in rendering.registrations:
        if r.custom and r.type.startswith("kubernetes:") and "kind" in r.inputs:
            meta = r.inputs.get("metadata") or {}
            key = (r.inputs["kind"], meta.get("namespace"), meta.get("name"))
            urns[key] = f"urn:pulumi:{rendering.stack}::{PROJECT}::{qualified_type(r)}::{r.name}"
    own = [
        (urns[(o["kind"], o["metadata"].get("namespace"), o["metadata"].get("name"))], copy.deepcopy(o))
        for o in rendering.objects
    ]
    # What the stack applies from the vendored upstream manifests: children of the kustomize Directory
    # or yaml/v2 ConfigFile, under the component that made it (infra/review/upstream.py). CRDs as the
    # goldens show them, their schemas as digests: the pack reads no schema, and proxying 14 MB of them
    # through every policy takes half a minute (the local tier's scenario 19 feeds them whole).
    upstream = [
        (
            f"urn:pulumi:{rendering.stack}::{PROJECT}::{qualified_type(install.registration)}${item.type}"
            f"::{item.name}",
            summarised(item.obj),
        )
        for install in rendering.upstream
        for item in install.objects
    ]
    return own + upstream


@functools.cache
def _resources(stack: str) -> tuple[tuple[str, dict[str, Any]], ...]:
    return tuple(resources_of(_rendering(stack)))


def stack_resources(stack: str) -> list[tuple[str, dict[str, Any]]]:
    """A stack's (URN, object) pairs, its own objects and those it applies from the vendored upstream
    manifests, the objects fresh deep copies."""
    return [(urn, copy.deepcopy(obj)) for urn, obj in _resources(stack)]


def stack_objects(stack: str) -> list[dict[str, Any]]:
    """A fresh deep copy of a stack's rendered objects, safe to mutate."""
    return copy.deepcopy(list(_objects(stack)))


def job_of(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (job,) = [o for o in objects if is_training_job(o)]
    return job


def templates_of(job: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod templates inside a rendered job, whichever kind, for mutation."""
    if job["kind"] == "PyTorchJob":
        return [r["template"] for r in job["spec"]["pytorchReplicaSpecs"].values()]
    return [job["spec"]["template"]]
