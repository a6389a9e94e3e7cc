"""Where the README or docs state a value the code owns (exit codes, defaults, env values, stack lists,
ranges), the value is read from the code here and compared with what the text says."""

from __future__ import annotations

import json
import re
import tomllib
from typing import Any

import pytest

from infra.local import cli as local_cli
from infra.program.common.meta import JobNames
from infra.program.job import podspec
from infra.program.job.seed import seed_pod_template
from infra.program.settings import PROJECT, Settings
from infra.reference.policy import policies
from infra.stackconfig import ROOT, load_stack, stack_names
from tests.docs.pages import page, pages, section, table

README = (ROOT / "README.md").read_text()
TRAINER_PAGE = page("docs/reference/trainer.md")
CONTRIBUTING = page("CONTRIBUTING.md")
# Every hand-written page (the generated reference pages are checked against the code by their generator).
WRITTEN = "\n\n".join(p.read_text() for p in pages() if "reference" not in p.parts or p.name == "trainer.md")
BENCHMARKS = (ROOT / "docs" / "BENCHMARKS.md").read_text()


# --- trainer -------------------------------------------------------------------------------------


def test_checkpoints_kept_stated_equals_what_the_trainer_keeps():
    from trainer import checkpoint

    kept = re.findall(r"The newest (\d+)\s+checkpoints are kept", TRAINER_PAGE)
    assert [int(n) for n in kept] == [checkpoint.KEEP]


def test_nccl_async_error_handling_stated_equals_the_nccl_pods_env():
    settings = Settings(jobGpusPerNode=1, jobProcsPerNode=1)
    assert settings.backend == "nccl"
    names = JobNames(job="mnist-r1", service="mnist-r1", checkpoint_dir="/checkpoints/mnist-r1")
    template = podspec.pod_template(settings, names, data_claim="d", checkpoint_claim="c", secret_name=None)
    (container,) = template.spec.containers
    env = {e.name: e.value for e in container.env}
    for text in (TRAINER_PAGE, (ROOT / "trainer" / "peers.py").read_text()):
        stated = re.findall(r"TORCH_NCCL_ASYNC_ERROR_HANDLING=(\d+)", text)
        assert stated and set(stated) == {env["TORCH_NCCL_ASYNC_ERROR_HANDLING"]}


# --- config --------------------------------------------------------------------------------------


