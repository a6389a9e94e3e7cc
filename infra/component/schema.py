"""The component package's schema, from the settings model and the outputs registry:
`python -m infra.component.schema [--check]` writes (or checks) infra/component/schema.json.

Each component's inputs are the project's config keys (infra/component/inputs.py) with the types,
defaults and descriptions Pulumi.yaml gives them; its outputs are its stack role's outputs
(infra/program/common/outputs.py). Every input but the S3 keys is plain: it decides which objects the
component creates, so it must be known when the component is built.
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path
from typing import Any

from infra.program.common.outputs import OUTPUTS
from infra.program.schema import config_schema
from infra.program.settings import PROJECT, PROJECT_ROOT, SECRET_KEYS

from .inputs import input_keys
from .resources import COMPONENTS, token

SCHEMA_PATH = Path(__file__).resolve().parent / "schema.json"


def version() -> str:
    """The package's version: the project's release (pyproject.toml)."""
    return str(tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["version"])


def _input(key: str, entry: dict[str, Any]) -> dict[str, Any]:
    if key in SECRET_KEYS:
        return {"type": "string", "secret": True, "description": entry["description"]}
    spec: dict[str, Any] = {"type": entry["type"], "plain": True, "description": entry["description"]}
    if entry["type"] == "array":
        spec["items"] = {"type": "string", "plain": True}
    else:
        spec["default"] = entry["default"]
    return spec


def _output(kind: str) -> dict[str, Any]:
    if kind == "object":
        return {"type": "object", "additionalProperties": {"$ref": "pulumi.json#/Any"}}
    if kind == "array":
        return {"type": "array", "items": {"type": "string"}}
    return {"type": "string"}


def package_schema() -> dict[str, Any]:
    config = config_schema()
    inputs = {key: _input(key, config[key]) for key in input_keys()}
    resources = {}
    for kind, component in COMPONENTS.items():
        outputs = {
            name: {**_output(output.type), "description": output.description}
            for name, output in OUTPUTS.items()
            if component.ROLE in output.roles
        }
        resources[token(kind)] = {
            "isComponent": True,
            "description": " ".join((component.__doc__ or "").split()),
            "inputProperties": inputs,
            "properties": outputs,
            "required": ["stackRole"],
        }
    return {
        "name": PROJECT,
        "displayName": "ddp-mnist",
        "version": version(),
        "description": "Distributed PyTorch (DDP) MNIST training on Kubernetes as Pulumi components: the "
        "platform (operators) and the training job, with the same inputs as the project's stack config.",
        "keywords": ["kubernetes", "pytorch", "kubeflow", "category/cloud", "kind/component"],
        "license": "Apache-2.0",
        "resources": resources,
        "language": {
            "nodejs": {"respectSchemaVersion": True, "packageName": PROJECT},
            # The Go SDK `pulumi package add` generates is a local module (go.mod replaces it with its
            # directory): a path of this project's own, not a repository's.
            "go": {"respectSchemaVersion": True, "importBasePath": f"{PROJECT}.local/sdk/go/ddpmnist"},
            "python": {"respectSchemaVersion": True},
        },
    }


def schema_text() -> str:
    return json.dumps(package_schema(), indent=2) + "\n"


def main(argv: list[str]) -> int:
    if "--check" in argv:
        if not SCHEMA_PATH.is_file() or SCHEMA_PATH.read_text() != schema_text():
            print(
                "schema: infra/component/schema.json is out of date; run python -m infra.component.schema",
                file=sys.stderr,
            )
            return 1
        return 0
    temporary = SCHEMA_PATH.with_suffix(".json.tmp")
    temporary.write_text(schema_text())
    temporary.replace(SCHEMA_PATH)
    print(f"wrote {SCHEMA_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
