"""docs/reference/configuration.md: every config key of the settings model, by its settings group."""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import json
import re
import sys
import textwrap
from typing import Any, Literal, cast, get_args, get_origin

import annotated_types
from pydantic.fields import FieldInfo

from infra.program.settings import SECRET_KEYS, Settings, base
from infra.program.settings.base import SettingsGroup
from infra.reference.markdown import code, slug, table
from infra.reference.page import header
from infra.reference.reads import StackRun, shipped_runs

ROLES: tuple[str, ...] = get_args(Settings.model_fields["stack_role"].annotation)
# The shared value rules of infra/program/settings/base.py, as a field validator that returns one of
# them names it; a validator of its own is listed as such.
FORMATS = {
    base.dns_label: "DNS-1123 label",
    base.optional_dns_label: "DNS-1123 label, or empty",
    base.dns_subdomain: "DNS-1123 subdomain",
    base.dns_1035: "DNS-1035 label",
    base.quantity: "Kubernetes quantity > 0",
    base.optional_quantity: "Kubernetes quantity > 0, or empty",
    base.release_tag: "release tag vMAJOR.MINOR.PATCH",
    base.check_pinned_image: "image pinned by tag or digest",
    base.optional_pinned_image: "image pinned by tag or digest, or empty",
}
BOUNDS = {
    annotated_types.Ge: ">=",
    annotated_types.Gt: ">",
    annotated_types.Le: "<=",
    annotated_types.Lt: "<",
    annotated_types.MinLen: "length >=",
    annotated_types.MaxLen: "length <=",
}


def group_title(group: type[SettingsGroup]) -> str:
    """`JobPlacementSettings` -> `Job placement`, `TrainerV2Settings` -> `Trainer v2`, `S3Settings`: `S3`."""
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", group.__name__.removesuffix("Settings")).split()
    return " ".join([words[0], *(w.lower() if re.fullmatch(r"[A-Z][a-z0-9]*", w) else w for w in words[1:])])


def groups() -> dict[type[SettingsGroup], list[str]]:
    """Each settings group and its fields, in the model's order (that of Pulumi.yaml)."""
    owners = [
        c for c in Settings.__mro__ if issubclass(c, SettingsGroup) and c not in (Settings, SettingsGroup)
    ]
    found: dict[type[SettingsGroup], list[str]] = {}
    for name in Settings.model_fields:
        owner = next(c for c in owners if name in c.__dict__.get("__annotations__", {}))
        found.setdefault(owner, []).append(name)
    return found


def type_name(annotation: Any) -> str:
    if get_origin(annotation) is Literal:
        kinds = {type(value) for value in get_args(annotation)}
        return "integer" if kinds == {int} else "string"
    if get_origin(annotation) is list:
        return "list of strings"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "string"
    return {bool: "boolean", int: "integer", float: "number", str: "string"}.get(annotation, str(annotation))


def allowed(annotation: Any) -> list[Any]:
    if get_origin(annotation) is Literal:
        return list(get_args(annotation))
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return [member.value for member in annotation]
    return []


def shown(value: Any) -> str:
    """A value as it is written in a stack file."""
    if isinstance(value, bool):
        return code(str(value).lower())
    if isinstance(value, list):
        return code(json.dumps(value))
    if value == "":
        return "empty"
    return code(value)


def bounds(field: FieldInfo) -> list[str]:
    return [
        f"{symbol} {getattr(rule, dataclasses.fields(cast(Any, rule))[0].name)}"
        for rule in field.metadata
        for kind, symbol in BOUNDS.items()
        if isinstance(rule, kind)
    ]


def validator_formats() -> dict[str, str]:
    """Field name -> the value rule its field validator applies: a shared one of base.py by name, or
    'checked on load' for a rule of the validator's own."""
    formats: dict[str, str] = {}
    for decorator in Settings.__pydantic_decorators__.field_validators.values():
        function = decorator.func.__func__ if hasattr(decorator.func, "__func__") else decorator.func
        rule = _shared_rule(function)
        for name in decorator.info.fields:
            formats[name] = (
                FORMATS.get(rule, "checked on load (see description)")
                if rule
                else ("checked on load (see description)")
            )
    return formats


