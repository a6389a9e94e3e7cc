"""docs/EXISTING-KUBEFLOW.md against the code: its kubectl recipe is the object the stack's patch applies,
with the same template, and its undo is what the provider's destroy applies."""

from __future__ import annotations

import re

from infra.program.platform.operator_patch import FIELD_MANAGER, patch_manifest
from infra.program.platform.training_operator import RESTRICTED_INIT_CONTAINER_TEMPLATE, TEMPLATE_ANNOTATION
from infra.program.settings import OPERATOR_INIT_IMAGE, Settings
from infra.review.effective.pytorchjob import render_init_containers
from infra.stackconfig import ROOT
from tests.docs.existing_kubeflow import DOC, recipe_patch, recipe_undo

DEFAULTS = Settings.model_validate({})


def test_the_recipe_is_the_object_the_stack_patches_with_the_installs_template():
    recipe = recipe_patch()
    assert recipe == patch_manifest(DEFAULTS)
    template = recipe["spec"]["template"]["metadata"]["annotations"][TEMPLATE_ANNOTATION]
    assert template == RESTRICTED_INIT_CONTAINER_TEMPLATE.replace(
        "{{.InitContainerImage}}", OPERATOR_INIT_IMAGE
    )
    # What the operator makes of it: the install's init container, the pinned image in it.
    assert render_init_containers(template, "j-master-0", "alpine:3.10", 100) == render_init_containers(
        RESTRICTED_INIT_CONTAINER_TEMPLATE, "j-master-0", OPERATOR_INIT_IMAGE, 100
    )


def test_the_undo_applies_an_empty_object_with_the_same_field_manager():
    command, body = recipe_undo()
    assert command == f"kubectl apply --server-side --field-manager={FIELD_MANAGER} -f -"
    assert body == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "training-operator", "namespace": "kubeflow"},
    }


def test_every_kubectl_apply_of_the_page_uses_the_stacks_field_manager():
    applies = re.findall(r"kubectl apply [^\n]*", DOC.read_text())
    assert len(applies) == 2 and all(f"--field-manager={FIELD_MANAGER} " in a for a in applies), applies


def test_the_init_container_page_links_the_page_next_to_operator_init_container_restricted():
    text = (ROOT / "docs" / "explanation" / "init-container.md").read_text()
    section = next(s for s in text.split("\n## ") if "(../EXISTING-KUBEFLOW.md)" in s)
    assert "operatorInitContainerRestricted" in section and "operatorPatchExisting" in section
