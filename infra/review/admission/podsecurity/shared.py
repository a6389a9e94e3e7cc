"""What the Pod Security checks share: the object shape, a check's result, and upstream's wording helpers."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

Obj = Mapping[str, Any]
Result = tuple[str, str] | None  # (reason, detail) when the check fails


def join_quote(items: Sequence[str]) -> str:
    return '"' + '", "'.join(items) + '"' if items else ""


def pluralize(singular: str, plural: str, count: int) -> str:
    return singular if count == 1 else plural


def _containers_phrase(names: Sequence[str]) -> str:
    return f"{pluralize('container', 'containers', len(names))} {join_quote(names)}"


def _containers(spec: Obj) -> Iterator[Obj]:
    """Init containers, then containers, then ephemeral containers (upstream's visitContainers)."""
    for field in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(field) or []


def _sc(obj: Obj) -> Obj:
    return obj.get("securityContext") or {}


def _windows(spec: Obj) -> bool:
    return (spec.get("os") or {}).get("name") == "windows"


def _go_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
