"""The policy pack's modules as the Pulumi CLI imports them (the pack directory on sys.path), and
the objects every stack renders, computed once per test session."""

from __future__ import annotations

import copy
import functools
import sys
from typing import Any

from infra.offline.manifest import render
from infra.offline.stackconfig import ROOT, load_stack
from tests.infra.conftest import JOB_STACKS, is_training_job

POLICY_DIR = ROOT / "policy"
if str(POLICY_DIR) not in sys.path:
    sys.path.insert(0, str(POLICY_DIR))

STACKS = JOB_STACKS  # the stacks that render a training job


@functools.cache
def _objects(stack: str) -> tuple[dict[str, Any], ...]:
    return tuple(render(load_stack(stack)).objects)


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
