"""Rehearse a stack on the local cluster: a real `pulumi preview` (and `up`) of your stack's config with
the real engine and provider, against a real API server that enforces its namespaces' Pod Security,
quotas and limit ranges (`make rehearse STACK=<name>`, after `make cluster-up`).

    python -m infra.localcluster.rehearse --stack NAME [--up] [--set KEY=VALUE ...]
                                                 [--state DIR]

The stack's config is `stacks/Pulumi.<NAME>.yaml` as it is: its values are written into the rehearsal
project's own stack file (lists stay lists, as the CLI checks them against the project's types), in a
file backend of the cluster's own (`<state>/pulumi`), never your real backend. Values stored encrypted
(`secure:`) cannot be read here: each becomes a placeholder secret, named in one line; `--set` gives a
key a value instead (the S3 keys are set as secrets, encrypted by the rehearsal backend; a list key takes
`[a, b]`). A shipped stack that requires its image by digest (jobImageDigestRequired) names the release by
tag until a release prints the digest: the rehearsal stands in an all-zero digest, named in one line (no
image is pulled here). The training operator, Trainer v2 (with JobSet) and KServe come from their
vendored manifests (infra/manifests), and a prerequisites stack's csi-driver-nfs from its vendored chart
(infra/charts), as on any cluster: nothing is fetched from GitHub. Pods run no process (KWOK completes
them), so a rehearsal proves what the engine, the API server and the controllers do with the stack, not the
training itself (`make run` proves that).

Before the engine runs, what the stack expects to find in the cluster (its platform stack, an existing
namespace, StorageClass or Secret, an operator it does not install, a PriorityClass, Kueue and its
ClusterQueue) is read from the API server, and each one missing is one line. They stop `--up` before
anything runs (an up would wait for them, or fail on the first); a preview still runs, as the engine
previews without them. A failed preview or up prints the engine's output and its error (the CLI's
stderr), then one line.

Exit codes: `EXIT_CODE_MEANINGS` below (`--help` lists it).
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pulumi import automation as auto

from infra.epilog import exit_codes_epilog
from infra.localcluster.build import EXIT_BUILD_FAILED, EXIT_NO_GO, BuildError, binary
from infra.localcluster.cluster import DEFAULT_STATE, ClusterError, State, alive
from infra.localcluster.expected import missing_prerequisites
from infra.localcluster.parts import KUBERNETES_PROVIDER_VERSION
from infra.program.common import yamlio
from infra.program.settings import PROJECT, SECRET_KEYS
from infra.stackconfig import (
    ROOT,
    StackConfig,
    StackNotFound,
    as_config_string,
    from_mapping,
    load_stack,
    project_file,
    stacks_dir,
    with_stand_in_secrets,
)

EXIT_USAGE = 2
EXIT_NOT_RUNNING = 6
EXIT_FAILED = 7
EXIT_MISSING = 8
EXIT_CODE_MEANINGS = {
    0: "the preview (and up) succeeded",
    EXIT_USAGE: "bad arguments or stack config",
    EXIT_NO_GO: "no Go toolchain (or one too old) to build a missing part",
    EXIT_BUILD_FAILED: "a part failed to build",
    EXIT_NOT_RUNNING: "the cluster is not running",
    EXIT_FAILED: "the preview or up failed: the engine's output and error, then one line",
    EXIT_MISSING: "--up: the cluster lacks what the stack expects to find there: one line each, nothing run",
}


def project_dir(work: Path) -> Path:
    """A project directory for the Automation API: the repository's Pulumi.yaml without its stack
    config directory (nothing is written into stacks/), the virtualenv made absolute, infra/ linked."""
    settings = project_file()
    settings.pop("stackConfigDir", None)
    options = settings["runtime"].setdefault("options", {})
    options["virtualenv"] = str(ROOT / options.get("virtualenv", ".venv-infra"))
    work.mkdir(parents=True, exist_ok=True)
    (work / "Pulumi.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
    link = work / "infra"
    if not link.exists():
        link.symlink_to(ROOT / "infra", target_is_directory=True)
    return work


def passphrase(state: State) -> str:
    """The rehearsal backend's passphrase: $PULUMI_CONFIG_PASSPHRASE, else one kept in the state (0600)."""
    if os.environ.get("PULUMI_CONFIG_PASSPHRASE"):
        return os.environ["PULUMI_CONFIG_PASSPHRASE"]
    path = state.directory / "pulumi" / "passphrase"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(24))
    return path.read_text()


