"""The component package (infra/component/): TrainingPlatform and TrainingJob register exactly the objects
and outputs of the stack role they stand for, every object a child of the component; their inputs are
read as that stack's config (same one-line errors); the schema is generated and current."""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pytest

from infra.component import schema as package
from infra.component.inputs import NOT_INPUTS
from infra.component.provider import ComponentProvider
from infra.component.resources import COMPONENTS, token
from infra.program.checks import ConfigError
from infra.program.schema import config_schema
from infra.program.settings import PROJECT
from infra.review.manifest import render, render_component
from infra.stackconfig import load_stack
from tests.infra.conftest import as_inputs, stack_config

SECRETS = {"minioAccessKey": "AKIAEXAMPLEKEY1", "minioSecretKey": "an-example-secret-key"}


def _dev(**changes: Any) -> dict[str, Any]:
    """The dev stack's config as inputs, as a job stack (its operator comes from the platform)."""
    values = {k.removeprefix(f"{PROJECT}:"): v for k, v in load_stack("dev").values.items()}
    values = {k: v for k, v in values.items() if k not in SECRETS}
    return {**values, "operatorInstall": False, "operatorInitContainerRestricted": True, **changes}


@pytest.mark.parametrize(
    ("kind", "role", "values"),
    [
        ("TrainingJob", "job", _dev()),
        ("TrainingJob", "job", _dev(jobKind="indexed-job", seedSource="none", serveKind="none")),
        (
            "TrainingPlatform",
            "platform",
            {"kserveInstall": True, "trainerInstall": True, "allowBothOperators": True},
        ),
    ],
    ids=["dev-job", "indexed-job", "platform"],
)
def test_a_component_registers_its_stack_roles_objects_and_outputs_each_under_it(kind, role, values):
    secrets = SECRETS if role == "job" else {}
    stack = render(stack_config({**values, "stackRole": role}, secrets))
    component = render_component(kind, {**as_inputs(values), **secrets}, name="test")
    assert component.objects == stack.objects
    assert component.outputs == stack.outputs
    at_stack_level = [(r.type, r.name) for r in component.registrations if not r.options.parent]
    assert at_stack_level == [(token(kind), "test")]
    assert SECRETS["minioSecretKey"] not in json.dumps(component.outputs)


def test_integers_may_come_as_floats_as_the_provider_protocol_carries_them():
    as_float = render_component("TrainingJob", {**as_inputs(_dev()), "jobNodes": 4.0, **SECRETS})
    assert (
        as_float.objects
        == render_component("TrainingJob", {**as_inputs(_dev(jobNodes=4)), **SECRETS}).objects
    )
    with pytest.raises(ConfigError, match=r"^config ddp-mnist:jobNodes=2\.5 is invalid: must be an integer$"):
        render_component("TrainingJob", {**as_inputs(_dev()), "jobNodes": 2.5, **SECRETS})


@pytest.mark.parametrize(
    ("kind", "changes"),
    [
        ("TrainingJob", {"jobNodes": 0}),
        ("TrainingJob", {"storageProvider": "s3fs"}),
        ("TrainingJob", {"jobNodez": 2}),
        ("TrainingJob", {"operatorInstall": True}),
        ("TrainingPlatform", {"teamNamespaces": ["Bad_Name"]}),
    ],
)
def test_a_bad_input_fails_with_the_stack_configs_own_line(kind, changes):
    role = COMPONENTS[kind].ROLE
    values = _dev(**changes) if kind == "TrainingJob" else changes
    secrets = SECRETS if kind == "TrainingJob" else {}
    with pytest.raises(ConfigError) as from_stack:
        render(stack_config({**values, "stackRole": role}, secrets))
    inputs = {**(as_inputs({k: v for k, v in values.items() if k != "jobNodez"})), **secrets}
    inputs.update({k: v for k, v in changes.items() if k == "jobNodez"})
    with pytest.raises(pulumi.InputPropertyError) as from_provider:
        _construct(kind, inputs)
    assert from_provider.value.reason == str(from_stack.value)
    assert "\n" not in from_provider.value.reason
    assert from_provider.value.property_path == str(from_stack.value.key).removeprefix(f"{PROJECT}:")


@pytest.mark.parametrize(
    ("inputs", "line"),
    [
        (
            {"stackRole": "all"},
            "input stackRole is invalid: must be unset: it is not an input of TrainingJob",
        ),
        ({"minioImage": "x"}, "input minioImage is invalid: must be unset: it is not an input of"),
        ({"jobNodes": {"n": 2}}, "input jobNodes is invalid: must be a string, a number, true or false"),
        ({"jobNodes": pulumi.Output.from_input(2)}, "input jobNodes is invalid: must be a plain value, not"),
    ],
    ids=["stackRole", "prerequisites-key", "object", "output"],
)
def test_an_input_no_stack_key_could_hold_is_refused_with_one_line(inputs, line):
    with pytest.raises(pulumi.InputPropertyError) as refused:
        _construct("TrainingJob", {**as_inputs(_dev()), **SECRETS, **inputs})
    assert refused.value.reason.startswith(line)
    assert refused.value.property_path == next(iter(inputs))


def _construct(kind: str, inputs: dict[str, Any]) -> None:
    """The provider's construct: a bad input stops it before anything is registered."""
    ComponentProvider().construct("test", token(kind), inputs)


def test_the_schema_is_current_and_its_inputs_are_the_stack_configs_keys():
    assert package.main(["--check"]) == 0, "run python -m infra.component.schema"
    schema = json.loads(package.SCHEMA_PATH.read_text())
    config = config_schema()
    assert schema["version"] == package.version()
    for kind in COMPONENTS:
        inputs = schema["resources"][token(kind)]["inputProperties"]
        assert set(inputs) == set(config) - NOT_INPUTS
        for key, spec in inputs.items():
            assert spec["type"] == config[key]["type"], key
            assert spec.get("plain", False) == (key not in SECRETS and key not in package.SECRET_KEYS)
            assert spec.get("default", config[key]["default"]) == config[key]["default"], key
        assert schema["resources"][token(kind)]["isComponent"] is True


def test_a_bad_value_the_line_hides_is_reported_without_naming_its_property():
    """The engine prints a named property's value beside the line; an endpoint with a password in it
    must not reach the screen, from the stack's config or from a component's input."""
    endpoint = "http://user:a-password@minio:9000"
    with pytest.raises(ConfigError) as from_stack:
        render(stack_config({**_dev(minioEndpoint=endpoint), "stackRole": "job"}, SECRETS))
    assert "a-password" not in str(from_stack.value)
    with pytest.raises(pulumi.InputPropertiesError) as from_provider:
        _construct("TrainingJob", {**as_inputs(_dev()), "minioEndpoint": endpoint, **SECRETS})
    assert from_provider.value.message == str(from_stack.value)
    assert not from_provider.value.errors
