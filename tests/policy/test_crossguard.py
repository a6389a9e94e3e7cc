"""The guardrails as CrossGuard policies: built without an engine, fed resources the way the engine
feeds them (property proxies), and served by the real pack over the analyzer gRPC protocol."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("pulumi_policy")

import crossguard  # noqa: E402
import guardrails as g  # noqa: E402
from pulumi_policy import (  # noqa: E402
    EnforcementLevel,
    StackValidationPolicy,
)
from pulumi_policy.proxy import UnknownValueError  # noqa: E402

from infra.program.common import yamlio
from infra.stackconfig import ROOT, STAND_IN_DIGEST  # noqa: E402
from tests.policy.conftest import (  # noqa: E402
    ALL_STACKS,
    STACKS,
    job_of,
    stack_objects,
    stack_resources,
    templates_of,
)
from tests.policy.feeding import (  # noqa: E402
    mandatory_policies,
    policies_by_name,
    reported_by_pack,
    stack_violations_of,
    type_token,
    urn_of,
    violations_of,
)

UNKNOWN_STRING = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"  # the engine's marker of a not-yet-known string


def test_policies_are_mandatory_but_one_advisory_and_named():
    policies = policies_by_name()
    assert set(policies) == {
        "workloads-understood",
        "gpu-limits-match-processes",
        "images-pinned",
        "images-by-digest",
        "shared-claims-read-write-many",
        "pod-security-restricted",
        "no-secret-literals-in-env",
        "requests-and-limits-set",
        "job-size-within-budget",
        "no-automounted-token",
        "images-from-allowed-registries",
    }
    assert set(policies) - set(mandatory_policies()) == {"images-by-digest"}
    assert policies["images-by-digest"].enforcement_level == EnforcementLevel.ADVISORY
    # Stack policies: the budget reads a TrainJob's runtime, another resource.
    assert {n for n, p in policies.items() if isinstance(p, StackValidationPolicy)} == {
        "shared-claims-read-write-many",
        "job-size-within-budget",
    }
    budget = policies["job-size-within-budget"].config_schema
    assert budget is not None
    assert {k: v.get("default") for k, v in budget.properties.items()} == {
        "excludeNamespaces": ["kubeflow", "kubeflow-system", "kserve", "kube-system"],
        "platformComponents": [
            "kubernetes:helm.sh/v3:Chart",
            "kubernetes:helm.sh/v4:Chart",
            "kubernetes:kustomize:Directory",
            "kubernetes:kustomize/v2:Directory",
            "kubernetes:yaml:ConfigFile",
            "kubernetes:yaml:ConfigGroup",
            "kubernetes:yaml/v2:ConfigFile",
            "kubernetes:yaml/v2:ConfigGroup",
            "ddp-mnist:platform:NvidiaDevicePlugin",
        ],
        "maxNodes": 16,
        "maxGpus": 64,
    }


@pytest.mark.parametrize("stack", ALL_STACKS)
def test_every_stack_passes_every_mandatory_policy(stack):
    """Job, platform and prerequisites stacks, each resource with the URN the engine gives it."""
    resources = stack_resources(stack)
    for policy in mandatory_policies().values():
        if isinstance(policy, StackValidationPolicy):
            assert stack_violations_of(policy, resources) == [], policy.name
            continue
        for urn, obj in resources:
            assert violations_of(policy, obj, stack=stack, urn=urn) == [], (policy.name, urn)


TRAINER = "ghcr.io/ddp-mnist/trainer:0.1.0"


@pytest.mark.parametrize("stack", STACKS)
def test_a_trainer_image_by_tag_is_advised_outside_dev(stack):
    """The trainer by tag is advised in each stack, as itself, except dev (the stacks that require a
    digest render with the offline stand-in's, put back to the tag here)."""
    advisory = policies_by_name()["images-by-digest"]
    objects = stack_objects(stack)
    for obj in objects:
        _pin(obj, TRAINER, tagged=f"{TRAINER}@{STAND_IN_DIGEST}")
    containers = [
        (t.where, c)
        for o in objects
        for t in g.pod_templates(o)
        for c in t.spec["containers"]
        if "@sha256:" not in c["image"]
    ]
    assert {c["image"] for _, c in containers} == {TRAINER}
    expected = [
        f"{where}: container {c['name']} image {TRAINER} has no @sha256 digest, and a tag can be "
        "re-pushed; set the digest a release names (docs/RELEASE.md)"
        for where, c in containers
    ]
    reported = [m for o in objects for m in violations_of(advisory, o, stack=stack)]
    assert reported == ([] if stack == "dev" else expected)
    assert [m for o in objects for m in violations_of(advisory, o, stack="staging")] == expected
    exempt = {"exemptStacks": ["dev", "staging"]}
    assert [m for o in objects for m in violations_of(advisory, o, exempt, stack="staging")] == []


def test_a_trainer_image_by_digest_is_not_advised():
    advisory = policies_by_name()["images-by-digest"]
    objects = stack_objects("gke-gpu")
    for obj in objects:
        _pin(obj, f"{TRAINER}@sha256:{'e' * 64}")
    assert [o for o in objects if violations_of(advisory, o, stack="gke-gpu")] == []


def _pin(value, pinned, tagged=TRAINER):
    """Every container of a rendered object that runs the trainer as `tagged` runs `pinned` instead."""
    if isinstance(value, dict):
        if value.get("image") == tagged:
            value["image"] = pinned
        for child in value.values():
            _pin(child, pinned, tagged)
    elif isinstance(value, list):
        for child in value:
            _pin(child, pinned, tagged)


CLOUD_CONFIG = ROOT / "policy" / "cloud.json"


@pytest.mark.parametrize("stack", [s for s in ALL_STACKS if s not in ("dev", "dev-prereqs")])
def test_with_the_cloud_config_images_by_digest_is_mandatory_and_every_cloud_stack_meets_it(stack):
    """policy/cloud.json, what the deploy workflows run the pack with, makes the digest rule
    mandatory; every cloud stack then passes it (its job stacks with the digest they require, here the
    offline stand-in's), and the same trainer by tag is refused."""
    config = json.loads(CLOUD_CONFIG.read_text())
    assert config == {"images-by-digest": "mandatory"}
    policy = policies_by_name()["images-by-digest"]
    objects = stack_objects(stack)
    assert [m for o in objects for m in violations_of(policy, o, stack=stack)] == []
    tagged = [o for o in objects if "@" + STAND_IN_DIGEST in json.dumps(o)]
    for obj in tagged:
        _pin(obj, TRAINER, tagged=f"{TRAINER}@{STAND_IN_DIGEST}")
    assert bool([m for o in tagged for m in violations_of(policy, o, stack=stack)]) == bool(tagged)


def test_the_stack_comes_from_the_urn():
    assert (
        crossguard.stack_of("urn:pulumi:gke-gpu::ddp-mnist::kubernetes:batch/v1:Job::mnist-r1") == "gke-gpu"
    )
    assert crossguard.stack_of("urn:pulumi:dev::ddp-mnist::pulumi:pulumi:Stack::ddp-mnist-dev") == "dev"


def test_violations_reach_report_violation():
    job = job_of(stack_objects("eks-gpu"))
    for template in templates_of(job):
        template["spec"]["containers"][0]["image"] = "ghcr.io/ddp-mnist/trainer:latest"
        template["spec"]["hostNetwork"] = True
    policies = policies_by_name()
    assert violations_of(policies["images-pinned"], job) == [
        "Job mnist-r1: container pytorch image ghcr.io/ddp-mnist/trainer:latest uses :latest, which moves; "
        "pin a version tag or an @sha256 digest"
    ]
    assert violations_of(policies["pod-security-restricted"], job) == [
        "Job mnist-r1: host namespaces (hostNetwork=true) (restricted: hostNamespaces)"
    ]


def test_policy_config_overrides_the_budget():
    budget = policies_by_name()["job-size-within-budget"]
    resources = stack_resources("eks-gpu")
    job_urn = next(
        urn for urn, obj in resources if obj["kind"] == "Job" and obj["metadata"]["name"] == "mnist-r1"
    )
    assert stack_violations_of(budget, resources) == []
    over = [(job_urn, "Job mnist-r1 uses 8 GPUs; this platform allows at most 4 per job")]
    assert stack_violations_of(budget, resources, {"maxGpus": 4}) == over
    # The budget reads training jobs and runtimes only: a value not known yet elsewhere (a Secret's,
    # during a preview) does not stop it.
    next(obj for _, obj in resources if obj["kind"] == "Secret")["data"] = {"key": UNKNOWN_STRING}
    assert stack_violations_of(budget, resources, {"maxGpus": 4}) == over


def test_unknown_values_are_left_to_the_sdk():
    """During a preview an input may not be known yet: the SDK reports that instead of a violation."""
    job = job_of(stack_objects("dev"))
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["image"] = (
        UNKNOWN_STRING
    )
    with pytest.raises(UnknownValueError):
        violations_of(policies_by_name()["images-pinned"], job)


def test_type_tokens_become_api_versions():
    assert crossguard.k8s_object("kubernetes:core/v1:Pod", {})["apiVersion"] == "v1"
    assert crossguard.k8s_object("kubernetes:kubeflow.org/v1:PyTorchJob", {})["kind"] == "PyTorchJob"
    assert crossguard.k8s_object("pulumi:providers:kubernetes", {}) is None
    assert crossguard.k8s_object("aws:s3/bucket:Bucket", {}) is None
    patch = {"kind": "Deployment", "metadata": {"name": "training-operator", "namespace": "ml-platform"}}
    assert crossguard.k8s_object("kubernetes:apps/v1:DeploymentPatch", patch) is None


def test_shared_claims_policy_blames_the_claim():
    objects = stack_objects("gke-gpu")
    claim = next(o for o in objects if o["metadata"]["name"] == "ddp-mnist-checkpoints")
    claim["spec"]["accessModes"] = ["ReadWriteOnce"]
    reported = stack_violations_of(
        policies_by_name()["shared-claims-read-write-many"], [(urn_of(o), o) for o in objects]
    )
    assert reported == [
        (
            urn_of(claim),
            # The 4 training pods write; the 2 server replicas read the job's SHA256SUMS.
            "PersistentVolumeClaim ddp-mnist-checkpoints is mounted by 6 pods (4 writing) but its "
            "accessModes are ['ReadWriteOnce']; a shared claim must be ReadWriteMany",
        )
    ]


def test_pack_files():
    pack = yamlio.load((ROOT / "policy" / "PulumiPolicy.yaml").read_text())
    assert pack["runtime"] == {"name": "python", "options": {"virtualenv": ".venv"}}
    assert pack["version"] == "0.1.0"
    lines = (ROOT / "policy" / "requirements.txt").read_text().splitlines()
    assert "-c ../constraints.txt" in lines, "the pack's environment installs the locked closure"
    pins = dict(line.split("==") for line in lines if "==" in line and not line.startswith("#"))
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert pins["pulumi-policy"] == "1.21.0"
    assert f'"pulumi=={pins["pulumi"]}"' in pyproject, "the pack and the program pin the same pulumi"


@pytest.mark.slow
def test_the_pack_serves_the_analyzer_protocol():
    """Runs the pack as the CLI does (the directory as a program) and talks to it over gRPC."""
    grpc = pytest.importorskip("grpc")
    from google.protobuf import empty_pb2, struct_pb2
    from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc

    server = subprocess.Popen(
        [sys.executable, "-u", str(ROOT / "policy")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = server.stdout.readline().strip()
        assert port.isdigit(), server.stderr.read() if server.poll() is not None else port
        stub = analyzer_pb2_grpc.AnalyzerStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
        info = stub.GetAnalyzerInfo(empty_pb2.Empty(), timeout=30)
        assert info.name == crossguard.PACK_NAME
        assert sorted(p.name for p in info.policies) == sorted(policies_by_name())
        job = job_of(stack_objects("eks-gpu"))
        _pin(job, TRAINER, tagged=f"{TRAINER}@{STAND_IN_DIGEST}")  # by tag, as a stack without the rule
        container = job["spec"]["template"]["spec"]["containers"][0]
        container["env"].append({"name": "HF_TOKEN", "value": "canary-Token-Value-5e4d3c"})
        # Numbers arrive as doubles: a GPU limit written as the number 2 must still be counted.
        container["resources"]["limits"]["nvidia.com/gpu"] = container["resources"]["requests"][
            "nvidia.com/gpu"
        ] = 2
        props = struct_pb2.Struct()
        props.update(job)
        response = stub.Analyze(
            analyzer_pb2.AnalyzeRequest(
                type=type_token(job), properties=props, urn=urn_of(job, "eks-gpu"), name="mnist-r1"
            ),
            timeout=30,
        )
        levels = analyzer_pb2.EnforcementLevel
        assert [
            (d.policyName, levels.Name(d.enforcementLevel), d.message.splitlines()[-1])
            for d in response.diagnostics
        ] == [
            (
                "gpu-limits-match-processes",
                "MANDATORY",
                "Job mnist-r1: 2 nvidia.com/gpu per pod for 4 processes per node; "
                "set the GPU limit equal to the processes per node (one GPU per process)",
            ),
            (
                "images-by-digest",
                "ADVISORY",
                "Job mnist-r1: container pytorch image ghcr.io/ddp-mnist/trainer:0.1.0 has no @sha256 "
                "digest, and a tag can be re-pushed; set the digest a release names (docs/RELEASE.md)",
            ),
            (
                "no-secret-literals-in-env",
                "MANDATORY",
                "Job mnist-r1: container pytorch env HF_TOKEN has a literal value that looks secret; "
                "use valueFrom.secretKeyRef",
            ),
        ]
        assert "canary-Token-Value-5e4d3c" not in str(response)
    finally:
        server.kill()
        server.wait(timeout=30)


def test_the_platforms_upstream_installs_are_skipped_in_their_namespaces_and_refused_without_them():
    """gke-platform applies the training operator, Trainer v2 with JobSet and KServe from the vendored
    manifests (their objects under the kustomize Directory and yaml/v2 ConfigFile, platformComponents):
    the pack passes them in excludeNamespaces, and with nothing excluded refuses what
    policy/crossguard.py says upstream's manifests hold."""
    resources = stack_resources("gke-platform")
    upstream = [(urn, obj) for urn, obj in resources if "-manifests:" in urn.rsplit("::", 1)[-1]]
    assert len(upstream) == 14 + 35 + 38  # KServe's less the components the bundle never uses
    assert reported_by_pack(upstream, stack="gke-platform") == []
    nothing_excluded = {"excludeNamespaces": []}
    reported = reported_by_pack(upstream, config=nothing_excluded, stack="gke-platform")
    found = sorted(
        (policy, message.split(":", 1)[0])
        for policy, message in reported
        if policy not in ("no-automounted-token", "images-from-allowed-registries")
    )
    # Every upstream controller mounts its token (it calls the API server) and comes from its project's
    # own registry, by tag.
    controllers = {
        "Deployment jobset-controller-manager",
        "Deployment kserve-controller-manager",
        "Deployment kubeflow-trainer-controller-manager",
        "Deployment training-operator",
    }
    for policy in ("no-automounted-token", "images-from-allowed-registries"):
        assert {m.split(":", 1)[0] for p, m in reported if p == policy} == controllers, policy
    assert found == [
        # The training operator meets both: the platform's transform
        # (infra/program/platform/training_operator.py).
        ("requests-and-limits-set", "Deployment kserve-controller-manager"),
        ("requests-and-limits-set", "Deployment kubeflow-trainer-controller-manager"),
        ("workloads-understood", "ClusterStorageContainer default"),
    ]
