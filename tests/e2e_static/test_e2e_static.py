"""The cluster tier (tests/e2e), checked without a cluster: it stays out of `make test`, refuses to run
without its prerequisites, every object it applies passes the upstream schemas, and the helpers that
judge live objects are right on recorded ones."""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import kubernetes_validate
import pulumi
import pytest

from infra.program.common import yamlio
from infra.program.settings import PROJECT_ROOT
from infra.program.settings.prerequisites import MINIO_IMAGE, NFS_CSI_CHART, NFS_SERVER_IMAGE
from infra.review.admission import Namespace, admit
from infra.review.crd import crd_validator
from infra.review.effective import EffectivePod
from infra.review.manifest import RecordingMocks, _RecordingMonitor, normalise
from infra.review.render import is_builtin, unchecked_kinds, validation_errors
from infra.stackconfig import ROOT
from tests import conftest as root_conftest
from tests.e2e import judge, live, project
from tests.e2e.fixtures import cluster
from tests.e2e.image import image_reference
from tests.e2e.model import modelled, modelled_pod, rendered
from tests.e2e.preflight import missing_prerequisite
from tests.e2e.stacks import indexed_config, job_config, platform_config, prerequisites_config, seed_config

RECORDED = Path(__file__).parent / "recorded"
CRDS = ROOT.parent / "shared" / "k8s" / "crds"
VERSION = "1.33.0"  # the kind node image's Kubernetes (.github/workflows/e2e-kind.yml)
LIVE_WORKER = yamlio.load((RECORDED / "mnist-r1-worker-0.yaml").read_text())
IMAGE = LIVE_WORKER["spec"]["containers"][0]["image"]
KEYS = ("e2eAKIA", "s3cr3t-e2e")
STACKS = {
    "e2e-prerequisites": prerequisites_config(IMAGE, *KEYS),
    "e2e-platform": platform_config(IMAGE),
    "e2e-job": job_config(IMAGE, *KEYS),
    "e2e-job-edited": job_config(IMAGE, *KEYS, jobCpuLimit="2"),
    "e2e-job-reattached": job_config(IMAGE, *KEYS, jobCpuLimit="2", reattachRetained="true"),
    "e2e-indexed": indexed_config(IMAGE, *KEYS),
    "e2e-indexed-edited": indexed_config(IMAGE, *KEYS, jobCpuLimit="2"),
    "e2e-seed-wrong-bucket": seed_config(IMAGE, *KEYS, bucket="mnist-missing"),
    "e2e-seed": seed_config(IMAGE, *KEYS, bucket="mnist"),
}


# --- the tier stays out of `make test` and refuses without a cluster --------------------------------


def test_the_default_run_never_collects_the_cluster_tier():
    def config(markexpr: str) -> pytest.Config:
        return SimpleNamespace(option=SimpleNamespace(markexpr=markexpr))  # type: ignore[return-value]

    assert root_conftest.pytest_ignore_collect(root_conftest.E2E_DIR, config("")) is True
    assert root_conftest.pytest_ignore_collect(root_conftest.E2E_DIR, config("not slow")) is True
    assert root_conftest.pytest_ignore_collect(root_conftest.E2E_DIR, config("e2e")) is None
    assert root_conftest.pytest_ignore_collect(root_conftest.E2E_DIR, config("e2e or slow")) is None
    assert root_conftest.pytest_ignore_collect(root_conftest.E2E_DIR, config("not e2e")) is True
    assert root_conftest.pytest_ignore_collect(root_conftest.E2E_DIR, config("slow and not e2e")) is True
    assert root_conftest.pytest_ignore_collect(ROOT / "tests" / "infra", config("")) is None


def _pytest(args: list[str], path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "PATH": path},
    )


@pytest.mark.slow
def test_without_the_pulumi_cli_the_tier_stops_at_once_with_one_line(tmp_path):
    result = _pytest(["-m", "e2e", "tests/e2e"], str(tmp_path))
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert result.returncode == pytest.ExitCode.USAGE_ERROR
    assert lines == [
        "ERROR: e2e: no Pulumi CLI on PATH (install the Pulumi CLI 3.272.0: "
        "curl -fsSL https://get.pulumi.com | sh -s -- --version 3.272.0)"
    ]


def _fake_tools(directory: Path, *names: str) -> str:
    for name in names:
        tool = directory / name
        tool.write_text("#!/bin/sh\nexit 0\n")
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return str(directory)


