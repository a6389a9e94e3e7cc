"""Stack config -> `Settings`, failing with one line that names the key, the value and what is allowed.

Pulumi hands a program its config as strings (`"2"`, `"true"`, JSON for arrays); `settings_from_raw`
turns that map into the typed model. `load_settings` reads the running program's config and is the
only place that touches `pulumi.Config`.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, get_args, get_origin

import pulumi
from pydantic import ValidationError

from infra.program.checks import ConfigError, first_violation
from infra.program.checks.prerequisites import minio_root_keys
from infra.program.common.platform_facts import assume_platform_provides
from infra.program.settings import PROJECT, SECRET_KEYS, Settings
from infra.program.settings.base import KEY_PAIRS
from infra.program.settings.tracking import URL_KEYS


@dataclass(frozen=True)
class S3Credentials:
    """The S3 key pair from secret config; both stay Pulumi secrets."""

    access_key_id: pulumi.Output[str]
    secret_access_key: pulumi.Output[str]
    # The read-only pair (minioReadAccessKey/minioReadSecretKey), for the pods that only read.
    read_access_key_id: pulumi.Output[str] | None = None
    read_secret_access_key: pulumi.Output[str] | None = None


_SECRET_LIKE = re.compile(r"secret|password|passwd|token|credential|access_?key|private", re.IGNORECASE)


def looks_secret(key: str) -> bool:
    """A config key whose name says it holds a credential (its value is then never echoed)."""
    return bool(_SECRET_LIKE.search(key))


def _aliases() -> dict[str, str]:
    return {field.alias or name: name for name, field in Settings.model_fields.items()}


def _is_list(name: str) -> bool:
    return get_origin(Settings.model_fields[name].annotation) is list


def _allowed(error: Mapping[str, Any]) -> str:
    kind, ctx = error["type"], error.get("ctx", {})
    messages = {
        "literal_error": lambda: f"one of {ctx.get('expected')}",
        "greater_than_equal": lambda: f">= {ctx.get('ge')}",
        "greater_than": lambda: f"> {ctx.get('gt')}",
        "less_than_equal": lambda: f"<= {ctx.get('le')}",
        "int_parsing": lambda: "an integer",
        "int_from_float": lambda: "an integer",
        "int_type": lambda: "an integer",
        "float_parsing": lambda: "a number",
        "float_type": lambda: "a number",
        "bool_parsing": lambda: "true or false",
        "bool_type": lambda: "true or false",
        "list_type": lambda: "a list of strings",
        "string_type": lambda: "a string",
        "value_error": lambda: str(ctx.get("error", error["msg"])),
    }
    return messages.get(kind, lambda: str(error["msg"]))()


# Only the credential keys are read as Pulumi secrets (`require_secret`); every other value is read
# raw and reaches pod env, Pulumi state, outputs and error messages in plain text, so a value the user
# marked secret there would lose its secrecy silently.
_NOT_SECRET = (
    "set without --secret: only the S3 key pairs (minioAccessKey/minioSecretKey, minioReadAccessKey/"
    "minioReadSecretKey) are kept secret, and this key's "
    "value is written in plain text to the rendered objects, Pulumi state and outputs "
    "(pulumi config set {alias} <value>; for credentials use minioAccessKey/minioSecretKey or "
    "minioExistingSecret)"
)


def _parse_raw(alias: str, name: str, raw: str, secret: bool) -> Any:
    if not _is_list(name):
        return raw
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(
            alias, raw, "a list of strings (in YAML a list, on the CLI --path 'key[0]')", secret=secret
        )
    return value


def settings_from_raw(raw: Mapping[str, str], secret_keys: set[str]) -> tuple[Settings, bool]:
    """Validate a stack's raw config map (`ddp-mnist:key` -> string). Returns the settings and
    whether the S3 key pair is set. Raises ConfigError for the first bad key.

    `secret_keys` are the full keys set with `--secret` (or `secure:` in the stack file); any of them
    other than the credential pair is refused, never shown.

    Each stage of reading a key (its name, its secrecy, its type, then the cross-field rules) stays in one
    place so the first error reported follows the stack file's order."""
    aliases = _aliases()
    values: dict[str, Any] = {}
    prefix = f"{PROJECT}:"
    for full_key in sorted(raw):
        if not full_key.startswith(prefix):
            continue  # provider settings such as kubernetes:context
        alias = full_key[len(prefix) :]
        secret = full_key in secret_keys  # a value set with --secret is never shown, whatever the key
        if alias in SECRET_KEYS:
            if raw[full_key] and not secret:
                raise ConfigError(
                    alias,
                    raw[full_key],
                    f"set as a secret: pulumi config set --secret {alias} <value>",
                    secret=True,
                )
            continue
        if alias not in aliases:
            close = difflib.get_close_matches(alias, [*aliases, *SECRET_KEYS], n=1)
            hint = f"did you mean {close[0]}?" if close else "see the config block of Pulumi.yaml"
            # A misspelt credential key set without --secret holds a credential all the same.
            hidden = secret or bool(close and close[0] in SECRET_KEYS) or looks_secret(alias)
            raise ConfigError(alias, raw[full_key], f"a key of this project ({hint})", secret=hidden)
        if secret:
            raise ConfigError(alias, raw[full_key], _NOT_SECRET.format(alias=alias), secret=True)
        values[alias] = _parse_raw(alias, aliases[alias], raw[full_key], secret)
    try:
        settings = Settings.model_validate(values)
    except ValidationError as exc:
        error = exc.errors()[0]
        alias = str(error["loc"][0])
        shown = values.get(alias, error.get("input"))
        # A URL with user info may hold a password: such a value is never shown either.
        secret = f"{prefix}{alias}" in secret_keys or (alias in URL_KEYS and "@" in str(shown))
        raise ConfigError(alias, shown, _allowed(error), secret=secret) from None
    # The schema gives the key pair an empty default (Pulumi requires a default for optional keys).
    for pair in KEY_PAIRS:
        given = [k for k in pair if raw.get(f"{prefix}{k}")]
        if len(given) == 1:
            missing = next(k for k in pair if k not in given)
            raise ConfigError(missing, None, f"set too: {pair[0]} and {pair[1]} go together", secret=True)
    present = [k for k in KEY_PAIRS[0] if raw.get(f"{prefix}{k}")]
    read_pair = bool(raw.get(f"{prefix}{KEY_PAIRS[1][0]}"))
    if read_pair and not present:
        raise ConfigError(
            KEY_PAIRS[1][0],
            "",
            "set only beside minioAccessKey and minioSecretKey (with minioExistingSecret, name the "
            "read-only Secret in minioReadExistingSecret)",
            secret=True,
        )
    if read_pair and raw.get(f"{prefix}minioReadExistingSecret"):
        raise ConfigError(
            "minioReadExistingSecret",
            raw[f"{prefix}minioReadExistingSecret"],
            "empty when minioReadAccessKey and minioReadSecretKey are set (one read-only pair)",
        )
    # With a platform stack, the declarations it replaces are checked against its facts when they are
    # read (infra/program/common/platform_facts.py); every other rule holds here already.
    checked = assume_platform_provides(settings) if settings.platform_stack else settings
    violation = first_violation(checked, has_keys=bool(present)) or minio_root_keys(
        settings, {k: raw[f"{prefix}{k}"] for k in present}
    )
    if violation:
        raise violation
    readers = read_only_pods(settings)
    if (
        settings.minio_read_keys_required
        and readers
        and not (read_pair or settings.minio_read_existing_secret)
    ):
        raise ConfigError(
            KEY_PAIRS[1][0],
            None,
            f"set (with {KEY_PAIRS[1][1]}, both --secret) or minioReadExistingSecret given when "
            f"minioReadKeysRequired is true: {' and '.join(readers)} only read the store",
            secret=True,
        )
    return settings, bool(present)


