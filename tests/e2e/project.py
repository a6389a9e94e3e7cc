"""Pulumi stacks driven through the Automation API, on a local file backend, a throwaway passphrase
and the current kubeconfig context.

The project's program runs from a temporary project directory: its Pulumi.yaml is the repository's
with the stack config directory dropped (so no `stacks/Pulumi.<stack>.yaml` of the tier is ever written
into the repository) and the virtualenv made absolute; `infra/` there links to the repository's.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml
from pulumi import automation as auto

from infra.stackconfig import ROOT, project_file
from tests.e2e.stacks import SECRET_KEYS

PULUMI_VERSION = "3.272.0"


@dataclass(frozen=True)
class Backend:
    """A local file backend and its passphrase, for every stack of one run."""

    directory: Path
    passphrase: str

    @classmethod
    def create(cls, directory: Path) -> Backend:
        (directory / "state").mkdir(parents=True, exist_ok=True)
        return cls(directory, secrets.token_urlsafe(24))

    @property
    def env(self) -> dict[str, str]:
        return {
            "PULUMI_BACKEND_URL": (self.directory / "state").as_uri(),
            "PULUMI_CONFIG_PASSPHRASE": self.passphrase,
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "KUBECONFIG": os.environ.get("KUBECONFIG", str(Path.home() / ".kube" / "config")),
        }


def project_settings(root: Path = ROOT) -> dict:
    """The repository's project file as the temporary project directory holds it."""
    settings = project_file(root)
    settings.pop("stackConfigDir", None)
    options = settings["runtime"].setdefault("options", {})
    options["virtualenv"] = str(root / options.get("virtualenv", ".venv-infra"))
    return settings


def project_dir(backend: Backend) -> Path:
    work = backend.directory / "project"
    work.mkdir(exist_ok=True)
    (work / "Pulumi.yaml").write_text(yaml.safe_dump(project_settings(), sort_keys=False))
    link = work / "infra"
    if not link.exists():
        link.symlink_to(ROOT / "infra", target_is_directory=True)
    return work


def _opts(backend: Backend, work_dir: Path | None = None) -> auto.LocalWorkspaceOptions:
    return auto.LocalWorkspaceOptions(
        work_dir=str(work_dir) if work_dir else None,
        env_vars=backend.env,
    )


def program_stack(backend: Backend, name: str, config: dict[str, str]) -> auto.Stack:
    """A stack of the project's own program with exactly `config` (secret keys set as secrets)."""
    work = project_dir(backend)
    stack = auto.create_or_select_stack(stack_name=name, work_dir=str(work), opts=_opts(backend, work))
    set_config(stack, config)
    return stack


def set_config(stack: auto.Stack, config: dict[str, str]) -> None:
    """Replace the stack's config by `config`."""
    current = stack.get_all_config()
    stale = [key for key in current if key not in config]
    if stale:
        stack.remove_all_config(stale)
    plain = {k: v for k, v in config.items() if not v.startswith("[")}
    stack.set_all_config({k: auto.ConfigValue(v, secret=k in SECRET_KEYS) for k, v in plain.items()})
    # A list (JSON, as a stack file's YAML list reaches the program) is set item by item, as the CLI's
    # `pulumi config set --path 'key[0]'` does: a string would fail the project's array type.
    for key, value in config.items():
        if key in plain:
            continue
        items = json.loads(value)
        if key in current:
            stack.remove_config(key)
        stack.set_all_config(
            {f"{key}[{i}]": auto.ConfigValue(str(item)) for i, item in enumerate(items)}, path=True
        )


def inline_stack(backend: Backend, project: str, name: str, program: Callable[[], None]) -> auto.Stack:
    """A stack of an inline program (the cluster fixtures), in the same backend."""
    return auto.create_or_select_stack(
        stack_name=name, project_name=project, program=program, opts=_opts(backend)
    )


def up(stack: auto.Stack, on_output: Callable[[str], object] = print) -> dict:
    """`pulumi up`, its output streamed (secret values hidden, as in CI logs); the stack's outputs."""
    result = stack.up(on_output=on_output, show_secrets=False)
    return {key: value.value for key, value in result.outputs.items()}


def destroy(stack: auto.Stack) -> None:
    stack.destroy(on_output=print, show_secrets=False)
