"""The pack refuses what it cannot read, and what it skips in excluded namespaces is only the platform's own:
every mandatory policy, through CrossGuard, on objects with the URNs the engine gives them."""

from __future__ import annotations

import copy
import json
import subprocess

import guardrails as g
import pytest

pytest.importorskip("pulumi_policy")

import crossguard  # noqa: E402

from infra.stackconfig import ROOT  # noqa: E402
from tests.infra.conftest import render_config  # noqa: E402
from tests.policy.conftest import ALL_STACKS, POLICY_DIR, resources_of, stack_objects, stack_resources  # noqa: E402
from tests.policy.feeding import reported_by_pack, urn_of  # noqa: E402

CANARY = "canary-Pass-Value-7f3a1c"
FIX = "run it as a kind the pack reads, or teach policy/workloads.py to read it"
# A pod that breaks the pod rules three ways: a privileged container with a hostPath volume, an untagged
# image, a literal password.
BAD_POD = {
    "metadata": {"labels": {"app": "x"}},
    "spec": {
        "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
        "containers": [
            {
                "name": "app",
                "image": "ghcr.io/acme/app",
                "securityContext": {"privileged": True},
                "env": [{"name": "DB_PASSWORD", "value": CANARY}],
                "resources": {
                    "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "8"},
                    "limits": {"memory": "1Gi", "nvidia.com/gpu": "8"},
                },
                "volumeMounts": [{"name": "host", "mountPath": "/host"}],
            }
        ],
    },
}


def _object(api, kind, spec, name="w"):
    return {"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": "team"}, "spec": spec}


def _alone(obj):
    return [(urn_of(obj), obj)]


# --- kinds the pack reads now ------------------------------------------------------------------

REPLICATION_CONTROLLER = _object("v1", "ReplicationController", {"replicas": 2, "template": BAD_POD}, "rc")
JOBSET = _object(
    "jobset.x-k8s.io/v1alpha2",
    "JobSet",
    {
        "replicatedJobs": [
            {"name": "workers", "replicas": 3, "template": {"spec": {"parallelism": 4, "template": BAD_POD}}}
        ]
    },
    "js",
)


@pytest.mark.parametrize(
    ("obj", "where"),
    [(REPLICATION_CONTROLLER, "ReplicationController rc"), (JOBSET, "JobSet js workers")],
    ids=["ReplicationController", "JobSet"],
)
def test_a_replication_controller_and_a_jobset_get_every_pod_rule(obj, where):
    reported = reported_by_pack(_alone(copy.deepcopy(obj)))
    assert (
        "images-pinned",
        f"{where}: container app image ghcr.io/acme/app is untagged (that means :latest); "
        "pin a version tag or an @sha256 digest",
    ) in reported
    assert (
        "no-secret-literals-in-env",
        f"{where}: container app env DB_PASSWORD has a literal value that looks secret; use "
        "valueFrom.secretKeyRef",
    ) in reported
    security = {
        m.rsplit("(restricted: ", 1)[1].rstrip(")") for p, m in reported if p == "pod-security-restricted"
    }
    assert {"privileged", "restrictedVolumes"} <= security
    assert CANARY not in str(reported)


def test_a_jobset_counts_against_the_budget():
    """3 Jobs of 4 pods with 8 GPUs each: 12 nodes and 96 GPUs."""
    assert g.job_size(JOBSET) == (12, 96)
    assert ("job-size-within-budget", "JobSet js uses 96 GPUs; this platform allows at most 64 per job") in (
        reported_by_pack(_alone(copy.deepcopy(JOBSET)))
    )