def read_only_pods(settings: Settings) -> list[str]:
    """The stack's pods that only read the store (each takes the read-only pair when there is one)."""
    found = []
    if settings.seeds_data and settings.seed_source == "s3":
        found.append("the seed Job (seedSource s3)")
    if settings.serve_kind != "none" and settings.serve_model_source == "s3":
        found.append("the model server (serveModelSource s3)")
    return found


def _runtime_config() -> tuple[dict[str, str], set[str]]:
    """The program's raw config and its secret keys, from both places the Python SDK (3.272.0,
    `pulumi/runtime/config.py`) keeps them: the language host's `PULUMI_CONFIG` /
    `PULUMI_CONFIG_SECRET_KEYS` environment (`get_config_env`, `get_config_secret_keys_env`), and the
    context set by `set_all_config` (`CONFIG`, `_SECRET_KEYS`, what `is_config_secret` reads)."""
    from pulumi.runtime import config as runtime_config

    raw = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    secrets = set(runtime_config.get_config_secret_keys_env()) | set(runtime_config._SECRET_KEYS.get())
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in raw.items()}, secrets


def load_settings() -> tuple[Settings, S3Credentials | None]:
    """The running program's settings and, when configured, its S3 credentials (as secrets)."""
    raw, secrets = _runtime_config()
    settings, has_keys = settings_from_raw(raw, secrets)
    if not has_keys:
        return settings, None
    config = pulumi.Config(PROJECT)
    read = raw.get(f"{PROJECT}:minioReadAccessKey")
    return settings, S3Credentials(
        config.require_secret("minioAccessKey"),
        config.require_secret("minioSecretKey"),
        config.require_secret("minioReadAccessKey") if read else None,
        config.require_secret("minioReadSecretKey") if read else None,
    )


def field_type_name(name: str) -> str:
    """The Pulumi.yaml schema type of a model field."""
    annotation = Settings.model_fields[name].annotation
    if _is_list(name):
        return "array"
    types = set(get_args(annotation)) or {annotation}
    if bool in types:
        return "boolean"
    if int in types:
        return "integer"
    return "string"