def _shared_rule(function: Any) -> Any:
    """The function a validator whose body is `return rule(value)` calls; None for any other body."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    if len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, ast.Call):
        called = body[0].value.func
        if isinstance(called, ast.Name):
            return vars(sys.modules[function.__module__]).get(called.id)
    return None


def read_by(runs: list[StackRun]) -> dict[str, list[str]]:
    """Config key -> the roles (in stackRole's order) of the shipped stacks whose program reads it."""
    found: dict[str, set[str]] = {}
    for run in runs:
        for key in run.keys:
            found.setdefault(key, set()).add(run.role)
    return {key: [r for r in ROLES if r in roles] for key, roles in found.items()}


def _roles(key: str, reading: dict[str, list[str]]) -> str:
    return ", ".join(reading.get(key, [])) or "none shipped"


INTRO = """\
# Configuration keys

Every key a stack file (`stacks/Pulumi.<stack>.yaml`) can set, under the project's namespace
(`ddp-mnist:<key>`; set one with `pulumi config set <key> <value>`). The keys are flat; they are listed
here by the settings group that declares them (`infra/program/settings/`), in the order of Pulumi.yaml's
`config:` block, which is generated from the same model. A bad value stops the program before anything
is registered, with one line naming the key, the value and what is allowed; rules between keys live in
`infra/program/checks/`.

Columns: **Type** as in a stack file (a list is a YAML list); **Default** when the key is unset;
**Allowed** the values a choice takes; **Range** the numeric bounds; **Format** the value rule of the
key's own validator; **Secret** whether the key must be set with `--secret`; **Read by** the stack roles
(`stackRole`) whose shipped stacks read the key; **Component input** whether the key is also an input,
of the same name, of the components `TrainingPlatform` and `TrainingJob`
([components](../how-to/components.md)).

**How "Read by" is derived.** Each shipped stack in `stacks/` is run under Pulumi's mock runtime, as the
offline render runs it, with its validated settings replaced by an object that records every field the
program reads while it builds the stack's resources and outputs (including the facts a job stack takes
from its platform stack). Validation is not counted: the cross-field checks read many keys in every role
to refuse a misplaced one. So a role listed means that role's shipped stacks use the key's value;
"none shipped" means no shipped stack's program reads it offline: it is read only for a configuration
no shipped stack has (a key another key switches on), or only by what a mock run does not exercise
(`pulumi up`'s wait on the live cluster, the transforms the engine applies to upstream manifests).
"""


def page() -> str:
    reading = read_by(shipped_runs())
    formats = validator_formats()
    parts = [header("infra/program/settings/ and the shipped stacks in stacks/"), INTRO]
    head = (
        "Key",
        "Type",
        "Default",
        "Allowed",
        "Range",
        "Format",
        "Secret",
        "Read by",
        "Component input",
        "Description",
    )
    for group, names in groups().items():
        title = group_title(group)
        intro = (inspect.getdoc(group) or "").split("\n\n")[0].replace("\n", " ")
        rows = []
        for name in names:
            field = Settings.model_fields[name]
            key = field.alias or name
            rows.append(
                (
                    code(key),
                    type_name(field.annotation),
                    shown(field.default),
                    ", ".join(code(v) for v in allowed(field.annotation)),
                    ", ".join(bounds(field)),
                    formats.get(name, ""),
                    "no",
                    _roles(key, reading),
                    _component_input(key),
                    field.description or "",
                )
            )
        parts.append(f"## {title}\n\n{intro}\n\n{table(head, rows)}")
    rows = [
        (
            code(key),
            "string",
            "empty",
            "",
            "",
            "",
            "yes",
            _roles(key, reading),
            _component_input(key),
            description,
        )
        for key, description in SECRET_KEYS.items()
    ]
    parts.append(
        "## Secrets\n\nThe S3 key pairs: read as Pulumi secrets (`require_secret`), never part of the plain "
        "model, never shown in an output or a rendered file; each pair is set both keys or neither.\n\n"
        + table(head, rows)
    )
    return "\n".join(parts)


def _component_input(key: str) -> str:
    from infra.component.inputs import input_keys

    if key == "stackRole":
        return "no: the component's own role"
    return "[yes](../how-to/components.md#inputs-outputs-errors)" if key in input_keys() else "no"


def anchors() -> list[str]:
    """The page's group anchors, for links from other pages."""
    return [slug(group_title(group)) for group in groups()] + ["secrets"]
