"""What a stack applies from the vendored upstream manifests (`infra/manifests/`), object by object, as the
Kubernetes provider registers them and after the program's transforms: the section of a golden that
shows an upgrade of the training operator, Trainer v2 or KServe in a pull request's diff.

The mock runtime registers a kustomize Directory or yaml/v2 ConfigFile as one remote component and
never runs the provider's `Construct`; this module does what it does with a vendored source (the
vendored kustomization lists the one built file, so kustomize passes its objects through): each object
of the file, in the file's order, named `<component>:<namespace>/<name>` (`<component>:<name>` when
cluster-scoped) and typed `kubernetes:<group or core>/<version>:<Kind>` (pulumi-kubernetes v4.25.0
`provider/pkg/provider/yaml/v2/yaml.go`, `register`), then passed through the transforms the program
registered on the component, as the engine would. A component applied from another source (`*Source`)
is named in the golden's header only.

CRDs are shown with each version's `schema.openAPIV3Schema` replaced by its sha256 (the schemas are
most of the 14 MB the three manifests hold; the vendored file shows them in full, so a schema change
shows there and as a changed digest here); everything else, group, names, scope, versions served and
stored, conversion webhooks, metadata, is shown as applied. Secret values are redacted as for the
stack's own objects.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pulumi
import yaml

from infra.program.common import yamlio
from infra.program.common.vendored import Vendored, file_sha256, index
from infra.stackconfig import cache_home

if TYPE_CHECKING:
    from infra.review.registration import Registration

CRD_KIND = "CustomResourceDefinition"


@dataclass(frozen=True)
class Applied:
    """One object of a vendored manifest as the stack applies it."""

    name: str  # the Pulumi name the provider gives it
    type: str
    obj: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)  # what the transforms set that the engine acts on


@dataclass(frozen=True)
class Install:
    """A component applied from a vendored source, and its objects."""

    registration: Registration
    vendored: Vendored
    objects: list[Applied]


def provider_type(obj: dict[str, Any]) -> str:
    group, _, version = obj["apiVersion"].rpartition("/")
    return f"kubernetes:{group or 'core'}/{version}:{obj['kind']}"


def provider_name(prefix: str, obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    name = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
    return f"{prefix}:{name}"


def _options(opts: pulumi.ResourceOptions | None) -> dict[str, Any]:
    if opts is None:
        return {}
    found = {
        "retainOnDelete": opts.retain_on_delete,
        "import": opts.import_,
        "ignoreChanges": opts.ignore_changes,
    }
    return {k: v for k, v in found.items() if v}


def applied(registration: Registration, obj: dict[str, Any]) -> Applied:
    """`obj` as the provider registers it under `registration`, after its transforms."""
    name, type_ = provider_name(registration.name, obj), provider_type(obj)
    props, opts = obj, pulumi.ResourceOptions()
    for transform in registration.transforms:
        result = transform(pulumi.ResourceTransformArgs(True, type_, name, props, opts))
        if result is not None:
            props, opts = dict(result.props), result.opts or opts
    return Applied(name, type_, props, _options(opts))


def documents(path: Path) -> list[dict[str, Any]]:
    """The objects of the manifest the component applies, in the file's order (a fresh copy each time)."""
    return list(json.loads(_parsed(str(path), file_sha256(path))))


@functools.cache
def _parsed(path: str, sha256: str) -> str:
    """The file's objects as JSON, parsed once per content: the three files hold 14 MB, about 3 s of
    YAML even with libyaml, and a second to read back as JSON. Each process, each test worker and each
    `make render` would pay it, so the JSON is kept on disk by the content's sha256 (`parsed_cache`),
    written whole or not at all; where that directory cannot be written, each process parses again."""
    cached = parsed_cache() / f"{sha256}.json"
    with contextlib.suppress(OSError):
        return cached.read_text()
    text = json.dumps([d for d in yamlio.load_all(Path(path).read_text()) if d])
    with contextlib.suppress(OSError):
        cached.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=cached.parent, suffix=".tmp", delete=False) as out:
            out.write(text)
        os.replace(out.name, cached)
    return text