def test_without_a_reachable_cluster_the_tier_stops_with_the_context_it_tried(tmp_path):
    path = _fake_tools(tmp_path, "pulumi", "kubectl", "docker", "kind")

    def kubectl(argv: list[str]) -> subprocess.CompletedProcess[str]:
        if argv[1:] == ["get", "--raw", "/readyz"]:
            refused = (
                "The connection to the server 127.0.0.1:6443 was refused - did you specify the right host?"
            )
            return subprocess.CompletedProcess(argv, 1, "", f"E1124 15:00:00 memcache.go:265] x\n{refused}\n")
        return subprocess.CompletedProcess(argv, 0, "kind-kind\n", "")

    assert missing_prerequisite({"PATH": path}, kubectl) == (
        "e2e: no reachable cluster (kubeconfig context kind-kind: The connection to the server "
        "127.0.0.1:6443 was refused - did you specify the right host?)"
    )
    ready = functools.partial(subprocess.CompletedProcess, returncode=0, stdout="ok", stderr="")
    assert missing_prerequisite({"PATH": path}, lambda argv: ready(argv)) is None
    (tmp_path / "no-kind").mkdir()
    no_kind = _fake_tools(tmp_path / "no-kind", "pulumi", "kubectl", "docker")
    assert missing_prerequisite({"PATH": no_kind}, lambda argv: ready(argv)) == (
        "e2e: no kind on PATH to load the trainer image, and no E2E_IMAGE_REGISTRY to push it to"
    )
    assert (
        missing_prerequisite({"PATH": no_kind, "E2E_IMAGE_REGISTRY": "r.example"}, lambda a: ready(a)) is None
    )


@pytest.mark.slow
def test_the_tier_imports_and_collects_every_scenario(tmp_path):
    path = _fake_tools(tmp_path, "pulumi", "kubectl", "docker", "kind")  # kubectl answers: a cluster
    result = _pytest(["-m", "e2e", "--collect-only", "-q", "tests/e2e"], f"{path}:{os.environ['PATH']}")
    assert result.returncode == 0, result.stdout + result.stderr
    collected = [line.split("::")[-1] for line in result.stdout.splitlines() if "::" in line]
    assert sorted(collected) == [
        "test_1_a_fresh_job_stack_seeds_trains_and_exports",
        "test_2_an_edited_job_is_replaced_and_resumes",
        "test_3_destroy_keeps_the_claim_and_reattaching_resumes_the_same_run",
        "test_4_an_unawaited_indexed_job_is_replaced_without_already_exists",
        "test_5_a_failed_seed_fails_up_with_one_line_and_a_fixed_config_succeeds",
        "test_6_no_pod_refused_live_pods_match_the_model_and_ranks_met",
        "test_7_the_endpoint_answers_a_v2_request_with_the_models_predictions",
    ]


# --- every object the tier applies passes the upstream schemas ----------------------------------------


