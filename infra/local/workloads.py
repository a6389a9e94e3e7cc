"""The stack's workloads, planned for a local run: in dependency order (the seed Job before the
training job), from their effective pods once admission accepts every one, with the stack's Secret
values (or local overrides) in place of the Secret references.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from infra.local.plan import JobPlan, PlanError, plan, workloads
from infra.local.ports import free_port
from infra.review.cluster import ClusterView, cluster_view
from infra.review.manifest import Rendering
from infra.stackconfig import SECRET_PLACEHOLDER

WORKLOAD_TYPES = (
    "kubernetes:batch/v1:Job",
    "kubernetes:kubeflow.org/v1:PyTorchJob",
    "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob",
)


class PodsRefused(Exception):
    """The API server would refuse the job's pods: one line each, in its wording."""

    def __init__(self, job: str, lines: list[str]) -> None:
        self.lines = lines
        super().__init__(f"job {job} cannot start: its pods are refused at admission")


def stack_secret_resolver(rendering: Rendering) -> Callable[[str, str], str]:
    """Secret references resolve to the stack's own Secret values, else to the local environment."""
    known: dict[tuple[str, str], str] = {}
    for reg in rendering.registrations:
        if reg.type == "kubernetes:core/v1:Secret":
            data = reg.inputs.get("stringData", {})
            data = data.get("value", data) if isinstance(data, dict) else {}
            for key, value in data.items():
                if value != SECRET_PLACEHOLDER:
                    known[(reg.inputs["metadata"]["name"], key)] = value

    def resolve(name: str, key: str) -> str:
        if (name, key) in known:
            return known[(name, key)]
        if key in os.environ:
            return os.environ[key]
        raise PlanError(f"Secret {name} key {key}: not known locally; export {key} to run this stack here")

    return resolve


def secret_resolver(rendering: Rendering, overrides: Mapping[str, str]) -> Callable[[str, str], str]:
    """`stack_secret_resolver`, where an override (a local stand-in's keys, or --env) replaces the
    variable the Secret would set."""
    stack_secret = stack_secret_resolver(rendering)

    def resolve(name: str, key: str) -> str:
        return overrides[key] if key in overrides else stack_secret(name, key)

    return resolve


def dependency_order(rendering: Rendering) -> dict[str, int]:
    """Workload object name -> position, so that a workload comes after those it depends on."""
    regs = {r.name: r for r in rendering.registrations if r.custom}

    def depth(name: str, seen: frozenset[str] = frozenset()) -> int:
        deps = [d for d in regs[name].dependencies if d in regs and d not in seen]
        return 1 + max((depth(d, seen | {name}) for d in deps), default=0)

    return {r.inputs["metadata"]["name"]: depth(r.name) for r in regs.values() if r.type in WORKLOAD_TYPES}


def admitted(rendering: Rendering) -> ClusterView:
    """The stack's effective pods after admission; PodsRefused (named after the stack's last
    workload) when the API server would refuse any of them."""
    view = cluster_view(rendering.objects, rendering.settings)
    if view.admission.refusals:
        last = workloads(rendering.objects, dependency_order(rendering))[-1]
        raise PodsRefused(last["metadata"]["name"], view.admission.refusals)
    return view


def plan_workloads(rendering: Rendering, root: Path, overrides: dict[str, str]) -> list[JobPlan]:
    """Every workload of the stack, in dependency order, planned from its effective pods once
    admission accepts all of them."""
    view = admitted(rendering)
    resolver = secret_resolver(rendering, overrides)
    return [
        plan(w, view.admission.pods, root, free_port(), resolver, overrides, rendering.objects)
        for w in workloads(rendering.objects, dependency_order(rendering))
    ]


def plan_stack(rendering: Rendering, root: Path, overrides: dict[str, str]) -> JobPlan:
    """The stack's training job (its last workload), planned."""
    return plan_workloads(rendering, root, overrides)[-1]
