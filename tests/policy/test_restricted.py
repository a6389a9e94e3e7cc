"""Every pod every stack renders meets each Pod Security "restricted" control, one test per control.

The controls are `guardrails.RESTRICTED_CHECKS`, the API server's checks at "restricted:latest" (the
same functions the policy pack and `render --validate` run); that each of them reports its own
violation is shown on mutated pods in test_guardrails.py and tests/offline/test_admission.py.
"""

from __future__ import annotations

import guardrails as g
import pytest

from infra.stackconfig import load_stack
from tests.policy.conftest import STACKS, stack_objects


def _pods(stack):
    templates = [t for obj in stack_objects(stack) for t in g.pod_templates(obj)]
    assert templates, f"{stack} renders no pods"
    return templates


@pytest.mark.parametrize("control", sorted(g.RESTRICTED_CHECKS))
@pytest.mark.parametrize("stack", STACKS)
def test_every_pod_meets_the_control(stack, control):
    for pod in _pods(stack):
        assert g.RESTRICTED_CHECKS[control](pod.spec, pod.metadata) is None, pod.where


@pytest.mark.parametrize("stack", STACKS)
def test_every_namespace_the_stack_creates_enforces_restricted(stack):
    """The job's namespace, and the post-install smoke check's where the stack installs the operator."""
    namespaces = [o for o in stack_objects(stack) if o["kind"] == "Namespace"]
    config = load_stack(stack).values
    if config.get("ddp-mnist:createNamespace") == "false" and config.get("ddp-mnist:platformStack"):
        # A team namespace: its platform stack creates it (teamNamespaces).
        team = config["ddp-mnist:namespace"]
        created = stack_objects(config["ddp-mnist:platformStack"])
        namespaces = [o for o in created if o["kind"] == "Namespace" and o["metadata"]["name"] == team]
    assert namespaces
    for namespace in namespaces:
        labels = namespace["metadata"]["labels"]
        assert {labels[f"pod-security.kubernetes.io/{mode}"] for mode in ("enforce", "warn", "audit")} == {
            "restricted"
        }
