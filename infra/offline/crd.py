"""Validating custom resources against a CustomResourceDefinition's openAPIV3Schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import yaml


def _plain(schema: Any) -> Any:
    """The schema without the structural-schema extensions (x-kubernetes-*) jsonschema does not know."""
    if isinstance(schema, dict):
        return {k: _plain(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
    if isinstance(schema, list):
        return [_plain(v) for v in schema]
    return schema


def crd_validator(path: Path, version: str = "v1") -> jsonschema.Draft7Validator:
    crd = yaml.safe_load(path.read_text())
    served = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    return jsonschema.Draft7Validator(_plain(served["schema"]["openAPIV3Schema"]))
