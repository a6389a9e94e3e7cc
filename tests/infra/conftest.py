"""Helpers for rendering ad-hoc stack configs through the real program under Pulumi's mocks."""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

from infra.program.settings import PROJECT
from infra.review.manifest import Rendering, render
from infra.stackconfig import StackConfig, from_mapping, load_stack, stack_names

# Stacks that run a training job (a platform stack only installs the cluster-level operator, a
# prerequisites stack what a bare dev cluster lacks).
ROLES = {s: load_stack(s).values.get(f"{PROJECT}:stackRole", "all") for s in stack_names()}
JOB_STACKS = [s for s, role in ROLES.items() if role in ("all", "job")]
PLATFORM_STACKS = [s for s, role in ROLES.items() if role == "platform"]
PREREQUISITE_STACKS = [s for s, role in ROLES.items() if role == "prerequisites"]

# The smallest valid config: the default storage preset (nfs-csi) needs a server. Without a seed Job
# or the post-install smoke checks, so that the training job is the stack's only workload (tests of the
# seed Job and of the smoke checks ask for them).
BASE: dict[str, Any] = {
    "nfsServer": "nfs.example.internal",
    "seedSource": "none",
    "operatorSmokeCheck": False,
    "networkPolicySmokeCheck": False,
}


def stack_config(
    values: dict[str, Any], secrets: dict[str, str] | None = None, name: str = "test"
) -> StackConfig:
    """A stack as the CLI would pass it: `values` plain, `secrets` marked secret."""
    plain = from_mapping(name, {f"{PROJECT}:{k}": v for k, v in values.items()})
    secret_values = {f"{PROJECT}:{k}": v for k, v in (secrets or {}).items()}
    return StackConfig(
        name=name, values={**plain.values, **secret_values}, secret_keys=frozenset(secret_values)
    )


def render_config(values: dict[str, Any], secrets: dict[str, str] | None = None) -> Rendering:
    return render(stack_config({**BASE, **values}, secrets))


def rendered(values: dict[str, Any]) -> Rendering:
    """`render_config(values)`, rendered once per test process for the same values: each caller gets
    a copy of its own to change. Only for tests whose claim is about the objects: a test that patches
    what the program reads, or counts what a render calls or logs, renders with `render_config`."""
    return copy.deepcopy(_rendered(json.dumps(values, sort_keys=True)))


@functools.cache
def _rendered(values: str) -> Rendering:
    return render_config(json.loads(values))


def shipped(name: str) -> Rendering:
    """A shipped stack (stacks/Pulumi.NAME.yaml) rendered, once per test process: each caller gets a
    copy of its own to change."""
    return copy.deepcopy(shared_shipped(name))


@functools.cache
def shared_shipped(name: str) -> Rendering:
    """The one rendering of a shipped stack in this test process, shared by every caller: for readers
    that copy what they change (tests/policy's conftest); others call `shipped`."""
    return render(load_stack(name))


def by_kind(rendering: Rendering, kind: str) -> list[dict[str, Any]]:
    return [o for o in rendering.objects if o["kind"] == kind]


def team_policies(rendering: Rendering) -> list[dict[str, Any]]:
    """The NetworkPolicies of the stack's own namespace (not the platform's controllers' or smoke check's)."""
    return [
        p
        for p in by_kind(rendering, "NetworkPolicy")
        if p["metadata"].get("namespace") == rendering.settings.namespace
    ]


def one(rendering: Rendering, kind: str) -> dict[str, Any]:
    (obj,) = by_kind(rendering, kind)
    return obj


def is_training_job(obj: dict[str, Any]) -> bool:
    """The training job (not the seed Job): the workload labelled as the trainer component."""
    return (
        obj["kind"] in ("PyTorchJob", "TrainJob", "Job")
        and obj["metadata"]["labels"]["app.kubernetes.io/component"] == "trainer"
    )


def training_job(rendering: Rendering) -> dict[str, Any]:
    (job,) = [o for o in rendering.objects if is_training_job(o)]
    return job


def pod_templates(rendering: Rendering) -> list[dict[str, Any]]:
    """Every pod template of the training job, whichever kind it is."""
    templates = [
        r["template"]
        for j in by_kind(rendering, "PyTorchJob")
        if is_training_job(j)  # not the post-install smoke check's
        for r in j["spec"]["pytorchReplicaSpecs"].values()
    ]
    templates += [j["spec"]["template"] for j in by_kind(rendering, "Job") if is_training_job(j)]
    templates += [  # a TrainJob's pods come from its TrainingRuntime's JobSet template
        r["template"]["spec"]["template"]
        for runtime in by_kind(rendering, "TrainingRuntime")
        if runtime["metadata"]["labels"]["app.kubernetes.io/component"] == "trainer"
        for r in runtime["spec"]["template"]["spec"]["replicatedJobs"]
    ]
    assert templates, "no training job rendered"
    return templates


def as_inputs(values: dict[str, Any]) -> dict[str, Any]:
    """Config values (`key` or `ddp-mnist:key`, as strings or already typed) as the typed inputs a
    program passes to a component of the package (infra/component/), per Pulumi.yaml's types."""
    from infra.program.schema import config_schema

    types = config_schema()
    typed: dict[str, Any] = {}
    for full_key, value in values.items():
        key = full_key.removeprefix(f"{PROJECT}:")
        kind = types[key]["type"]
        raw = value if isinstance(value, str) else json.dumps(value)
        if kind == "integer":
            typed[key] = int(raw)
        elif kind == "boolean":
            typed[key] = raw == "true"
        elif kind == "array":
            typed[key] = json.loads(raw)
        else:
            typed[key] = value
    return typed
