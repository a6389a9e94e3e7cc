"""Validating custom resources against a CustomResourceDefinition's openAPIV3Schema."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jsonschema

from infra.program.common import yamlio


def _plain(schema: Any) -> Any:
    """The schema without the structural-schema extensions (x-kubernetes-*) jsonschema does not know."""
    if isinstance(schema, dict):
        return {k: _plain(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
    if isinstance(schema, list):
        return [_plain(v) for v in schema]
    return schema


def _strict(schema: Any) -> Any:
    """The schema with unknown fields as errors: `additionalProperties: false` on every object that lists
    its properties (as the API server's strict field validation reports fields a structural schema
    would prune), except where `x-kubernetes-preserve-unknown-fields` keeps them."""
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    strict = {k: _strict(v) for k, v in schema.items()}
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        strict["additionalProperties"] = False
    return strict


@functools.lru_cache(maxsize=32)
def _load_crd(path: Path, mtime_ns: int) -> dict[str, Any]:
    """The CRD parsed once per file version (`mtime_ns` keys the cache: an edited file is read again)."""
    return yamlio.load(path.read_text())


@functools.lru_cache(maxsize=64)
def _validator(
    path: Path, mtime_ns: int, version: str | None, strict: bool, at: tuple[str, ...]
) -> jsonschema.Draft7Validator:
    crd = _load_crd(path, mtime_ns)
    served = next(
        v for v in crd["spec"]["versions"] if v["name"] == version or (version is None and v.get("storage"))
    )
    schema = served["schema"]["openAPIV3Schema"]
    for name in at:
        schema = schema["properties"][name]
    return jsonschema.Draft7Validator(_plain(_strict(schema) if strict else schema))


def crd_validator(
    path: Path, version: str | None = "v1", *, strict: bool = False, at: tuple[str, ...] = ()
) -> jsonschema.Draft7Validator:
    """A validator for the CRD's `version` (None: the storage version); `strict` refuses unknown fields;
    `at` names properties to descend into (("spec",) validates a JobSet spec on its own). Built once per
    file version and arguments: a validator holds no state between `iter_errors` calls."""
    return _validator(path, path.stat().st_mtime_ns, version, strict, at)