def _strict(obj: dict) -> list[str]:
    try:
        kubernetes_validate.validate(obj, VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{obj['kind']}/{obj['metadata']['name']}: {exc.message} at {'.'.join(map(str, exc.path))}"]
    return []


@pytest.mark.parametrize("name", sorted(STACKS))
def test_every_stack_under_test_renders_valid_objects_and_admitted_pods(name):
    rendering = rendered(name, STACKS[name])
    crd = CRDS / "kubeflow.org_pytorchjobs.yaml"
    assert validation_errors(rendering, "1.33", crd, CRDS) == []
    assert set(unchecked_kinds(rendering)) <= {"LocalQueue"}
    local_queue = crd_validator(CRDS / "kueue.x-k8s.io_localqueues.yaml", "v1beta2", strict=True)
    for obj in rendering.objects:
        if obj["kind"] == "LocalQueue":
            assert [e.message for e in local_queue.iter_errors(obj)] == []
    assert modelled(name, STACKS[name]).admission.refusals == []


@functools.cache
def _fixtures_program() -> tuple[RecordingMocks, dict]:
    """The fixtures program under the mock runtime: its registrations and its stack outputs."""
    mocks = RecordingMocks()
    pulumi.runtime.set_mocks(mocks, project="fixtures", stack="fixtures", monitor=_RecordingMonitor(mocks))
    outputs: dict = {}

    @pulumi.runtime.test
    def run() -> pulumi.Output:
        exported = cluster.resources(cluster.Fixtures(IMAGE, *KEYS))
        return pulumi.Output.all(**{k: pulumi.Output.from_input(v) for k, v in exported.items()}).apply(
            outputs.update
        )

    run()
    return mocks, outputs


def _fixtures_objects() -> list[dict]:
    """Every object the fixtures program writes itself (the chart's and Kueue's are upstream's)."""
    mocks, _ = _fixtures_program()
    return [
        normalise(r.inputs)
        for r in mocks.registrations
        if r.custom
        and r.type.startswith("kubernetes:")
        and "kind" in r.inputs
        and r.name.startswith(("minio", "nfs", "mnist", "clusterqueue", "resourceflavor"))
    ]


def test_the_fixture_objects_pass_the_strict_schemas():
    objects = _fixtures_objects()
    assert [e for o in objects if is_builtin(o) for e in _strict(o)] == []
    # Kueue's own kinds: no schema of ClusterQueue or ResourceFlavor is at hand here.
    assert sorted(o["kind"] for o in objects if not is_builtin(o)) == ["ClusterQueue", "ResourceFlavor"]


def test_the_fixtures_are_the_shipped_prerequisites_stack_plus_kueue():
    """Not a copy: the dev-prereqs stack's objects, as `pulumi up` of it creates them, with the tier's
    image and keys (the stack's name is the instance label), then Kueue's queue objects."""
    shipped = rendered("e2e-prerequisites", STACKS["e2e-prerequisites"]).objects
    instance = "app.kubernetes.io/instance"

    def unlabelled(obj: dict) -> dict:
        obj = copy.deepcopy(obj)
        for meta in (obj["metadata"], obj.get("spec", {}).get("template", {}).get("metadata", {})):
            meta.get("labels", {}).pop(instance, None)
        return obj

    key = lambda o: (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])  # noqa: E731
    ours = sorted((unlabelled(o) for o in _fixtures_objects() if is_builtin(o)), key=key)
    assert ours == sorted((unlabelled(o) for o in shipped), key=key)


def test_the_fixtures_pin_every_image_and_source_at_a_release():
    images = [
        c["image"]
        for o in _fixtures_objects()
        for c in o.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
    ]
    assert sorted(images) == sorted([NFS_SERVER_IMAGE, MINIO_IMAGE, IMAGE])
    assert all("@sha256:" in i for i in (NFS_SERVER_IMAGE, MINIO_IMAGE))
    assert "-4.11.0.tgz" in NFS_CSI_CHART and "/download/v0.19.2/" in cluster.KUEUE_MANIFESTS


def test_the_fixtures_program_registers_the_pinned_sources_and_the_objects_checked_here():
    mocks, outputs = _fixtures_program()
    by_type = {r.type: r for r in mocks.registrations}
    assert by_type["kubernetes:helm.sh/v4:Chart"].inputs["chart"] == str(PROJECT_ROOT / NFS_CSI_CHART)
    assert by_type["kubernetes:yaml/v2:ConfigFile"].inputs["file"] == cluster.KUEUE_MANIFESTS
    fill = next(r for r in mocks.registrations if r.name == "mnist-bucket-job")
    assert set(fill.options.dependencies) >= {"minio-deployment", "minio-service", "minio-secret"}
    queue = next(r for r in mocks.registrations if r.name == f"clusterqueue-{cluster.CLUSTER_QUEUE}")
    assert set(queue.options.dependencies) >= {"kueue", f"resourceflavor-{cluster.RESOURCE_FLAVOR}"}
    assert outputs["mnistBucket"] == f"s3://{cluster.BUCKET}/{cluster.PREFIX}"
    assert not any(KEYS[1] in str(v) or KEYS[0] in str(v) for v in outputs.values())


def test_the_reader_pod_is_valid_and_admitted_under_restricted():
    pod = live.reader_pod("ddp-mnist-e2e", IMAGE, {"ddp-mnist-checkpoints": "/checkpoints"})
    assert _strict(pod) == []
    admitted = admit(
        [EffectivePod("Pod/e2e-reader", "Pod", 0, 0, pod)], Namespace("ddp-mnist-e2e", "restricted")
    )
    assert admitted.refusals == []


# --- the helpers that judge live objects, on recorded ones --------------------------------------------


def _model_worker() -> dict:
    return modelled_pod(modelled("e2e-job", STACKS["e2e-job"]), "Worker")


