"""Rehearse a stack on the local cluster: a real `pulumi preview` (and `up`) of your stack's config with
the real engine and provider, against a real API server that enforces its namespaces' Pod Security,
quotas and limit ranges (`make rehearse STACK=<name>`, after `make cluster-up`).

    python -m infra.offline.realcluster.rehearse --stack NAME [--up] [--set KEY=VALUE ...]
                                                 [--local-sources] [--state DIR]

The stack's config is `stacks/Pulumi.<NAME>.yaml` as it is, in a file backend of the cluster's own
(`<state>/pulumi`), never your real backend. Values stored encrypted (`secure:`) cannot be read here:
each becomes a placeholder secret, named in one line; `--set` gives a key a value instead (the S3 keys
are set as secrets). The training operator, Trainer v2 (with JobSet) and KServe come from their vendored
manifests (infra/manifests) as on any cluster; `--local-sources` also takes csi-driver-nfs's chart (a
prerequisites stack's `nfsCsiChart`) from the archive the tier keeps (infra/offline/realcluster/
sources.py) instead of GitHub, for a machine without access to GitHub. Pods run no process
(KWOK completes them), so a rehearsal proves what the engine, the API server and the controllers do
with the stack, not the training itself (`make run` proves that).

Exit codes: 0 the preview (and up) succeeded; 2 bad arguments or stack config; 3/4 a part is missing or
failed to build; 6 the cluster is not running; 7 the preview or up failed (its output above says why).
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
from pathlib import Path

import yaml
from pulumi import automation as auto

from infra.offline.realcluster import sources
from infra.offline.realcluster.build import BuildError, binary
from infra.offline.realcluster.cluster import DEFAULT_STATE, ClusterError, State, alive
from infra.offline.realcluster.parts import KUBERNETES_PROVIDER_VERSION
from infra.offline.stackconfig import ROOT, StackNotFound, load_stack, project_file
from infra.program.settings import PROJECT, SECRET_KEYS

EXIT_USAGE = 2
EXIT_NOT_RUNNING = 6
EXIT_FAILED = 7


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
    plugin downloads."""
    os.environ["PATH"] = f"{binary('pulumi').parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {
        "KUBECONFIG": str(state.kubeconfig),
        "PATH": os.environ["PATH"],
        "PULUMI_HOME": str(home),
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
    }
    if not (home / "plugins" / f"resource-kubernetes-v{KUBERNETES_PROVIDER_VERSION}").exists():
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
            env={**os.environ, **env},
            check=True,
            capture_output=True,
        )
    return env


def environment(state: State) -> dict[str, str]:
    """The rehearsal's environment: the engine's, and a file backend of the cluster's own."""
    backend = state.directory / "pulumi" / "state"
    backend.mkdir(parents=True, exist_ok=True)
    return {
        **engine_environment(state, state.directory / "pulumi" / "home"),
        "PULUMI_BACKEND_URL": backend.as_uri(),
        "PULUMI_CONFIG_PASSPHRASE": passphrase(state),
    }


def rehearsal_config(
    name: str, overrides: list[str], local_sources: bool = False
) -> tuple[dict[str, auto.ConfigValue], list[str]]:
    """The stack's config for the rehearsal, and the keys whose encrypted values became placeholders."""
    stack = load_stack(name)
    config = {
        key: auto.ConfigValue(value, secret=key in stack.secret_keys) for key, value in stack.values.items()
    }
    placeholders = sorted(key for key in stack.secret_keys)
    for key in placeholders:
        config[key] = auto.ConfigValue(f"rehearsal-{key.split(':')[-1]}", secret=True)
    for entry in overrides:
        key, sep, value = entry.partition("=")
        if not sep or not key:
            raise ValueError(
                f"--set {entry!r}: expected KEY=VALUE (a config key of {PROJECT}, e.g. minioBucket=mnist)"
            )
        full = key if ":" in key else f"{PROJECT}:{key}"
        config[full] = auto.ConfigValue(value, secret=full.split(":", 1)[1] in SECRET_KEYS)
        if full in placeholders:
            placeholders.remove(full)
    role = config.get(f"{PROJECT}:stackRole")
    chart = f"{PROJECT}:nfsCsiChart"
    if local_sources and role is not None and role.value == "prerequisites" and chart not in config:
        config[chart] = auto.ConfigValue(str(sources.csi_driver_nfs_chart()))
    return config, placeholders


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m infra.offline.realcluster.rehearse", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--stack", required=True, help="a stack of stacks/ (Pulumi.<name>.yaml)")
    parser.add_argument("--up", action="store_true", help="run `pulumi up` after the preview")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a config value (repeatable)"
    )
    parser.add_argument(
        "--local-sources",
        action="store_true",
        help="take csi-driver-nfs's chart from the tier's archive (no GitHub; the operators' manifests "
        "are vendored)",
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
        config, placeholders = rehearsal_config(args.stack, args.set, args.local_sources)
        env = environment(state)
    except (StackNotFound, ValueError, ClusterError) as error:
        print(f"rehearse: {error}", file=sys.stderr)
        return EXIT_USAGE
    except BuildError as error:
        print(error, file=sys.stderr)
        return error.code
    if placeholders:
        names = ", ".join(placeholders)
        print(f"rehearse: encrypted values replaced by placeholders: {names} (give one with --set)")
    work = project_dir(state.directory / "pulumi" / "project")
    stack = auto.create_or_select_stack(
        stack_name=args.stack,
        work_dir=str(work),
        opts=auto.LocalWorkspaceOptions(work_dir=str(work), env_vars=env),
    )
    stack.set_all_config(config)
    try:
        stack.preview(on_output=print)
        if args.up:
            stack.up(on_output=print, show_secrets=False)
    except auto.CommandError:
        print(
            f"rehearse: `pulumi {'up' if args.up else 'preview'}` of {args.stack} failed (see above)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())