def parsed_cache() -> Path:
    """Where parsed manifests are kept: $DDP_MNIST_CACHE/parsed (default ~/.cache/ddp-mnist/parsed)."""
    return cache_home() / "parsed"


def source_of(registration: Registration) -> str:
    return str(registration.inputs.get("directory") or registration.inputs.get("file") or "")


def installs(registrations: list[Registration]) -> list[Install]:
    """Every component the program applies from a vendored source, with its objects, by name: KServe's
    from the file the program derives from the vendored one (`infra/program/platform/kserve.py`,
    `used_manifest`: the release manifest less the components the bundle never uses), the others from
    the vendored file itself."""
    from infra.program.common.vendored import KSERVE
    from infra.program.platform.kserve import used_manifest

    vendored_ones = index()
    by_path = {str(v.path): v for v in vendored_ones.values()}
    by_path[used_manifest(str(vendored_ones[KSERVE].path))] = vendored_ones[KSERVE]
    found = []
    for registration in sorted(registrations, key=lambda r: r.name):
        source = source_of(registration)
        vendored = by_path.get(source)
        if vendored is None:
            continue
        path = vendored.manifest if source == str(vendored.path) else Path(source)
        objects = [applied(registration, d) for d in documents(path)]
        found.append(Install(registration, vendored, objects))
    return found


def digest(value: Any) -> str:
    return "sha256:" + hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def summarised(obj: dict[str, Any]) -> dict[str, Any]:
    """A CRD with each version's openAPIV3Schema as its digest; any other object as it is, but for
    Secret values (a new dict: what it shares with `obj` it never changes)."""
    shown = dict(obj)
    if shown.get("kind") == CRD_KIND and isinstance(shown.get("spec"), dict):
        spec = dict(shown["spec"])
        spec["versions"] = [_schema_as_digest(version) for version in spec.get("versions", [])]
        shown["spec"] = spec
    if shown.get("kind") == "Secret":
        for section in ("data", "stringData"):
            if isinstance(shown.get(section), dict):
                shown[section] = {k: "[redacted]" for k in shown[section]}
    return shown


def _schema_as_digest(version: dict[str, Any]) -> dict[str, Any]:
    schema = version.get("schema") or {}
    if "openAPIV3Schema" not in schema:
        return version
    return {**version, "schema": {**schema, "openAPIV3Schema": digest(schema["openAPIV3Schema"])}}


def _comment(option: str, value: Any) -> str:
    return f"# pulumi {option}: {json.dumps(value) if not isinstance(value, bool) else 'true'}"


def install_yaml(install: Install) -> str:
    """The component's section of a golden: a header naming the vendored source, then each object, with
    the options the transforms set as comments at its top."""
    vendored, registration = install.vendored, install.registration
    lines = [
        "#",
        f"# {registration.name}: the {len(install.objects)} objects of {vendored.shown} as this stack "
        "applies them,",
        f"#   the vendored {vendored.title} {vendored.version} (sha256 in infra/manifests/index.yaml) "
        "built from",
        *(f"#   {m['module']} {m['version']}, commit {m['commit']}" for m in vendored.modules),
        "#   CRDs: each version's openAPIV3Schema as its sha256 (in full in the vendored file)",
    ]
    if source_of(registration) != str(vendored.path):
        lines.insert(
            2, "#   less the components the bundle never uses (infra/program/platform/kserve.py, UNUSED),"
        )
    for item in install.objects:
        lines.append("---")
        lines += [_comment(option, value) for option, value in item.options.items()]
        lines.append(
            yaml.safe_dump(summarised(item.obj), sort_keys=True, default_flow_style=False, width=120).rstrip(
                "\n"
            )
        )
    return "\n".join(lines) + "\n"
