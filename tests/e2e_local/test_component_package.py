"""The component package through the real engine, from the YAML, TypeScript and Go programs of its
pages (docs/how-to/components.md, components-yaml.md, components-typescript.md, components-go.md):

- `pulumi package add <checkout>/infra/component`, as the page says, starts the provider through the
  Python language host, reads its schema and generates the program's SDK (YAML: a `packages:` entry;
  TypeScript: an npm package installed from its directory; Go: a module that go.mod requires and
  replaces with its directory);
- a preview of the page's program registers the TrainingJob component and, as its descendants, every
  Kubernetes object the offline render of a job stack with the same config has;
- a bad input fails the preview with the page's line, the stack config's own;
- on the local cluster, after the session's prerequisites and platform stacks, each language's
  TrainingJob deploys the dev stack's twin: the seed Job completes, the PyTorchJob succeeds.

The real engine, its Python, Node.js and Go language hosts (the tier's own, upstream's are not on the
module proxy), the YAML language host (pulumi-yaml) and the Kubernetes provider, all built by the tier,
and @pulumi/pulumi from npm; the previews have no cluster to read.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.localcluster.build import binary
from infra.localcluster.rehearse import install_kubernetes_plugin
from infra.program.settings import PROJECT_ROOT
from infra.review.manifest import render
from tests.e2e import judge, live
from tests.e2e.stacks import as_stack, job_config
from tests.e2e_local import scenario
from tests.e2e_local.conftest import KEEP
from tests.infra.conftest import as_inputs, stack_config

pytestmark = pytest.mark.e2e_local

PAGES = PROJECT_ROOT / "docs" / "how-to"
PAGE = PAGES / "components.md"


def _block(section: str, language: str, page: Path = PAGE) -> str:
    """The first code block of `language` under the heading `section` of `page` ("" for its start)."""
    text = page.read_text().split(f"{section}\n", 1)[1] if section else page.read_text()
    found = re.search(rf"```{language}\n(.*?)```", text, re.S)
    assert found, f"no {language} block under {section!r} in {page}"
    return found.group(1)


def _add_package(program: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The page's one command, in the program's directory."""
    (command,) = [line for line in _block("## Add the package", "sh").splitlines() if line.strip()]
    return _run(command.replace("<checkout>", str(PROJECT_ROOT)).split(), program, env)


def _engine(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    (tmp_path / "state").mkdir()
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(binary("pulumi").parent), os.environ["PATH"]]),
        "PULUMI_HOME": str(home),
        "PULUMI_BACKEND_URL": (tmp_path / "state").as_uri(),
        "PULUMI_CONFIG_PASSPHRASE": "component-package-test",
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "KUBECONFIG": str(tmp_path / "no-cluster"),
    }
    install_kubernetes_plugin(home, env)
    return env


