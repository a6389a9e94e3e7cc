"""Pulumi.yaml is generated from the settings model: same keys, types, defaults, descriptions."""

from __future__ import annotations

from infra.program.common import yamlio
from infra.program.schema import project_text
from infra.program.settings import SECRET_KEYS, Settings
from infra.stackconfig import ROOT, project_file


def test_project_file_is_current():
    assert (ROOT / "Pulumi.yaml").read_text() == project_text(), "run `make schema`"


def test_every_key_is_typed_and_described():
    config = project_file()["config"]
    assert set(config) == {f.alias for f in Settings.model_fields.values()} | set(SECRET_KEYS)
    for key, entry in config.items():
        assert entry["type"] in {"string", "integer", "boolean", "array"}, key
        assert entry["description"], key
    assert config["jobNodes"] == {
        "type": "integer",
        "default": 2,
        "description": "Number of pods (nodes) in the job.",
    }
    assert config["minioSecretKey"] == {
        "type": "string",
        "default": "",
        "description": SECRET_KEYS["minioSecretKey"],
    }


def test_every_stack_can_run_under_the_cli():
    """The CLI refuses a stack that leaves a key without a default unset: every key has one, and
    every stack file sets only declared keys, with a value of the declared type."""
    config = project_file()["config"]
    assert [k for k, entry in config.items() if "default" not in entry] == []
    types = {"string": str, "integer": int, "boolean": bool, "array": list}
    for path in (ROOT / "stacks").glob("Pulumi.*.yaml"):
        for key, value in yamlio.load(path.read_text())["config"].items():
            name = key.removeprefix("ddp-mnist:")
            assert name in config, f"{path.name}: {key} is not declared"
            assert isinstance(value, types[config[name]["type"]]), f"{path.name}: {key}={value!r}"
    assert config["jobTolerations"]["items"] == {"type": "string"}


def test_project_runtime_and_layout():
    document = yamlio.load((ROOT / "Pulumi.yaml").read_text())
    assert document["runtime"]["name"] == "python"
    assert document["main"] == "infra/"
    assert document["stackConfigDir"] == "stacks"


def test_stack_files_hold_no_secret_values():
    for path in (ROOT / "stacks").glob("Pulumi.*.yaml"):
        config = yamlio.load(path.read_text())["config"]
        assert not any(k.endswith(("AccessKey", "SecretKey")) for k in config), path