def test_the_pack_budgets_a_runtimes_defaults_and_what_a_trainjob_takes_from_them():
    """The runtime's 100 nodes of 8 GPUs are over the budget; so is the TrainJob that keeps them."""
    resources = stack_resources("gke-trainjob")
    (runtime,) = [o for _, o in resources if o["kind"] == "TrainingRuntime"]
    (trainjob,) = [o for _, o in resources if o["kind"] == "TrainJob"]
    runtime["spec"]["mlPolicy"]["numNodes"] = 100
    (rjob,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    node = rjob["template"]["spec"]["template"]["spec"]["containers"][0]["resources"]
    node["limits"]["nvidia.com/gpu"] = node["requests"]["nvidia.com/gpu"] = "8"
    del trainjob["spec"]["trainer"]["numNodes"], trainjob["spec"]["trainer"]["resourcesPerNode"]
    trainjob["spec"]["trainer"]["numProcPerNode"] = 8
    budget = sorted(m for p, m in reported_by_pack(resources) if p == "job-size-within-budget")
    assert budget == [
        "TrainJob mnist-r1 runs 100 nodes; this platform allows at most 16 per job",
        "TrainJob mnist-r1 uses 800 GPUs; this platform allows at most 64 per job",
        "TrainingRuntime mnist-r1 (what a TrainJob that keeps its defaults gets) runs 100 nodes; this "
        "platform allows at most 16 per job",
        "TrainingRuntime mnist-r1 (what a TrainJob that keeps its defaults gets) uses 800 GPUs; this "
        "platform allows at most 64 per job",
    ]


# --- kinds the pack does not read --------------------------------------------------------------

ARGO_WORKFLOW = {"templates": [{"name": "main", "container": {"image": "alpine", "command": ["sh"]}}]}


@pytest.mark.parametrize(
    ("api", "kind", "spec", "place"),
    [
        ("example.com/v1", "Widget", {"template": BAD_POD}, "the pod spec at spec.template.spec"),
        (
            "kubeflow.org/v1",
            "TFJob",
            {"tfReplicaSpecs": {"Worker": {"replicas": 2, "template": BAD_POD}}},
            "the pod spec at spec.tfReplicaSpecs.Worker.template.spec",
        ),
        (
            "batch.volcano.sh/v1alpha1",
            "Job",
            {"tasks": [{"name": "t", "template": BAD_POD}]},
            "the pod spec at spec.tasks[0].template.spec",
        ),
        (
            "example.com/v1",
            "Schedule",
            {"jobTemplate": {"spec": {"template": BAD_POD}}},
            "the pod spec at spec.jobTemplate.spec.template.spec",
        ),
        ("argoproj.io/v1alpha1", "Workflow", ARGO_WORKFLOW, "the container at spec.templates[0].container"),
    ],
    ids=["Widget", "TFJob", "volcano-Job", "jobTemplate", "Argo-Workflow"],
)
def test_a_kind_the_pack_does_not_read_is_refused(api, kind, spec, place):
    obj = _object(api, kind, copy.deepcopy(spec))
    assert reported_by_pack(_alone(obj)) == [
        (
            "workloads-understood",
            f"{kind} w: kind {api} {kind} is not understood by the policy pack: {place} would run unchecked; "
            f"{FIX}",
        )
    ]


def test_a_pod_spec_of_a_known_kind_in_a_place_the_pack_does_not_read_is_refused():
    """KServe's transformer makes pods the predictor reading does not see; so does a TrainJob's patch of
    its runtime's pods."""
    (isvc,) = [o for o in stack_objects("gke-gpu") if o["kind"] == "InferenceService"]
    isvc["spec"]["transformer"] = copy.deepcopy(BAD_POD["spec"])
    assert g.workloads_understood(isvc) == [
        f"InferenceService mnist-serve: spec.transformer is not understood by the policy pack: the pod spec "
        f"there would run unchecked; {FIX}"
    ]
    (trainjob,) = [o for o in stack_objects("gke-trainjob") if o["kind"] == "TrainJob"]
    patch = {"spec": {"volumes": [{"name": "host", "hostPath": {"path": "/"}}]}}
    trainjob["spec"]["runtimePatches"] = [
        {
            "manager": "me",
            "trainingRuntimeSpec": {
                "template": {
                    "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": patch}}}]}
                }
            },
        }
    ]
    (message,) = g.workloads_understood(trainjob)
    assert message.startswith(
        "TrainJob mnist-r1: spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0]"
        ".template.spec.template.spec is not understood by the policy pack"
    )


def test_a_helm_release_is_refused_and_manifest_components_are_no_objects():
    release = {"apiVersion": "helm.sh/v3", "kind": "Release", "metadata": {"name": "r"}, "spec": {}}
    ((policy, message),) = reported_by_pack(_alone(release))
    assert (policy, message.split(":", 2)[1]) == (
        "workloads-understood",
        " kind helm.sh/v3 Release is not understood by the policy pack",
    )
    for token in crossguard.MANIFEST_COMPONENTS:
        assert crossguard.k8s_object(token, {"values": {"containers": [{"image": "x"}]}}) is None