def engine_environment(state: State, home: Path) -> dict[str, str]:
    """What the real CLI needs against the cluster of `state`: its kubeconfig, the built CLI first on PATH
    (also this process's, where the Automation API looks it up), a Pulumi home at `home` with the
    Kubernetes provider plugin of the SDK's version installed from its build, no update checks and no
    plugin downloads.

    The engine saves the stack's state once, when an operation ends or fails, not after each resource
    (PULUMI_SKIP_CHECKPOINTS; pulumi v3.274.1 pkg/backend/snapshot.go `unsafeServiceLoop` saves the
    snapshot when the operation closes, on failure too). Each step's checkpoint rewrites the whole state,
    and a platform stack's state holds KServe's and Trainer v2's CRDs: about half an update's or a
    destroy's time on 2 cores (docs/BENCHMARKS.md). The backend is the cluster's own and goes with it;
    only an engine killed mid-operation loses the steps since its start, on that throwaway cluster."""
    os.environ["PATH"] = f"{binary('pulumi').parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {
        "KUBECONFIG": str(state.kubeconfig),
        "PATH": os.environ["PATH"],
        "PULUMI_HOME": str(home),
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "PULUMI_SKIP_CHECKPOINTS": "true",
    }
    install_kubernetes_plugin(home, {**os.environ, **env})
    return env


def install_kubernetes_plugin(home: Path, env: dict[str, str]) -> None:
    """The Kubernetes provider plugin of the SDK's version, from its build, into the Pulumi home `home`
    (the CLI of `env`'s PATH installs it), unless it is there."""
    if (home / "plugins" / f"resource-kubernetes-v{KUBERNETES_PROVIDER_VERSION}").exists():
        return
    subprocess.run(
        [
            "pulumi",
            "plugin",
            "install",
            "resource",
            "kubernetes",
            KUBERNETES_PROVIDER_VERSION,
            "--file",
            str(binary("pulumi-resource-kubernetes")),
        ],
        env={**env, "PULUMI_HOME": str(home)},
        check=True,
        capture_output=True,
    )


def environment(state: State) -> dict[str, str]:
    """The rehearsal's environment: the engine's, and a file backend of the cluster's own."""
    backend = state.directory / "pulumi" / "state"
    backend.mkdir(parents=True, exist_ok=True)
    return {
        **engine_environment(state, state.directory / "pulumi" / "home"),
        "PULUMI_BACKEND_URL": backend.as_uri(),
        "PULUMI_CONFIG_PASSPHRASE": passphrase(state),
    }


@dataclass(frozen=True)
class RehearsalConfig:
    """A stack's config for the rehearsal."""

    name: str  # the stack's name in the rehearsal backend
    plain: dict[str, Any]  # as the stack file holds them: lists stay lists, written into the stack file
    secrets: dict[str, str] = field(default_factory=dict)  # set through the CLI, encrypted by its backend
    placeholders: list[str] = field(default_factory=list)  # keys whose encrypted values became placeholders
    # What only a release gives a shipped stack, stood in (the jobImage digest its jobImageDigestRequired
    # asks for: under KWOK no image is pulled), as `key value`.
    stand_ins: list[str] = field(default_factory=list)

    def values(self) -> dict[str, str]:
        """Every value as the program receives it (a list as JSON)."""
        return {**{key: as_config_string(value) for key, value in self.plain.items()}, **self.secrets}


def override(key: str, value: str) -> Any:
    """A `--set` value as the CLI would store it: a list for a key the project types as an array (given
    as `[a, b]`, YAML or JSON), else the string."""
    short = key.split(":", 1)[1] if key.startswith(f"{PROJECT}:") else ""
    if project_file().get("config", {}).get(short, {}).get("type") != "array":
        return value
    try:
        parsed = yamlio.load(value)
    except yaml.YAMLError:
        parsed = None
    if not isinstance(parsed, list):
        raise ValueError(f"--set {short}={value!r}: {short} is a list, give it as [a, b] (YAML or JSON)")
    return [str(item) for item in parsed]