def test_the_recorded_live_worker_matches_the_model():
    assert judge.pod_differences(LIVE_WORKER, _model_worker(), container="pytorch") == []


def test_a_live_worker_that_differs_from_the_model_is_named_line_by_line():
    live_pod = copy.deepcopy(LIVE_WORKER)
    init = live_pod["spec"]["initContainers"][0]
    del init["securityContext"]
    init["image"] = "alpine:3.10"
    env = live_pod["spec"]["containers"][0]["env"]
    next(e for e in env if e["name"] == "MASTER_ADDR")["value"] = "mnist-r1-master-0.other"
    env.append({"name": "PET_RDZV_BACKEND", "value": "c10d"})
    model = _model_worker()
    assert judge.pod_differences(live_pod, model, container="pytorch") == [
        'pod mnist-r1-worker-0: init container init-pytorch image is "alpine:3.10", modelled '
        + json.dumps(model["spec"]["initContainers"][0]["image"]),
        "pod mnist-r1-worker-0: init container init-pytorch securityContext is null, modelled "
        + json.dumps(model["spec"]["initContainers"][0]["securityContext"], sort_keys=True),
        'pod mnist-r1-worker-0: env MASTER_ADDR is "mnist-r1-master-0.other", modelled "mnist-r1-master-0"',
        "pod mnist-r1-worker-0: env PET_RDZV_BACKEND in the live pod but not modelled",
    ]
    live_pod["spec"]["initContainers"] = []
    assert judge.pod_differences(live_pod, model, container="pytorch")[0] == (
        "pod mnist-r1-worker-0: init containers [], modelled ['init-pytorch']"
    )


