"""Reads the project file and a stack's config file from disk, as the Pulumi CLI would hand them over."""

from __future__ import annotations

import copy
import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from infra.program.common import yamlio
from infra.program.settings import PROJECT_ROOT

ROOT = PROJECT_ROOT
SECRET_PLACEHOLDER = "[secret]"
# What offline tools write for the digest a release names, in a stack that requires one (with_stand_ins).
STAND_IN_DIGEST = "sha256:" + "0" * 64
DIGEST_REQUIRED = "when jobImageDigestRequired is true"


class StackNotFound(LookupError):
    """No such stack file, or one that is not a readable stack config."""


@dataclass(frozen=True)
class StackConfig:
    """A stack's config as the program receives it: string values, and which keys are secrets."""

    name: str
    values: dict[str, str]
    secret_keys: frozenset[str]


def cache_home() -> Path:
    """Where the tools keep what they build or parse once per machine: $DDP_MNIST_CACHE, else
    ~/.cache/ddp-mnist (the local cluster's parts under realcluster/, parsed manifests under parsed/)."""
    return Path(os.environ.get("DDP_MNIST_CACHE") or Path.home() / ".cache" / "ddp-mnist")


def project_file(root: Path | None = None) -> dict[str, Any]:
    """Pulumi.yaml, parsed once per version of the file (each caller gets its own copy)."""
    path = (root or ROOT) / "Pulumi.yaml"
    status = path.stat()
    return copy.deepcopy(_parsed_project_file(str(path), status.st_mtime_ns, status.st_size))


@functools.lru_cache(maxsize=8)
def _parsed_project_file(path: str, mtime_ns: int, size: int) -> dict[str, Any]:
    document: dict[str, Any] = yamlio.load(Path(path).read_text())
    return document


def stacks_dir(root: Path | None = None) -> Path:
    return (root or ROOT) / project_file(root).get("stackConfigDir", ".")


def stack_names(root: Path | None = None) -> list[str]:
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in stacks_dir(root).glob("Pulumi.*.yaml"))


def as_config_string(value: Any) -> str:
    """How Pulumi passes a config value to a program: strings as is, everything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value)


def from_mapping(name: str, config: dict[str, Any]) -> StackConfig:
    """Config as written in a stack file; `secure:` values (ciphertext) become a placeholder secret."""
    values: dict[str, str] = {}
    secrets: set[str] = set()
    for key, value in (config or {}).items():
        if isinstance(value, dict) and set(value) == {"secure"}:
            values[key] = SECRET_PLACEHOLDER
            secrets.add(key)
        else:
            values[key] = as_config_string(value)
    return StackConfig(name=name, values=values, secret_keys=frozenset(secrets))


def load_stack(name: str, root: Path | None = None) -> StackConfig:
    path = stacks_dir(root) / f"Pulumi.{name}.yaml"
    if not path.is_file():
        known = ", ".join(stack_names(root)) or "none"
        raise StackNotFound(f"no stack '{name}': {path} does not exist (stacks: {known})")
    try:
        document = yamlio.load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" line {where.line + 1}" if where else ""
        raise StackNotFound(f"stack '{name}': {path}{line} is not valid YAML") from None
    if not isinstance(document, dict) or not isinstance(document.get("config") or {}, dict):
        raise StackNotFound(f"stack '{name}': {path} must hold a `config:` mapping")
    return with_stand_ins(from_mapping(name, document.get("config") or {}))


def with_stand_in_secrets(stack: StackConfig) -> StackConfig:
    """The stack as it is once its secret keys are set, when only they are missing (`with_stand_ins`
    without the image's digest: what a rehearsal on a cluster may stand in for)."""
    return with_stand_ins(stack, image=False)


def with_stand_ins(stack: StackConfig, image: bool = True) -> StackConfig:
    """The stack as it is once a user set what only they can, when only that is missing.

    A stack file in git carries the S3 key pair only after `pulumi config set --secret minioAccessKey`
    (and `minioSecretKey`; the read-only pair likewise, where minioReadKeysRequired asks for it) has
    stored it, encrypted for that stack's own secrets provider; the shipped stacks therefore hold none.
    A stack with jobImageDigestRequired names its image by the digest a release prints, which no stack
    in git can know before that release. When the program would refuse a stack for these reasons
    alone, offline tools take them as set: the keys with the placeholder a `secure:` value gets (none of
    the tools ever needs a secret's value; the local scheduler hands pods its own stand-in's keys), and
    with `image` the digest STAND_IN_DIGEST, all zeros, which names no image.
    """
    from infra.program.checks import ConfigError
    from infra.program.common.config import settings_from_raw
    from infra.program.settings import PROJECT
    from infra.program.settings.base import KEY_PAIRS

    pairs = {f"{PROJECT}:{pair[0]}": pair for pair in KEY_PAIRS}  # the read/write pair, the read-only one
    image_key = f"{PROJECT}:jobImage"
    for _ in range(len(KEY_PAIRS) + 1):
        try:
            settings_from_raw(stack.values, set(stack.secret_keys))
        except ConfigError as exc:
            pair = pairs.pop(exc.key, None)
            if pair is not None and "=(unset) " in str(exc):
                keys = {f"{PROJECT}:{k}" for k in pair}
                values = {**stack.values, **dict.fromkeys(keys, SECRET_PLACEHOLDER)}
                stack = StackConfig(stack.name, values, stack.secret_keys | keys)
            elif image and exc.key == image_key and DIGEST_REQUIRED in str(exc) and image_key in stack.values:
                values = {**stack.values, image_key: f"{stack.values[image_key]}@{STAND_IN_DIGEST}"}
                stack = StackConfig(stack.name, values, stack.secret_keys)
                image = False
            else:
                return stack
        else:
            return stack
    return stack


def platform_facts(reference: str) -> dict[str, Any]:
    """The facts a platform stack of this project's stacks/ directory exports, read from its config (what
    the offline render and the local run use in place of the live stack's `platform` output); raises
    PlatformMismatch (one line) for a stack it cannot read."""
    from infra.program.checks import ConfigError
    from infra.program.common.config import settings_from_raw
    from infra.program.common.platform_facts import PlatformMismatch, facts
    from infra.program.settings import PROJECT

    parts = reference.split("/")
    if len(parts) == 3 and parts[1] != PROJECT:
        raise PlatformMismatch(
            f"platformStack {reference}: offline, only a stack of project {PROJECT} can be read"
        )
    try:
        stack = load_stack(parts[-1])
        platform_settings, _ = settings_from_raw(stack.values, set(stack.secret_keys))
    except (StackNotFound, ConfigError) as exc:
        raise PlatformMismatch(f"platformStack {reference}: {exc}") from None
    return facts(platform_settings) or {}