def stack_source(stack: str) -> tuple[str, StackConfig, dict[str, Any]]:
    """The stack's name, its config as the program reads it, and its file's `config:` as written:
    `stacks/Pulumi.<stack>.yaml`, or a stack file of yours given by its path (`.../Pulumi.<name>.yaml`)."""
    if not stack.endswith(".yaml"):
        loaded = load_stack(stack)
        document = yamlio.load((stacks_dir() / f"Pulumi.{stack}.yaml").read_text()) or {}
        return stack, loaded, document.get("config") or {}
    path = Path(stack)
    name = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
    if not path.name.startswith("Pulumi.") or not name or not path.is_file():
        raise StackNotFound(
            f"no stack file {stack} (a stack of stacks/, or the path of a Pulumi.<name>.yaml)"
        )
    try:
        document = yamlio.load(path.read_text()) or {}
    except yaml.YAMLError:
        raise StackNotFound(f"stack file {stack} is not valid YAML") from None
    config = document.get("config") if isinstance(document, dict) else None
    if not isinstance(config, dict):
        raise StackNotFound(f"stack file {stack} must hold a `config:` mapping")
    return name, with_stand_in_secrets(from_mapping(name, config)), config


def rehearsal_config(stack: str, overrides: list[str]) -> RehearsalConfig:
    """The stack's config for the rehearsal: its stack file's values as they are, `--set` on top, each
    secret key (an encrypted value, or an S3 key the file leaves unset) a named placeholder unless set."""
    name, loaded, written = stack_source(stack)
    plain = {key: value for key, value in written.items() if key not in loaded.secret_keys}
    placeholders = sorted(loaded.secret_keys)
    secret = {key: f"rehearsal-{key.split(':')[-1]}" for key in placeholders}
    image = f"{PROJECT}:jobImage"
    stand_ins = {}
    if image in written and loaded.values.get(image) != as_config_string(written[image]):
        plain[image] = stand_ins[image] = loaded.values[image]
    for entry in overrides:
        key, sep, value = entry.partition("=")
        if not sep or not key:
            raise ValueError(
                f"--set {entry!r}: expected KEY=VALUE (a config key of {PROJECT}, e.g. minioBucket=mnist)"
            )
        full = key if ":" in key else f"{PROJECT}:{key}"
        if full.removeprefix(f"{PROJECT}:") in SECRET_KEYS:
            secret[full] = value
            plain.pop(full, None)
        else:
            plain[full] = override(full, value)
            secret.pop(full, None)
        if full in placeholders:
            placeholders.remove(full)
        stand_ins.pop(full, None)
    shown = [f"{key.removeprefix(f'{PROJECT}:')} {value}" for key, value in stand_ins.items()]
    return RehearsalConfig(name, plain, secret, placeholders, shown)


def write_stack_file(work: Path, name: str, plain: dict[str, Any]) -> Path:
    """The rehearsal project's `Pulumi.<name>.yaml`: `plain` as its whole config (a value left from an
    earlier rehearsal goes), everything else the CLI wrote there (its encryption salt) kept."""
    path = work / f"Pulumi.{name}.yaml"
    current = (yamlio.load(path.read_text()) if path.exists() else None) or {}
    path.write_text(yaml.safe_dump({**current, "config": plain}, sort_keys=False))
    return path


def engine_output(error: auto.CommandError) -> tuple[str, str, str]:
    """The failed command's exit code, stdout and stderr, which the Automation API keeps only in the
    error's text (`CommandResult.__str__`: code, stdout, stderr)."""
    rest, _, stderr = str(error).rpartition("\n stderr: ")
    code, _, stdout = rest.partition("\n stdout: ")
    return code.partition(" code: ")[2].strip(), stdout.strip(), stderr.strip()