def _documented(value: Any) -> str:
    """A default as the README writes it."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return json.dumps(value)
    return str(value)


def _policy_defaults() -> dict[str, Any]:
    return {
        key: prop["default"]
        for policy in policies()
        if policy.config_schema is not None
        for key, prop in policy.config_schema.properties.items()
    }


# `key` (default V ...), `key: V` (the default), `key` (`V` by default, `key`: `V` (default)
DEFAULT_STATEMENTS = [
    r"`(\w+)`\s+\((?:the\s+)?default\s+([^)]*)",
    r"`(\w+):\s+([^`]+)`\s+\(the\s+default",
    r"`(\w+)`\s+\(`([^`]+)`\s+by\s+default",
    r"`(\w+)`:\s+`([^`]+)`\s+\(default\)",
]


def test_every_default_the_readme_states_is_the_code_default():
    defaults = {f.alias: f.default for f in Settings.model_fields.values()} | _policy_defaults()
    stated = [
        (m.group(1), m.group(2).strip("`")) for p in DEFAULT_STATEMENTS for m in re.finditer(p, WRITTEN)
    ]
    assert len(stated) >= 10
    for key, text in stated:
        assert key in defaults, f"the docs state a default for {key}, which is no config key"
        assert _states(text, defaults[key]), (key, text, defaults[key])


def _states(text: str, default: Any) -> bool:
    """Whether `text` (what follows "default" in the README) begins with `default`, or, for a list
    written out in words, names each of its addresses."""
    value = " ".join(text.replace("`", "").split())
    if re.match(rf"{re.escape(_documented(default))}(?![\w.])", value):
        return True
    return (
        isinstance(default, list)
        and bool(default)
        and all(str(item).removesuffix("/32") in value for item in default)
    )


# --- stacks --------------------------------------------------------------------------------------


def test_every_stack_file_is_listed_in_the_layout_table():
    rows = table(section(CONTRIBUTING, "Layout"), "path")
    (listed,) = [row[1] for row in rows if row[0] == "`stacks/`"]
    assert set(re.findall(r"`([a-z0-9-]+)`", listed)) == set(stack_names())
    assert {p.name for p in (ROOT / "stacks").glob("Pulumi.*.yaml")} == {
        f"Pulumi.{s}.yaml" for s in stack_names()
    }


def test_what_the_readme_says_a_platform_stack_installs_is_its_config():
    for name in stack_names():
        values = load_stack(name).values
        if values.get(f"{PROJECT}:stackRole") != "platform":
            continue
        trainer = str(values.get(f"{PROJECT}:trainerInstall", False)).lower() == "true"
        for paragraph in WRITTEN.split("\n\n"):
            for sentence in re.split(r"(?<=\.)\s+(?=[A-Z*])", paragraph):
                if f"Pulumi.{name}.yaml`:" not in sentence:
                    continue
                description = sentence.split(f"Pulumi.{name}.yaml`:", 1)[1].split(")", 1)[0]
                assert ("Trainer v2" in description) == trainer, (name, description)
                assert "alone" not in description or not trainer, (name, description)


def test_every_recipe_a_stack_runs_is_one_the_benchmarks_measure():
    """(epochs, global batch) of each shipped stack: the default recipe (the trainer's own defaults,
    tests/infra/test_recipe.py, which the top of docs/BENCHMARKS.md measures), or a row of its GPU
    table ("3 epochs, batch 512 ...")."""
    fields = Settings.model_fields
    default = (fields["job_epochs"].default, fields["job_batch_size"].default)
    measured = {
        (int(e), int(b)) for e, b in re.findall(r"^\| (\d+) epochs?, batch (\d+)\b", BENCHMARKS, re.M)
    }
    for name in stack_names():
        values = load_stack(name).values
        ran = (
            int(values.get(f"{PROJECT}:jobEpochs", default[0])),
            int(values.get(f"{PROJECT}:jobBatchSize", default[1])),
        )
        assert ran == default or ran in measured, (name, ran, sorted(measured))


# --- seed Job, pins, policies --------------------------------------------------------------------


def test_seed_job_resources_stated_equal_the_rendered_container():
    (stated,) = re.findall(
        r"it requests\s+`(\S+)`\s+CPU\s+and\s+`(\S+)`\s+memory,\s+with\s+a\s+`(\S+)`\s+memory\s+limit",
        section(page("docs/how-to/write-a-stack.md"), "Training data: the seed Job"),
    )
    template = seed_pod_template(Settings(), "data", None, None)
    (container,) = template.spec.containers
    resources = container.resources
    assert stated == (resources.requests["cpu"], resources.requests["memory"], resources.limits["memory"])
    assert set(resources.limits) == {"memory"}


def test_packages_pinned_by_pyproject_alone_are_in_pyproject():
    from constraints.lock import TORCH

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pinned = {
        re.split(r"[=<>!~ \[]", dep, maxsplit=1)[0].lower()
        for deps in pyproject["project"]["optional-dependencies"].values()
        for dep in deps
    }
    (claim,) = re.findall(r"([^.;]*?)\s+are pinned by\s+`pyproject\.toml`\s+alone", CONTRIBUTING)
    named = {w for w in re.findall(r"[a-z][a-z0-9_-]*", claim) if w in TORCH}
    assert named and named <= pinned, (claim, named - pinned)


# --- command-line tools --------------------------------------------------------------------------


def test_every_local_scheduler_flag_is_in_the_tutorials_usage():
    tutorial = section(page("docs/tutorials/local-run.md"), "Other stacks and options")
    (usage,) = re.findall(r"```text\n(.*?)```", tutorial, re.S)
    flags = {f for action in local_cli.build_parser()._actions for f in action.option_strings}
    assert flags - {"-h", "--help"} <= set(re.findall(r"--[a-z][a-z-]*", usage))


@pytest.mark.slow
def test_a_failed_seed_job_exits_the_local_scheduler_with_the_code_its_table_gives(tmp_path):
    """The dev stack's seed Job against a real S3 server that rejects its keys: exit 4, no retry."""
    from infra.local.s3 import local_s3

    (code,) = [c for c, meaning in local_cli.EXIT_CODE_MEANINGS.items() if "seed" in meaning]
    with local_s3(tmp_path / "s3") as s3:
        argv = ["--stack", "dev", "--workdir", str(tmp_path / "work"), "--timeout", "120"]
        argv += ["--env", f"AWS_ENDPOINT_URL={s3.endpoint}"]
        argv += ["--env", "AWS_ACCESS_KEY_ID=wrong", "--env", "AWS_SECRET_ACCESS_KEY=wrong"]
        returned = local_cli.main(argv)
    volumes = tmp_path / "work" / "dev" / "pvc"
    assert not list((volumes / "ddp-mnist-data").rglob("*.gz"))  # nothing seeded
    assert not (volumes / "ddp-mnist-checkpoints" / "mnist-r1").exists()  # the training job never ran
    assert returned == code