def test_field_refs_compare_equal_once_the_api_server_defaulted_their_api_version():
    model = {"name": "c", "env": [{"name": "I", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}
    stored = copy.deepcopy(model)
    stored["env"][0]["valueFrom"]["fieldRef"]["apiVersion"] = "v1"
    assert judge.env_of(stored) == judge.env_of(model)


def test_refused_pod_creations_come_from_both_controllers_events():
    events = yamlio.load((RECORDED / "events.yaml").read_text())["items"]
    refused = judge.refused_pod_creations(events)
    assert [line.split(":", 1)[0] for line in refused] == ["PyTorchJob/mnist-r1", "Job/ddp-mnist-seed"]
    assert 'violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false' in refused[0]
    assert judge.refused_pod_creations([e for e in events if e["type"] == "Normal"]) == []


def test_an_export_verifies_only_when_every_listed_file_matches():
    files = {"model.pt": b"weights", "metrics.json": b'{"final_test_accuracy": 0.991}'}
    sums = "".join(f"{hashlib.sha256(data).hexdigest()}  {name}\n" for name, data in files.items())
    assert judge.sha256sums_problems(files, sums) == []
    assert judge.sha256sums_problems({**files, "model.pt": b"other"}, sums) == [
        "model.pt: sha256 differs from SHA256SUMS"
    ]
    assert judge.sha256sums_problems({"metrics.json": files["metrics.json"]}, sums) == [
        "model.pt: listed in SHA256SUMS but not exported"
    ]
    only_metrics = sums.splitlines()[1] + "\n"
    assert judge.sha256sums_problems(files, only_metrics) == ["SHA256SUMS does not list model.pt"]
    assert judge.final_accuracy(files["metrics.json"].decode()) == 0.991
    with pytest.raises(ValueError, match="no final_test_accuracy"):
        judge.final_accuracy("{}")


def test_conditions_restarts_and_error_lines_are_read_as_written():
    job = {
        "status": {
            "conditions": [{"type": "Created", "status": "True"}, {"type": "Failed", "status": "True"}]
        }
    }
    assert judge.job_condition(job) == "Failed"
    assert judge.job_condition({"status": {}}) is None
    assert judge.restarts_recorded(json.dumps({"restarts": [{"at": 1}, {"at": 2}]})) == 2
    message = (
        "Job ddp-mnist-seed failed (PodFailurePolicy): Container seed for pod "
        "ddp-mnist-e2e-seed/ddp-mnist-seed-abcde failed with exit code 3; its pods' logs: kubectl ..."
    )
    out = (
        "Updating (e2e-seed):\n"
        f" +  pulumi:pulumi:Stack ddp-mnist-e2e-seed creating (12s) error: {message}\n"
        "Diagnostics:\n  pulumi:pulumi:Stack (ddp-mnist-e2e-seed):\n"
        f"    error: {message}\n"
    )
    assert judge.messages(out, r"Job ddp-mnist-seed failed") == [message]
    assert judge.messages(
        out + "    error: Job ddp-mnist-seed failed (x)\n", "Job ddp-mnist-seed failed"
    ) == [
        message,
        "Job ddp-mnist-seed failed (x)",
    ]
    assert judge.messages(out, "AlreadyExists") == []


def test_v2_predictions_from_class_indices_or_scores():
    assert judge.v2_predictions({"outputs": [{"name": "o", "shape": [3], "data": [7, 2, 1]}]}) == [7, 2, 1]
    scores = {"outputs": [{"name": "o", "shape": [2, 3], "data": [0.1, 0.8, 0.1, 0.6, 0.3, 0.1]}]}
    assert judge.v2_predictions(scores) == [1, 0]
    with pytest.raises(ValueError):
        judge.v2_predictions({"outputs": []})


def test_the_image_reference_is_the_pushed_digest():
    pushed = (
        "The push refers to repository [localhost:5001/ddp-mnist/trainer]\n"
        "e2e-3f2a9c1d7b4e: digest: sha256:" + "5b" * 32 + " size: 4321\n"
    )
    assert image_reference("localhost:5001", pushed, "e2e-3f2a9c1d7b4e") == (
        "localhost:5001/ddp-mnist/trainer:e2e-3f2a9c1d7b4e@sha256:" + "5b" * 32
    )
    with pytest.raises(RuntimeError, match="printed no digest"):
        image_reference("localhost:5001", "denied", "e2e-x")


def test_the_automation_project_never_writes_into_the_repository(tmp_path):
    backend = project.Backend.create(tmp_path)
    work = project.project_dir(backend)
    settings = yamlio.load((work / "Pulumi.yaml").read_text())
    assert "stackConfigDir" not in settings
    assert settings["runtime"]["options"]["virtualenv"] == str(ROOT / ".venv-infra")
    assert settings["main"] == "infra/" and (work / "infra").resolve() == ROOT / "infra"
    assert backend.env["PULUMI_BACKEND_URL"] == (tmp_path / "state").as_uri()
    assert len(backend.env["PULUMI_CONFIG_PASSPHRASE"]) >= 24


# --- the workflow that runs the tier ------------------------------------------------------------------


def test_the_kind_workflow_runs_make_e2e_on_a_pinned_cluster_and_keeps_the_evidence():
    workflow = yamlio.load((ROOT / ".github" / "workflows" / "e2e-kind.yml").read_text())
    triggers = workflow.pop(True)  # YAML 1.1 reads the key `on` as true
    assert set(triggers) == {"push", "schedule", "workflow_dispatch"} and triggers["push"]["branches"] == [
        "main"
    ]
    steps = workflow["jobs"]["e2e"]["steps"]
    kind = next(s for s in steps if s.get("uses", "").startswith("helm/kind-action@"))
    node = kind["with"]["node_image"]
    assert node.startswith(f"kindest/node:v{VERSION.rsplit('.', 1)[0]}.") and "@sha256:" in node
    assert kind["with"]["registry"] is True
    assert kind["with"]["kubectl_version"] == "v" + node.split(":v", 1)[1].split("@", 1)[0]
    pins = dict(r.split("==") for r in project_file_extras()["infra"])
    cli = next(s for s in steps if s.get("name") == "Pulumi CLI")
    assert cli["with"] == {"pulumi-version": pins["pulumi"]}
    run = next(s for s in steps if s.get("name") == "make e2e")
    assert "make e2e" in run["run"] and run["shell"] == "bash"
    assert run["env"]["E2E_IMAGE_REGISTRY"] == "${{ steps.kind.outputs.LOCAL_REGISTRY }}"
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "failure()" and upload["with"]["path"] == "build/e2e"
    diagnostics = next(s for s in steps if s.get("name") == "Cluster events and pod logs")
    assert "kubectl get events -A" in diagnostics["run"] and "logs" in diagnostics["run"]


def project_file_extras() -> dict[str, list[str]]:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def test_the_job_stacks_point_at_the_fixtures():
    config = STACKS["e2e-job"]
    assert config["ddp-mnist:nfsServer"] == f"nfs-server.{cluster.NFS_NAMESPACE}.svc.cluster.local"
    assert config["ddp-mnist:nfsShare"] == "/"  # the server's NFSv4 root (fsid=0)
    assert config["ddp-mnist:minioEndpoint"] == f"minio.{cluster.MINIO_NAMESPACE}.svc.cluster.local:9000"
    assert (config["ddp-mnist:minioBucket"], config["ddp-mnist:minioPrefix"]) == (
        cluster.BUCKET,
        cluster.PREFIX,
    )
    assert STACKS["e2e-indexed"]["ddp-mnist:jobClusterQueue"] == cluster.CLUSTER_QUEUE
    kueue = rendered("e2e-indexed", STACKS["e2e-indexed"]).objects
    (queue,) = [o for o in kueue if o["kind"] == "LocalQueue"]
    assert queue["apiVersion"] == cluster.LOCAL_QUEUE_API
    (job,) = [o for o in kueue if o["kind"] == "Job" and o["metadata"]["name"] == "mnist-r1"]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "e2e"  # what scenario 4 reads live
    outputs = rendered("e2e-job", STACKS["e2e-job"]).outputs  # what scenario 1 reads
    assert (outputs["checkpointDir"], outputs["modelExport"]) == (
        "/checkpoints/mnist-r1",
        f"s3://{cluster.BUCKET}/{cluster.PREFIX}/models/mnist-r1",
    )
    assert (outputs["lineage"]["path"], outputs["lineage"]["s3"]) == (
        "/checkpoints/mnist-r1/lineage.json",
        f"s3://{cluster.BUCKET}/{cluster.PREFIX}/models/mnist-r1/lineage.json",
    )
    assert {c["ddp-mnist:namespace"] for c in STACKS.values() if "ddp-mnist:namespace" in c} == {
        "ddp-mnist-e2e",
        "ddp-mnist-e2e-indexed",
        "ddp-mnist-e2e-seed",
    }


def test_secret_values_are_never_shown_in_the_tiers_output():
    calls: list[dict] = []

    class Stack:
        def up(self, **kwargs):
            calls.append(kwargs)
            return SimpleNamespace(outputs={"seedOutcome": SimpleNamespace(value="Complete")})

        def destroy(self, **kwargs):
            calls.append(kwargs)

    assert project.up(Stack()) == {"seedOutcome": "Complete"}  # type: ignore[arg-type]
    project.destroy(Stack())  # type: ignore[arg-type]
    assert [c["show_secrets"] for c in calls] == [False, False]
    sources = "".join(p.read_text() for p in (ROOT / "tests" / "e2e").rglob("*.py") if p.name != "project.py")
    assert re.findall(r"\w+\.(?:up|destroy)\(", sources.replace("project.", "")) == []


def test_a_previews_replace_is_read_from_the_engines_events():
    from pulumi.automation.events import EngineEvent

    urn = "urn:pulumi:e2e-job::ddp-mnist::kubernetes:kubeflow.org/v1:PyTorchJob::trainer"
    event = EngineEvent.from_json(
        {
            "sequence": 12,
            "timestamp": 1764000000,
            "resourcePreEvent": {
                "metadata": {
                    "op": "replace",
                    "urn": urn,
                    "type": "kubernetes:kubeflow.org/v1:PyTorchJob",
                    "provider": "",
                    "keys": ["spec"],
                    "diffs": ["spec"],
                }
            },
        }
    )
    assert judge.planned_steps(event) == [("replace", "kubernetes:kubeflow.org/v1:PyTorchJob")]
    assert judge.planned_steps(EngineEvent.from_json({"sequence": 1, "timestamp": 0})) == []


@pytest.mark.parametrize("name", sorted(STACKS))
def test_every_config_value_the_tier_sets_passes_the_clis_project_type_check(name):
    """`pulumi config set-all` stores strings; the CLI accepts them for a project key of type boolean
    only as "true"/"false" and of type integer only when they parse as one (pulumi/pulumi
    sdk/go/common/workspace/project.go `ValidateConfigValue`)."""
    types = {
        f"ddp-mnist:{key}": spec.get("type") for key, spec in project.project_settings()["config"].items()
    }
    bad = [
        f"{key}={value!r} ({types.get(key)})"
        for key, value in STACKS[name].items()
        if types.get(key) not in ("string", "integer", "boolean")
        or (types[key] == "boolean" and value not in ("true", "false"))
        or (types[key] == "integer" and not re.fullmatch(r"[+-]?\d+", value))
    ]
    assert bad == []