def failure_line(command: str, stack: str, error: auto.CommandError) -> str:
    """The one line after a failed command: the first `error:` line of its stderr (the CLI's own, such as
    a config the project's types refuse), else of its output (the program's own comes first there, before
    the engine's "program exited with non-zero exit code"), else its last line."""
    code, stdout, stderr = engine_output(error)
    said = [[line.strip() for line in text.splitlines() if line.strip()] for text in (stderr, stdout)]
    errors = [line for lines in said for line in lines if line.startswith("error:")]
    why = (errors[:1] or said[0][-1:] or [f"the CLI exited {code} without an error message"])[0]
    return f"rehearse: `pulumi {command}` of {stack} failed: {why.removeprefix('error:').strip()}"


def _outputs_reader(workspace: auto.Workspace) -> Callable[[str], dict[str, Any] | None]:
    def read(name: str) -> dict[str, Any] | None:
        try:
            return dict(workspace.stack_outputs(name))
        except auto.CommandError:
            return None

    return read


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def rehearse(state: State, config: RehearsalConfig, env: dict[str, str], up: bool = False) -> int:
    """The stack's preview (and up) in the rehearsal project, after its prerequisites are found."""
    work = project_dir(state.directory / "pulumi" / "project")
    command = "stack select"
    try:
        stack = auto.create_or_select_stack(
            stack_name=config.name,
            work_dir=str(work),
            opts=auto.LocalWorkspaceOptions(work_dir=str(work), env_vars=env),
        )
        write_stack_file(work, config.name, config.plain)
        missing = missing_prerequisites(
            config.values(), set(config.secrets), state.client(), _outputs_reader(stack.workspace)
        )
        for line in missing:
            _stderr(f"rehearse: missing: {line}")
        fix = f"create them (KUBECONFIG={state.kubeconfig} kubectl ...) or rehearse the stack that makes them"
        if missing and up:
            _stderr(
                f"rehearse: no `pulumi up` of {config.name}: it expects {len(missing)} thing(s) the cluster "
                f"lacks (above), which it would wait for or fail on: {fix}"
            )
            return EXIT_MISSING
        command = "config set"
        if config.secrets:
            stack.set_all_config(
                {key: auto.ConfigValue(value, secret=True) for key, value in config.secrets.items()}
            )
        command = "preview"
        stack.preview(on_output=print, on_error=_stderr)
        if missing:
            _stderr(
                f"rehearse: the preview passed; `--up` would stop on the {len(missing)} thing(s) above: {fix}"
            )
        if up:
            command = "up"
            stack.up(on_output=print, on_error=_stderr, show_secrets=False)
    except auto.CommandError as error:
        if command not in ("preview", "up"):  # not streamed: the command's stderr is only in the error
            _stderr(engine_output(error)[2])
        _stderr(failure_line(command, config.name, error))
        return EXIT_FAILED
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m infra.localcluster.rehearse",
        description=__doc__.split("\n")[0],
        epilog=exit_codes_epilog(EXIT_CODE_MEANINGS),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--stack",
        required=True,
        help="a stack of stacks/ (Pulumi.<name>.yaml), or the path of a stack file of yours",
    )
    parser.add_argument("--up", action="store_true", help="run `pulumi up` after the preview")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config value (repeatable); a list key takes [a, b]",
    )
    parser.add_argument(
        "--state", type=Path, default=DEFAULT_STATE, help=f"the cluster's state (default {DEFAULT_STATE})"
    )
    args = parser.parse_args(argv)
    state = State(args.state.resolve())
    pids = state.read().get("pids", {})
    if not pids or not all(alive(pid) for pid in pids.values()):
        print(
            f"rehearse: no local cluster running from {state.directory} (start it with `make cluster-up`)",
            file=sys.stderr,
        )
        return EXIT_NOT_RUNNING
    try:
        config = rehearsal_config(args.stack, args.set)
        env = environment(state)
    except (StackNotFound, ValueError, ClusterError) as error:
        print(f"rehearse: {error}", file=sys.stderr)
        return EXIT_USAGE
    except BuildError as error:
        print(error, file=sys.stderr)
        return error.code
    if config.placeholders:
        names = ", ".join(config.placeholders)
        print(f"rehearse: encrypted values replaced by placeholders: {names} (give one with --set)")
    for stand_in in config.stand_ins:
        print(f"rehearse: stood in for what a release gives: {stand_in} (give one with --set)")
    return rehearse(state, config, env, up=args.up)


if __name__ == "__main__":
    sys.exit(main())