@pytest.mark.parametrize(
    "obj",
    [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "c"},
            "data": {"name": "n", "image": "i"},
        },
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}},
        _object(
            "image.toolkit.fluxcd.io/v1beta2",
            "ImageRepository",
            {"image": "ghcr.io/acme/app", "interval": "5m"},
        ),
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "versions": [
                    {
                        "name": "v1",
                        "schema": {
                            "openAPIV3Schema": {
                                "properties": {
                                    "containers": {"type": "array", "items": {"type": "object"}},
                                    "image": {"type": "string"},
                                    "name": {"type": "string"},
                                },
                                "required": ["containers"],
                            }
                        },
                    }
                ]
            },
        },
    ],
    ids=["ConfigMap", "Service", "Flux-ImageRepository", "CRD"],
)
def test_objects_that_make_no_pods_pass(obj):
    assert reported_by_pack(_alone(obj)) == []


# --- excluded namespaces -----------------------------------------------------------------------


def _with_latest_image(obj):
    for t in g.pod_templates(obj):
        t.spec["containers"][0]["image"] = "ghcr.io/ddp-mnist/trainer:latest"
    return obj


def test_a_stacks_own_workload_in_an_excluded_namespace_is_checked():
    """A stack whose namespace is `kubeflow` gets every rule there, as anywhere."""
    resources = resources_of(render_config({"namespace": "kubeflow"}))
    (job,) = [obj for _, obj in resources if obj["kind"] == "PyTorchJob"]
    assert reported_by_pack(resources) == []
    _with_latest_image(job)
    assert [p for p, _ in reported_by_pack(resources)] == ["images-pinned", "images-pinned"]


def test_what_the_platform_installs_there_is_not_checked():
    """An object of an upstream manifest (a child of the operator's kustomize Directory) in `kubeflow`
    is skipped; the same object as the program's own is not, nor with nothing excluded."""
    deployment = _with_latest_image(copy.deepcopy(REPLICATION_CONTROLLER))
    deployment.update(apiVersion="apps/v1", kind="Deployment")
    deployment["metadata"]["namespace"] = "kubeflow"
    installed = urn_of(
        deployment, parents=["ddp-mnist:operator:TrainingOperator", "kubernetes:kustomize/v2:Directory"]
    )
    assert reported_by_pack([(installed, deployment)]) == []
    assert reported_by_pack([(installed, deployment)], {"excludeNamespaces": []}) != []
    assert reported_by_pack([(urn_of(deployment), deployment)]) != []


@pytest.mark.parametrize("stack", ["aks-platform", "eks-platform"])
def test_the_device_plugin_is_skipped_only_as_the_platforms(stack):
    """The NVIDIA device plugin needs a hostPath and root in kube-system: skipped as the platform stack's
    component makes it, refused as a stack's own DaemonSet there."""
    resources = stack_resources(stack)
    ((urn, plugin),) = [(u, o) for u, o in resources if o["kind"] == "DaemonSet"]
    assert "::ddp-mnist:platform:NvidiaDevicePlugin$kubernetes:apps/v1:DaemonSet::" in urn
    assert reported_by_pack([(urn, plugin)]) == []
    controls = {
        m.rsplit("(restricted: ", 1)[1].rstrip(")") for _, m in reported_by_pack([(urn_of(plugin), plugin)])
    }
    assert controls == {"restrictedVolumes", "runAsNonRoot"}


# --- the pack in its own environment -----------------------------------------------------------

RULES = [
    "workloads_understood",
    "gpu_limits_match_processes",
    "images_pinned",
    "images_by_digest",
    "pod_security_restricted",
    "no_secret_literals_in_env",
    "requests_and_limits_set",
]
READER = """
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import guardrails as g
rules = [getattr(g, name) for name in json.loads(sys.argv[3])]
objects = json.load(sys.stdin)
found = [[m for r in rules for m in r(o)] + g.job_within_budget(o, 16, 64, objects) for o in objects]
print(json.dumps(found))
"""


