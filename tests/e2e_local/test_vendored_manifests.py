"""The vendored upstream manifests (infra/manifests), against the pinned modules and the real engine:

23. the vendored files are what the pinned modules build now (`make manifests-check` does the same);
    the session's platform stack, which installed the training operator from its module's overlay (what
    upstream's git URL at the tag gives: every platform stack before the manifests were vendored), takes
    the vendored default: `up` replaces and deletes nothing and creates only the operator's ingress
    policy (derived from the file it now reads), every object keeps its URN and
    every CRD and the operator's Deployment stay the same objects (same uid), the kustomize Directory
    reads infra/manifests/training-operator; a second `up` changes nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
from pulumi import automation as auto

from infra.localcluster import manifests
from infra.program.common.vendored import TRAINING_OPERATOR, vendored
from tests.e2e import live
from tests.e2e.project import set_config
from tests.e2e_local import scenario

pytestmark = pytest.mark.e2e_local

OPERATOR_CRDS = [
    f"{plural}.kubeflow.org"
    for plural in ("jaxjobs", "mpijobs", "paddlejobs", "pytorchjobs", "tfjobs", "xgboostjobs")
]
DIRECTORY = "kubernetes:kustomize/v2:Directory"


def test_23a_the_vendored_manifests_are_what_the_pinned_modules_build() -> None:
    files, index = manifests.built()
    assert manifests.differences(files, index) == []


def _uids() -> dict[str, str]:
    found = {crd: live.get("crd", crd)["metadata"]["uid"] for crd in OPERATOR_CRDS}
    found["deployment"] = live.get("deployment", "training-operator", "kubeflow")["metadata"]["uid"]
    return found


def _operator_resources(stack: auto.Stack) -> dict[str, dict[str, Any]]:
    """The state's resources under the operator's Directory (and the Directory), by URN."""
    resources = (stack.export_stack().deployment or {}).get("resources", [])
    return {r["urn"]: r for r in resources if "training-operator-manifests" in r["urn"]}


def test_23b_a_platform_stack_moves_from_upstreams_overlay_to_the_vendored_one_in_place(
    platform: dict,
) -> None:
    stack: auto.Stack = platform["stack"]
    config = platform.get("config", scenario.platform_config())
    assert "ddp-mnist:operatorSource" in config, "the session's platform stack installs upstream's overlay"
    before, uids = _operator_resources(stack), _uids()
    platform["config"] = {k: v for k, v in config.items() if k != "ddp-mnist:operatorSource"}
    set_config(stack, platform["config"])
    result = stack.up(on_output=print, show_secrets=False)
    changed = scenario.changes(result.summary.resource_changes)
    assert not {"replace", "delete", "create-replacement", "delete-replaced"} & set(changed), changed
    # The one object created: the operator's ingress policy, which the program derives from the file it
    # now reads (infra/program/platform/operator_ingress.py); it selects the operator's pod alone.
    assert changed == {"create": 1}, changed
    assert sorted(scenario.controller_ingress("training-operator", "kubeflow")) == [8080, 9443]
    after = _operator_resources(stack)
    assert set(after) == set(before)  # every URN kept
    # The Directory is a component the provider constructs: the state keeps no inputs for it, and the
    # engine reports none of its children changed; the stack's output names the source it applied.
    assert [r["type"] for r in after.values()].count(DIRECTORY) == 1
    assert result.outputs["operatorSource"].value == str(vendored(TRAINING_OPERATOR).path)
    assert _uids() == uids  # no CRD, and not the operator, deleted and created again
    again = stack.up(on_output=print, show_secrets=False)
    assert scenario.changes(again.summary.resource_changes) == {}