JOB_DEPLOYER = re.compile(
    r"`ddp-mnist-job-deployer` \(a Role the platform stack creates in each team namespace\)"
    r"(.*?)No namespaces",
    re.S,
)


def resource_name(obj: dict) -> str:
    """An object's RBAC resource as the README names it: `plural` or `plural.group`."""
    kind = obj["kind"].lower()
    plural = kind[:-1] + "ies" if kind.endswith("y") else kind + ("es" if kind.endswith("s") else "s")
    group = obj["apiVersion"].rpartition("/")[0]
    return f"{plural}.{group}" if group else plural


def test_the_readme_names_the_rights_the_platform_gives_a_job_stack_and_no_other():
    """The CI page's list names exactly the resources of the rendered deployer Role and reader
    ClusterRole, the writable ones as writable (tests/infra/test_tenancy.py checks those cover what
    every job stack creates)."""
    from tests.infra.conftest import shipped

    role = JOB_DEPLOYER.search(section(page("docs/how-to/ci.md"), "Identities per environment"))
    assert role, "docs/how-to/ci.md: no ddp-mnist-job-deployer list"
    writes, _, reads = role.group(1).partition("`get`, `list`, `watch` on")
    granted = [
        o
        for o in shipped("gke-platform").objects
        if (o["kind"], o["metadata"]["name"], o["metadata"].get("namespace"))
        in (("Role", "ddp-mnist-job-deployer", "ddp-mnist"), ("ClusterRole", "ddp-mnist-job-reader", None))
    ]
    assert len(granted) == 2
    rules = [rule for o in granted for rule in o["rules"]]

    def names(writable: bool) -> set[str]:
        return {
            f"{r}.{g}" if g else r
            for rule in rules
            if ("create" in rule["verbs"]) == writable
            for g in rule["apiGroups"]
            for r in rule["resources"]
        }

    verbs = {"get", "list", "watch", "create", "update", "patch", "delete", "ddp-mnist-job-reader"}
    assert set(re.findall(r"`([a-z0-9.-]+)`", writes)) - verbs == names(True)
    assert set(re.findall(r"`([a-z0-9.-]+)`", reads)) - verbs == names(False)


# --- pins and who creates what -------------------------------------------------------------------

# How prose names a package pyproject.toml pins: "the pinned pulumi-kubernetes 4.25.0", "`pulumi-kubernetes`
# is pinned at 4.25.0", "the SDK is pinned at 3.272.0", "the pinned torch 2.13.0".
PIN_NAMES = {"pulumi-kubernetes": "pulumi-kubernetes", "SDK": "pulumi", "pulumi": "pulumi", "torch": "torch"}
PIN_CLAIM = re.compile(
    r"(?:the pinned `?(?P<a>pulumi-kubernetes|pulumi|torch)`? v?(?P<av>\d+\.\d+\.\d+))"
    r"|(?:`?(?P<b>pulumi-kubernetes|SDK|torch|pulumi)`? (?:is )?pinned at v?(?P<bv>\d+\.\d+\.\d+))"
)


