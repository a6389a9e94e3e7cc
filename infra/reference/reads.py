"""Which config keys each shipped stack's program reads, and which outputs it exports.

Each stack in stacks/ is run as `infra.review.render` runs it (the real program under Pulumi's mock
runtime), with its settings object swapped, once validated, for one that records every field read:
by the components that build its resources, by what they compute from outputs, and by the platform
facts a job stack takes. Validation itself (the model and the cross-field checks of
`infra.program.checks`, which read many keys to refuse a misplaced one) is not counted: a key is read by a
role when that role's stacks use its value. The S3 key pair is counted where the program reads the
credentials it loaded (`infra.program.common.config.S3Credentials`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from infra.program.common.config import S3Credentials
from infra.program.settings import Settings
from infra.review.manifest import Rendering, render
from infra.stackconfig import StackConfig, load_stack, stack_names, stacks_dir

# The credentials' fields and the secret config keys they hold (infra.program.common.config.load_settings).
CREDENTIAL_KEYS = {
    "access_key_id": "minioAccessKey",
    "secret_access_key": "minioSecretKey",
    "read_access_key_id": "minioReadAccessKey",
    "read_secret_access_key": "minioReadSecretKey",
}


@dataclass(frozen=True)
class StackRun:
    stack: str
    role: str
    keys: frozenset[str]  # the config keys (aliases) the program read
    outputs: frozenset[str]  # the stack outputs it exported


def _alias(name: str) -> str:
    return Settings.model_fields[name].alias or name


def _recording_settings(settings: Settings, keys: set[str]) -> Settings:
    names = set(Settings.model_fields)

    class RecordingSettings(type(settings)):  # type: ignore[misc]
        def __getattribute__(self, name: str) -> Any:
            if name in names:
                keys.add(_alias(name))
            return super().__getattribute__(name)

    recorded = settings.model_copy()
    object.__setattr__(recorded, "__class__", RecordingSettings)
    return recorded


def _recording_credentials(credentials: S3Credentials | None, keys: set[str]) -> S3Credentials | None:
    if credentials is None:
        return None

    class RecordingCredentials(S3Credentials):
        def __getattribute__(self, name: str) -> Any:
            value = super().__getattribute__(name)
            if name in CREDENTIAL_KEYS and value is not None:
                keys.add(CREDENTIAL_KEYS[name])
            return value

    return RecordingCredentials(**{f.name: getattr(credentials, f.name) for f in fields(S3Credentials)})


def run_stack(stack: StackConfig) -> StackRun:
    """The stack's program under mocks (`infra.review.manifest.run_program`), recording."""
    return run_and_render(stack)[0]


def run_and_render(stack: StackConfig) -> tuple[StackRun, Rendering]:
    """`run_stack`'s record and the stack's rendering (`infra.review.manifest.render`), from one run."""
    keys: set[str] = set()
    role: list[str] = []

    def recording(
        settings: Settings, credentials: S3Credentials | None
    ) -> tuple[Settings, S3Credentials | None]:
        role.append(settings.stack_role)
        return _recording_settings(settings, keys), _recording_credentials(credentials, keys)

    rendering = render(stack, instrument=recording)
    return StackRun(stack.name, role[0], frozenset(keys), frozenset(rendering.outputs)), rendering


# Each shipped stack's run, by its name and its file's text: configuration.md and stacks.md are written
# from the same runs, and a process that writes or checks both pages runs each stack once.
_SHIPPED: dict[tuple[str, bytes], tuple[StackRun, Rendering]] = {}


def shipped() -> list[tuple[StackRun, Rendering]]:
    """Every stack in stacks/, run and rendered (once per process for each version of its file)."""
    runs = []
    for name in stack_names():
        key = (name, (stacks_dir() / f"Pulumi.{name}.yaml").read_bytes())
        if key not in _SHIPPED:
            _SHIPPED[key] = run_and_render(load_stack(name))
        runs.append(_SHIPPED[key])
    return runs


def shipped_runs() -> list[StackRun]:
    """Every stack in stacks/, run."""
    return [run for run, _ in shipped()]