def _run(
    argv: list[str], cwd: Path, env: dict[str, str], timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _previews_the_job_stacks_objects(program: Path, env: dict[str, str], inputs: dict[str, Any]) -> None:
    """A preview of the program registers the TrainingJob and, under it, exactly the Kubernetes objects
    of the offline render of a job stack whose config is the component's inputs."""
    assert _run(["pulumi", "stack", "init", "test"], program, env).returncode == 0
    preview = _run(["pulumi", "preview", "--json", "--non-interactive"], program, env, timeout=600)
    assert preview.returncode == 0, preview.stderr + preview.stdout
    steps = [step for step in json.loads(preview.stdout)["steps"] if step["op"] == "create"]
    states = {step["urn"]: step["newState"] for step in steps}
    (component,) = [urn for urn, state in states.items() if state["type"] == "ddp-mnist:index:TrainingJob"]

    def under_component(urn: str) -> bool:
        parent = states[urn].get("parent", "")
        return parent == component or (parent in states and under_component(parent))

    previewed = sorted(
        (state["type"], urn.rsplit("::", 1)[1])
        for urn, state in states.items()
        if state["type"].startswith("kubernetes:") and under_component(urn)
    )
    offline = render(stack_config({**inputs, "stackRole": "job"}))
    expected = sorted(
        (r.type, r.name) for r in offline.registrations if r.custom and r.type.startswith("kubernetes:")
    )
    assert ("kubernetes:kubeflow.org/v1:PyTorchJob", "trainer-job") in previewed
    assert previewed == expected
    assert all(
        under_component(urn) for urn, state in states.items() if state["type"].startswith("kubernetes:")
    )


def test_a_yaml_program_adds_the_package_and_previews_the_job_stacks_objects(tmp_path):
    program = tmp_path / "program"
    program.mkdir()
    env = _program("yaml", program, _engine(tmp_path))
    added = _add_package(program, env)
    assert added.returncode == 0, added.stderr
    assert yaml.safe_load((program / "Pulumi.yaml").read_text())["packages"] == {
        "ddp-mnist": str(PROJECT_ROOT / "infra" / "component")
    }
    assert (program / "sdks" / "ddp-mnist").is_dir()
    inputs = yaml.safe_load((program / "Pulumi.yaml").read_text())["resources"]["job"]["properties"]
    _previews_the_job_stacks_objects(program, env, inputs)


def _program(language: str, program: Path, env: dict[str, str]) -> dict[str, str]:
    """Writes the language page's program files into `program`; returns the environment to run it with
    (the tier's language host for it on PATH). TypeScript's dependencies are installed (npm)."""
    files = {
        "yaml": (("", "yaml", "Pulumi.yaml"),),
        "go": (
            ("### Pulumi.yaml", "yaml", "Pulumi.yaml"),
            ("### go.mod", "text", "go.mod"),
            ("### main.go", "go", "main.go"),
        ),
        "typescript": tuple(
            (f"### {name}", kind, name)
            for name, kind in (
                ("Pulumi.yaml", "yaml"),
                ("package.json", "json"),
                ("tsconfig.json", "json"),
                ("index.ts", "typescript"),
            )
        ),
    }[language]
    for section, kind, name in files:
        (program / name).write_text(_block(section, kind, PAGES / f"components-{language}.md"))
    host = {
        "yaml": "pulumi-language-yaml",
        "go": "pulumi-language-go",
        "typescript": "pulumi-language-nodejs",
    }
    env = {**env, "PATH": os.pathsep.join([str(binary(host[language]).parent), env["PATH"]])}
    if language == "typescript":
        installed = _run(["npm", "install", "--no-audit", "--no-fund"], program, env, timeout=600)
        assert installed.returncode == 0, installed.stderr
    return env


GO_INPUT = re.compile(r"^\s*(\w+):\s+pulumi\.(?:StringRef|IntRef|BoolRef)\((.+)\),$", re.M)


def test_a_go_program_adds_the_package_and_previews_the_job_stacks_objects(tmp_path):
    program = tmp_path / "program"
    program.mkdir()
    env = _program("go", program, _engine(tmp_path))
    added = _add_package(program, env)
    assert added.returncode == 0, added.stderr
    go_mod = (program / "go.mod").read_text()
    assert "replace ddp-mnist.local/sdk/go => ./sdks/ddp-mnist" in go_mod
    assert (program / "sdks" / "ddp-mnist" / "ddpmnist").is_dir()
    inputs = {
        field[0].lower() + field[1:]: json.loads(value)
        for field, value in GO_INPUT.findall((program / "main.go").read_text())
    }
    assert inputs["jobNodes"] == 2 and inputs["operatorInstall"] is False
    _previews_the_job_stacks_objects(program, env, inputs)


TS_INPUT = re.compile(r"^ {4}(\w+): (.+),$", re.M)


def test_a_typescript_program_adds_the_package_and_previews_the_job_stacks_objects(tmp_path):
    program = tmp_path / "program"
    program.mkdir()
    env = _program("typescript", program, _engine(tmp_path))
    added = _add_package(program, env)
    assert added.returncode == 0, added.stderr
    assert (
        json.loads((program / "package.json").read_text())["dependencies"]["ddp-mnist"]
        == "file:sdks/ddp-mnist"
    )
    assert (program / "node_modules" / "ddp-mnist" / "bin" / "index.js").is_file()  # compiled on install
    inputs = {key: json.loads(value) for key, value in TS_INPUT.findall((program / "index.ts").read_text())}
    assert inputs["jobNodes"] == 2 and inputs["operatorInstall"] is False
    _previews_the_job_stacks_objects(program, env, inputs)


@pytest.mark.parametrize("language", ["yaml", "go", "typescript"])
def test_a_bad_input_fails_the_preview_with_the_pages_line_in_each_language(tmp_path, language):
    program = tmp_path / "program"
    program.mkdir()
    env = _program(language, program, _engine(tmp_path))
    # jobNodes 0 in each program: the one input line each language writes its own way.
    name, before, after = {
        "yaml": ("Pulumi.yaml", "jobNodes: 2", "jobNodes: 0"),
        "go": ("main.go", "pulumi.IntRef(2)", "pulumi.IntRef(0)"),
        "typescript": ("index.ts", "jobNodes: 2,", "jobNodes: 0,"),
    }[language]
    text = (program / name).read_text()
    assert text.count(before) == 1
    (program / name).write_text(text.replace(before, after))
    assert _add_package(program, env).returncode == 0
    assert _run(["pulumi", "stack", "init", "test"], program, env).returncode == 0
    preview = _run(["pulumi", "preview", "--non-interactive"], program, env, timeout=600)
    assert preview.returncode != 0
    line = re.search(r"`(property jobNodes with value 0 has a problem: [^`]*)`", PAGE.read_text())
    assert line, "the page quotes the error"
    assert line.group(1) in preview.stdout + preview.stderr


def _deploy_program(language: str, program: Path, inputs: dict[str, Any], secrets: list[str]) -> None:
    """The page's program of `language` with `inputs` as the TrainingJob's plain inputs and `secrets` read
    from the program's secret config; it exports the job's and the seed's outcomes."""
    if language == "yaml":
        document = yaml.safe_load((program / "Pulumi.yaml").read_text())
        document["config"] = {key: {"type": "string", "secret": True} for key in secrets}
        document["resources"]["job"]["properties"] = {**inputs, **{key: f"${{{key}}}" for key in secrets}}
        document["outputs"] = {"jobOutcome": "${job.jobOutcome}", "seedOutcome": "${job.seedOutcome}"}
        (program / "Pulumi.yaml").write_text(yaml.safe_dump(document))
    elif language == "typescript":
        read = "".join(f'    {key}: config.requireSecret("{key}"),\n' for key in secrets)
        (program / "index.ts").write_text(
            'import * as pulumi from "@pulumi/pulumi";\nimport * as ddpmnist from "ddp-mnist";\n\n'
            "const config = new pulumi.Config();\n"
            f'const job = new ddpmnist.TrainingJob("job", {{\n    ...{json.dumps(inputs)},\n{read}}});\n\n'
            "export const jobOutcome = job.jobOutcome;\nexport const seedOutcome = job.seedOutcome;\n"
        )
    else:
        fields = "".join(
            f"\t\t\t{key[0].upper() + key[1:]}: {_go_value(value)},\n" for key, value in inputs.items()
        )
        fields += "".join(
            f'\t\t\t{key[0].upper() + key[1:]}: config.RequireSecret(ctx, "{key}").ToStringPtrOutput(),\n'
            for key in secrets
        )
        (program / "main.go").write_text(
            "package main\n\nimport (\n"
            '\t"ddp-mnist.local/sdk/go/ddpmnist"\n'
            '\t"github.com/pulumi/pulumi/sdk/v3/go/pulumi"\n'
            '\t"github.com/pulumi/pulumi/sdk/v3/go/pulumi/config"\n)\n\n'
            "func main() {\n\tpulumi.Run(func(ctx *pulumi.Context) error {\n"
            '\t\tjob, err := ddpmnist.NewTrainingJob(ctx, "job", &ddpmnist.TrainingJobArgs{\n'
            f"{fields}\t\t}})\n"
            "\t\tif err != nil {\n\t\t\treturn err\n\t\t}\n"
            '\t\tctx.Export("jobOutcome", job.JobOutcome)\n\t\tctx.Export("seedOutcome", job.SeedOutcome)\n'
            "\t\treturn nil\n\t})\n}\n"
        )


def _go_value(value: Any) -> str:
    if isinstance(value, bool):
        return f"pulumi.BoolRef({str(value).lower()})"
    if isinstance(value, int):
        return f"pulumi.IntRef({value})"
    if isinstance(value, list):
        return "[]string{" + ", ".join(json.dumps(item) for item in value) + "}"
    return f"pulumi.StringRef({json.dumps(value)})"


@pytest.mark.parametrize("language", ["yaml", "typescript", "go"])
def test_a_program_deploys_the_dev_job_on_the_local_cluster(
    platform: dict, tmp_path: Path, language: str
) -> None:
    """The dev stack's twin as a job (tests/e2e/stacks.job_config) from each language's TrainingJob, in a
    namespace and with a StorageClass of its own, after the session's prerequisites and platform stacks:
    the seed Job completes, the PyTorchJob succeeds (its pods run no process under KWOK: the engine's and
    the controllers' work is what is shown), and the engine's resources are the offline render's of a
    job stack with the same config."""
    namespace = f"ddp-mnist-{language}"
    config = job_config(
        scenario.IMAGE, *scenario.KEYS, namespace=namespace, storageClassName=f"ddp-mnist-nfs-{language}"
    )
    secrets = {key: config.pop(f"ddp-mnist:{key}") for key in ("minioAccessKey", "minioSecretKey")}
    config.pop("ddp-mnist:stackRole")
    program = tmp_path / "program"
    program.mkdir()
    env = _program(language, program, {**os.environ, "PULUMI_CONFIG_PASSPHRASE": "component-package-test"})
    _deploy_program(language, program, as_inputs(config), list(secrets))
    added = _add_package(program, env)
    assert added.returncode == 0, added.stderr
    backend = tmp_path / "state"
    backend.mkdir()
    env["PULUMI_BACKEND_URL"] = backend.as_uri()
    assert _run(["pulumi", "stack", "init", "local"], program, env).returncode == 0
    for key, value in secrets.items():
        assert _run(["pulumi", "config", "set", "--secret", key, value], program, env).returncode == 0
    up = _run(["pulumi", "up", "--yes", "--non-interactive", "--skip-preview"], program, env, timeout=900)
    try:
        assert up.returncode == 0, up.stdout[-4000:] + up.stderr[-4000:]
        outputs = json.loads(_run(["pulumi", "stack", "output", "--json"], program, env).stdout)
        assert outputs == {"jobOutcome": "Succeeded", "seedOutcome": "Complete"}
        assert judge.job_condition(live.get("pytorchjob", "mnist-r1", namespace)) == "Succeeded"
        assert all(value not in up.stdout + up.stderr for value in secrets.values())
        exported = json.loads(_run(["pulumi", "stack", "export"], program, env).stdout)
        deployed = sorted(
            (r["type"], r["urn"].rsplit("::", 1)[1])
            for r in exported["deployment"]["resources"]
            if r["type"].startswith("kubernetes:") and r.get("custom")
        )
        offline = render(
            as_stack("offline", {**config, "ddp-mnist:stackRole": "job", **_secret_keys(secrets)})
        )
        assert deployed == sorted(
            (r.type, r.name) for r in offline.registrations if r.custom and r.type.startswith("kubernetes:")
        )
    finally:
        if not KEEP:
            _run(
                ["pulumi", "destroy", "--yes", "--non-interactive", "--skip-preview"],
                program,
                env,
                timeout=900,
            )


def _secret_keys(secrets: dict[str, str]) -> dict[str, str]:
    return {f"ddp-mnist:{key}": value for key, value in secrets.items()}