def test_the_pack_reads_every_stack_in_its_own_environment():
    """The CLI runs the pack with policy/.venv (pulumi and pulumi-policy, none of the program's
    dependencies): every rule reads every stack's objects there, as here."""
    python = POLICY_DIR / ".venv" / "bin" / "python"
    # `make test` builds it (make test-fast does not, and then this test says so).
    if not python.exists():
        pytest.skip("no policy/.venv (make the pack's environment: docs/how-to/policy-pack.md)")
    objects = [o for stack in ALL_STACKS for o in stack_objects(stack)]
    assert {"InferenceService", "TrainJob", "PyTorchJob", "Deployment"} <= {o["kind"] for o in objects}
    done = subprocess.run(
        [str(python), "-c", READER, str(POLICY_DIR), str(ROOT), json.dumps(RULES)],
        input=json.dumps(objects),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rules = [getattr(g, name) for name in RULES]
    expected = [[m for r in rules for m in r(o)] + g.job_within_budget(o, 16, 64, objects) for o in objects]
    assert json.loads(done.stdout) == expected


# --- five objects the pack used to pass --------------------------------------------------------

RESTRICTED_POD = {
    "automountServiceAccountToken": False,
    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [
        {
            "name": "app",
            "image": "ghcr.io/ddp-mnist/trainer:0.1.0",
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
        }
    ],
}


def _pod(**changes):
    spec = copy.deepcopy(RESTRICTED_POD)
    spec.update(changes.pop("spec", {}))
    spec["containers"][0].update(changes)
    return _object("v1", "Pod", spec, "p")


def _trainjob_with_pod_level_patch():
    (trainjob,) = [o for o in stack_objects("gke-trainjob") if o["kind"] == "TrainJob"]
    pod = {
        "spec": {
            "securityContext": {"runAsUser": 0},
            "serviceAccountName": "admin",
            "tolerations": [{"operator": "Exists"}],
        }
    }
    trainjob["spec"]["runtimePatches"] = [
        {
            "manager": "me",
            "trainingRuntimeSpec": {
                "template": {
                    "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": pod}}}]}
                }
            },
        }
    ]
    return trainjob


def _privileged_nfs_server_elsewhere():
    (server,) = [
        o
        for o in stack_objects("dev-prereqs")
        if o["kind"] == "Deployment" and o["metadata"]["name"] == "nfs-server"
    ]
    return server


@pytest.mark.parametrize(
    ("make", "stack", "policy", "start"),
    [
        (
            lambda: _pod(spec={"automountServiceAccountToken": True}),
            "prod",
            "no-automounted-token",
            "Pod p: the pod mounts a service-account token (automountServiceAccountToken is true)",
        ),
        (
            lambda: _pod(image="registry.example.com/anything/app:1.0"),
            "prod",
            "images-from-allowed-registries",
            "Pod p: container app image registry.example.com/anything/app:1.0 is from registry.example.com, "
            "outside allowedRegistries",
        ),
        (
            _privileged_nfs_server_elsewhere,
            "team-a",
            "pod-security-restricted",
            "Deployment nfs-server: privileged",
        ),
        (
            _trainjob_with_pod_level_patch,
            "gke-trainjob",
            "workloads-understood",
            "TrainJob mnist-r1: spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0]"
            ".template.spec.template.spec is not understood",
        ),
        (
            lambda: _object(
                "example.com/v1", "Runner", {"image": "ghcr.io/ddp-mnist/trainer:0.1.0", "hostNetwork": True}
            ),
            "prod",
            "workloads-understood",
            "Runner w: kind example.com/v1 Runner is not understood by the policy pack: the pod spec at spec "
            "would run unchecked",
        ),
    ],
    ids=[
        "automounted-token",
        "any-registry",
        "privileged-namespace-of-another-stack",
        "trainjob-pod-level-patch",
        "unknown-kind-image-hostnetwork",
    ],
)
def test_the_pack_refuses_each_object_it_used_to_pass(make, stack, policy, start):
    obj = make()
    reported = reported_by_pack([(urn_of(obj, stack), obj)], stack=stack)
    assert any(p == policy and m.startswith(start) for p, m in reported), reported


def test_a_registry_entry_allows_what_is_under_it_or_one_repository():
    allowed = ["ghcr.io/ddp-mnist/", "docker.io/library/alpine"]
    assert g.registry_allowed("ghcr.io/ddp-mnist/trainer@sha256:" + "a" * 64, allowed)
    assert g.registry_allowed("alpine:3.20", allowed)  # Docker Hub's official image, spelled short
    assert g.registry_allowed("docker.io/library/alpine:3.20@sha256:" + "b" * 64, allowed)
    assert not g.registry_allowed("ghcr.io/ddp-mnist-evil/trainer:1", allowed)
    assert not g.registry_allowed("alpine-evil:1", allowed)
    assert not g.registry_allowed("acme/alpine:1", allowed)  # docker.io/acme/alpine
    assert not g.registry_allowed("localhost:5000/ddp-mnist/trainer:1", allowed)


def test_a_crd_whose_schema_names_pod_fields_is_no_pod_spec():
    """Found by the local tier's scenario 19, which feeds the engine's whole CRDs to the pack: a schema's
    properties are named like a pod's fields, with mappings as their values."""
    schema = {
        "type": "object",
        "properties": {"hostNetwork": {"type": "boolean"}, "serviceAccountName": {"type": "string"}},
    }
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "runners.example.com"},
        "spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": schema}}]},
    }
    assert g.workloads_understood(crd) == []
