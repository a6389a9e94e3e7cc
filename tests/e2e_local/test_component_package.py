"""The component package through the real engine, from a YAML program (docs/how-to/components.md):

- `pulumi package add <checkout>/infra/component`, as the page says, starts the provider through the
  Python language host, reads its schema and records the package in the program's Pulumi.yaml;
- a preview of the page's program registers the TrainingJob component and, as its descendants, every
  Kubernetes object the offline render of a job stack with the same config has;
- a bad input fails the preview with the page's line, the stack config's own.

The real engine, its Python language host, the YAML language host (pulumi-yaml) and the Kubernetes
provider, all built by the tier; no cluster: the preview's provider has none to read.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from infra.localcluster.build import binary
from infra.localcluster.parts import KUBERNETES_PROVIDER_VERSION
from infra.program.settings import PROJECT_ROOT
from infra.review.manifest import render
from tests.infra.conftest import stack_config

pytestmark = pytest.mark.e2e_local

PAGE = PROJECT_ROOT / "docs" / "how-to" / "components.md"


def _block(section: str, language: str) -> str:
    """The first code block of `language` under the page's heading `section`."""
    text = PAGE.read_text().split(f"## {section}\n", 1)[1]
    found = re.search(rf"```{language}\n(.*?)```", text, re.S)
    assert found, f"no {language} block under {section!r} in {PAGE}"
    return found.group(1)


def _engine(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    (tmp_path / "state").mkdir()
    env = {
        **os.environ,
        "PATH": os.pathsep.join(
            [str(binary("pulumi").parent), str(binary("pulumi-language-yaml").parent), os.environ["PATH"]]
        ),
        "PULUMI_HOME": str(home),
        "PULUMI_BACKEND_URL": (tmp_path / "state").as_uri(),
        "PULUMI_CONFIG_PASSPHRASE": "component-package-test",
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "KUBECONFIG": str(tmp_path / "no-cluster"),
    }
    plugin = binary("pulumi-resource-kubernetes")
    subprocess.run(
        [
            "pulumi",
            "plugin",
            "install",
            "resource",
            "kubernetes",
            KUBERNETES_PROVIDER_VERSION,
            "--file",
            str(plugin),
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    return env


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_a_yaml_program_adds_the_package_and_previews_the_job_stacks_objects(tmp_path):
    env = _engine(tmp_path)
    program = tmp_path / "program"
    program.mkdir()
    (program / "Pulumi.yaml").write_text(_block("A YAML program", "yaml"))
    (command,) = [line for line in _block("Add the package", "sh").splitlines() if line.strip()]
    added = _run(command.replace("<checkout>", str(PROJECT_ROOT)).split(), program, env)
    assert added.returncode == 0, added.stderr
    assert yaml.safe_load((program / "Pulumi.yaml").read_text())["packages"] == {
        "ddp-mnist": str(PROJECT_ROOT / "infra" / "component")
    }
    assert (program / "sdks" / "ddp-mnist").is_dir()
    assert _run(["pulumi", "stack", "init", "test"], program, env).returncode == 0

    preview = _run(["pulumi", "preview", "--json", "--non-interactive"], program, env)
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
    inputs = yaml.safe_load((program / "Pulumi.yaml").read_text())["resources"]["job"]["properties"]
    offline = render(stack_config({**inputs, "stackRole": "job"}))
    expected = sorted(
        (r.type, r.name) for r in offline.registrations if r.custom and r.type.startswith("kubernetes:")
    )
    assert ("kubernetes:kubeflow.org/v1:PyTorchJob", "trainer-job") in previewed
    assert previewed == expected
    assert all(
        under_component(urn) for urn, state in states.items() if state["type"].startswith("kubernetes:")
    )


def test_a_bad_input_fails_the_preview_with_the_pages_line(tmp_path):
    env = _engine(tmp_path)
    program = tmp_path / "program"
    program.mkdir()
    document = yaml.safe_load(_block("A YAML program", "yaml"))
    document["resources"]["job"]["properties"]["jobNodes"] = 0
    (program / "Pulumi.yaml").write_text(yaml.safe_dump(document))
    (command,) = [line for line in _block("Add the package", "sh").splitlines() if line.strip()]
    assert _run(command.replace("<checkout>", str(PROJECT_ROOT)).split(), program, env).returncode == 0
    assert _run(["pulumi", "stack", "init", "test"], program, env).returncode == 0
    preview = _run(["pulumi", "preview", "--non-interactive"], program, env)
    assert preview.returncode != 0
    line = re.search(r"`(property jobNodes with value 0 has a problem: [^`]*)`", PAGE.read_text())
    assert line, "the page quotes the error"
    assert line.group(1) in preview.stdout + preview.stderr