def _pyproject_pins() -> dict[str, str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    deps = [*pyproject["project"].get("dependencies", [])]
    deps += [d for group in pyproject["project"]["optional-dependencies"].values() for d in group]
    return {m[1].lower(): m[2] for d in deps if (m := re.match(r"([A-Za-z0-9_.-]+)==([\d.]+)$", d))}


def test_a_version_quoted_as_our_pin_is_pyprojects_pin():
    """The class of claim that drifted (a provider pin quoted that pyproject.toml does not have): every
    version the prose calls pinned, for a package pyproject.toml pins, is that pin."""
    pins = _pyproject_pins()
    claims = [
        (PIN_NAMES[m["a"] or m["b"]], m["av"] or m["bv"])
        for m in PIN_CLAIM.finditer(" ".join(WRITTEN.split()))
    ]
    assert len(claims) >= 3, claims
    assert [(name, version) for name, version in claims if pins[name] != version] == []


def test_the_pulumi_cli_version_the_docs_name_is_one_a_workflow_or_the_tier_runs():
    from infra.localcluster.parts import PULUMI_VERSION

    workflows = "\n".join(p.read_text() for p in (ROOT / ".github" / "workflows").glob("*.yml"))
    run = set(re.findall(r"pulumi-version: (\d+\.\d+\.\d+)", workflows)) | {PULUMI_VERSION}
    prose = " ".join(f"{WRITTEN}\n{CONTRIBUTING}".split())
    named = set(re.findall(r"Pulumi CLI[^.]{0,40}?\b(\d+\.\d+\.\d+)", prose))
    assert named and named <= run, (named, run)


def _created_classes(stack: str) -> set[str]:
    from tests.infra.conftest import shipped

    return {o["metadata"]["name"] for o in shipped(stack).objects if o["kind"] == "StorageClass"}


def test_the_stack_clouds_md_says_creates_the_storage_classes_creates_them_and_no_other_does():
    """ "`gke-platform` creates the Filestore classes (...): `a` and `b`" against the rendered stacks; the
    job stacks the page says name them create none."""
    text = " ".join(page("docs/CLOUDS.md").split())
    said = re.findall(
        r"`([a-z]+-platform)` creates the [A-Za-z ]+ classes \(.*?\)[:,]? `([a-z-]+)` and `([a-z-]+)`", text
    )
    assert {stack for stack, *_ in said} == {"gke-platform", "eks-platform", "aks-platform"}
    for stack, *classes in said:
        assert _created_classes(stack) == set(classes), stack
    named = re.findall(r"`([a-z]+-gpu)` names them", text)
    assert set(named) == {"eks-gpu", "aks-gpu"}
    for stack in [*named, "gke-gpu", "gke-trainjob"]:
        assert _created_classes(stack) == set(), stack


def test_what_a_run_can_hold_at_most_is_each_gpu_stacks_config_and_every_one_waits():
    """docs/CLOUDS.md's worst-case table against the stacks: nodes, GPUs, deadline, retries, and the
    node-hours the deadline allows; a GPU stack that does not wait for its run fails."""
    fields = Settings.model_fields

    def value(values: dict[str, Any], key: str, field: str) -> Any:
        return values.get(f"{PROJECT}:{key}", fields[field].default)

    rows = {row[0]: row[1:] for row in table(page("docs/CLOUDS.md"), "Stack")}
    gpu_stacks = set()
    for name in stack_names():
        values = load_stack(name).values
        gpus = int(value(values, "jobGpusPerNode", "job_gpus_per_node"))
        if values.get(f"{PROJECT}:stackRole") == "platform" or not gpus:
            continue
        gpu_stacks.add(f"`{name}`")
        nodes = int(value(values, "jobNodes", "job_nodes"))
        deadline = int(value(values, "jobActiveDeadlineSeconds", "job_active_deadline_seconds"))
        retries = int(value(values, "jobBackoffLimit", "job_backoff_limit"))
        assert str(value(values, "jobWait", "job_wait")).lower() == "true", name
        assert rows[f"`{name}`"] == [
            str(nodes),
            str(nodes * gpus),
            f"{deadline} s",
            str(retries),
            f"{nodes * deadline // 3600} node-hours",
        ], name
    assert set(rows) == gpu_stacks
