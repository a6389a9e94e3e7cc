"""What the cluster does with the stack after the first `pulumi up`: edits, destroys, shared clusters,
network plugins as they are, Kueue. Each test reads the registration options Pulumi acts on."""

from __future__ import annotations

import pulumi
import pytest

from infra.program.platform.operator_ingress import policy_name
from infra.review.render import DEFAULT_CRD_DIR, unchecked_kinds, validation_errors
from tests.infra.conftest import PLATFORM_STACKS, by_kind, one, rendered, shipped

JOB_TYPES = {"pytorchjob": "kubernetes:kubeflow.org/v1:PyTorchJob", "indexed-job": "kubernetes:batch/v1:Job"}


def _registration(rendering, type_):
    (found,) = [r for r in rendering.registrations if r.type == type_]
    return found


@pytest.mark.parametrize("kind", sorted(JOB_TYPES))
def test_any_change_of_the_job_spec_is_a_delete_before_replace(kind):
    job = _registration(rendered({"jobKind": kind}), JOB_TYPES[kind])
    assert job.replace_on_changes == ("spec",)
    assert job.delete_before_replace is True


def test_a_destroy_keeps_the_checkpoint_claim_and_the_namespace_it_lives_in():
    rendering = rendered({})
    assert _registration(rendering, "kubernetes:core/v1:Namespace").retain_on_delete is True
    claims = {r.name: r for r in rendering.registrations if r.type.endswith("PersistentVolumeClaim")}
    assert claims["storage-checkpoints"].retain_on_delete is True
    assert claims["storage-data"].retain_on_delete is False
    released = rendered({"checkpointVolumeRetain": False})
    assert _registration(released, "kubernetes:core/v1:Namespace").retain_on_delete is False


def test_reattach_adopts_the_retained_namespace_and_claim():
    rendering = rendered({"namespace": "team-a", "reattachRetained": True})
    assert _registration(rendering, "kubernetes:core/v1:Namespace").import_id == "team-a"
    claims = {r.name: r for r in rendering.registrations if r.type.endswith("PersistentVolumeClaim")}
    assert claims["storage-checkpoints"].import_id == "team-a/ddp-mnist-checkpoints"
    assert claims["storage-data"].import_id == ""
    assert _registration(rendered({}), "kubernetes:core/v1:Namespace").import_id == ""


# What each platform stack installs: the operator v1 overlay, and on GKE Trainer v2's too.
COMPONENT = "app.kubernetes.io/component"
PLATFORM_INSTALLS = {
    "aks-platform": ["infra/manifests/training-operator"],
    "eks-platform": [],
    "gke-platform": [
        "infra/manifests/kserve/kserve.yaml",
        "infra/manifests/kubeflow-trainer",
        "infra/manifests/training-operator",
    ],
}


# ...and the post-install smoke check of each: its namespace, a PyTorchJob, and for Trainer v2 a TrainJob;
# on every one, the NetworkPolicy check (infra/program/platform/network_check.py).
NETWORK_CHECK = [
    "Service/network-smoke",
    "NetworkPolicy/ddp-mnist-smoke-network-open-in",
    "NetworkPolicy/ddp-mnist-smoke-network-open-out",
    "Job/network-smoke",
]
PLATFORM_SMOKE = {
    "aks-platform": [
        "Namespace/ddp-mnist-smoke",
        "NetworkPolicy/ddp-mnist-smoke",
        "PyTorchJob/operator-smoke",
        "DaemonSet/nvidia-device-plugin-daemonset",
        "Job/gpu-smoke",
        *NETWORK_CHECK,
    ],
    # No operator: the smoke check's GPU pod and the NetworkPolicy check alone.
    "eks-platform": [
        "PriorityClass/training-high",
        "DaemonSet/nvidia-device-plugin-daemonset",
        "Namespace/ddp-mnist-smoke",
        "NetworkPolicy/ddp-mnist-smoke",
        "Job/gpu-smoke",
        *NETWORK_CHECK,
    ],
    "gke-platform": [
        "Namespace/ddp-mnist-smoke",
        "NetworkPolicy/ddp-mnist-smoke",
        "PyTorchJob/operator-smoke",
        "TrainingRuntime/trainer-smoke",
        "TrainJob/trainer-smoke",
        *NETWORK_CHECK,
    ],
}


@pytest.mark.parametrize("name", PLATFORM_STACKS)
def test_a_platform_stack_installs_only_the_operators_their_smoke_check_and_the_gpu_plugin(name):
    rendering = shipped(name)
    # KServe's release manifest leaves its namespace out: the stack creates it.
    kserve = ["Namespace/kserve"] if rendering.settings.kserve_install else []
    objects = [
        o for o in rendering.objects if o["metadata"]["labels"].get(COMPONENT) not in ("tenancy", "storage")
    ]
    found = [f"{o['kind']}/{o['metadata']['name']}" for o in objects]
    # Each upstream controller's ingress policy (infra/program/platform/operator_ingress.py), in its
    # namespace.
    controllers = [
        a.obj["metadata"] for i in rendering.upstream for a in i.objects if a.obj["kind"] == "Deployment"
    ]
    ingress = [f"NetworkPolicy/{policy_name(c['name'])}" for c in controllers]
    assert sorted(found) == sorted(kserve + ingress + PLATFORM_SMOKE[name])
    assert {
        o["metadata"].get("namespace", "ddp-mnist-smoke")
        for o in objects
        if o["kind"] not in ("Namespace", "PriorityClass")  # cluster-scoped
    } <= {"ddp-mnist-smoke", "kube-system"} | {
        c["namespace"] for c in controllers
    }  # kube-system: the device plugin's
    # Each from its vendored source (KServe's less the components the bundle never uses).
    assert len(rendering.upstream) == len(rendering.external)
    assert sorted(install.vendored.shown for install in rendering.upstream) == PLATFORM_INSTALLS[name]
    assert rendering.outputs["stackRole"] == "platform"


@pytest.mark.parametrize("name", ["gke-gpu", "aks-gpu", "eks-gpu"])
def test_job_stacks_on_shared_clusters_install_no_cluster_level_object(name):
    """Their namespace and StorageClasses are their platform stack's (teamNamespaces,
    platformStorageClasses): every object they create lies in their own namespace, which the namespaced
    Role ddp-mnist-job-deployer covers."""
    rendering = shipped(name)
    assert rendering.external == []
    assert rendering.objects
    assert {o["metadata"].get("namespace") for o in rendering.objects} == {rendering.settings.namespace}


def test_the_operator_crds_outlive_a_destroy():
    rendering = rendered({})
    (transform,) = rendering.external[0].transforms
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "x"},
    }
    result = transform(
        pulumi.ResourceTransformArgs(
            custom=True,
            type_="kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition",
            name="training-operator-manifests:pytorchjobs.kubeflow.org",
            props=crd,
            opts=pulumi.ResourceOptions(),
        )
    )
    assert result.props == crd
    assert result.opts.retain_on_delete is True


def test_indexed_job_fails_as_soon_as_one_index_has_failed_for_good():
    spec = one(rendered({"jobKind": "indexed-job"}), "Job")["spec"]
    assert spec["maxFailedIndexes"] == 0
    assert spec["backoffLimitPerIndex"] == 3


@pytest.mark.parametrize(("nodes", "incidents", "limit"), [(2, 3, 7), (4, 3, 13), (4, 0, 1), (1, 2, 3)])
def test_pytorchjob_backoff_limit_counts_incidents(nodes, incidents, limit):
    values = {"jobNodes": nodes, "jobBackoffLimit": incidents, "jobBatchSize": 256}
    job = one(rendered(values), "PyTorchJob")
    assert job["spec"]["runPolicy"]["backoffLimit"] == limit


QUEUED = {"jobQueueName": "team-a", "jobClusterQueue": "gpu-a100", "kueuePyTorchJobIntegration": True}
LOCAL_QUEUE_CRD = DEFAULT_CRD_DIR / "kueue.x-k8s.io_localqueues.yaml"  # Kueue's, v1beta1 and v1beta2


def test_the_kueue_local_queue_is_created_before_the_job():
    rendering = rendered(QUEUED)
    queue = one(rendering, "LocalQueue")
    assert queue["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert queue["metadata"]["name"] == "team-a" and queue["metadata"]["namespace"] == "ddp-mnist"
    assert queue["spec"] == {"clusterQueue": "gpu-a100"}
    job = _registration(rendering, JOB_TYPES["pytorchjob"])
    assert "queue-local-queue" in job.dependencies
    assert by_kind(rendered({}), "LocalQueue") == []


# pulumi-kubernetes (provider/pkg/provider/diff.go, forceNew): a difference in any of these replaces a PVC.
PVC_REPLACE_FIELDS = ("accessModes", "selector", "storageClassName", "volumeName")


def _replaced_on_import(live_spec, program_spec, ignore_changes):
    """The PVC fields that make the diff after an import a replacement: the engine keeps the old
    (imported, live) value of an ignored path in the new inputs before the provider diffs them."""
    new = dict(program_spec)
    for path in ignore_changes:
        field = path.removeprefix("spec.")
        if field in live_spec:
            new[field] = live_spec[field]
    return sorted(f for f in PVC_REPLACE_FIELDS if live_spec.get(f) != new.get(f))


def test_reattaching_the_retained_claim_is_no_replacement():
    rendering = rendered({"reattachRetained": True})
    claims = {r.name: r for r in rendering.registrations if r.type.endswith("PersistentVolumeClaim")}
    claim = claims["storage-checkpoints"]
    assert claim.import_id == "ddp-mnist/ddp-mnist-checkpoints"
    (ours,) = [
        o
        for o in by_kind(rendering, "PersistentVolumeClaim")
        if o["metadata"]["name"].endswith("checkpoints")
    ]
    # What the import reads back: our spec plus what the API server and the PV binder filled in.
    live = {**ours["spec"], "volumeName": "pvc-8f1c7e55", "volumeMode": "Filesystem"}
    assert _replaced_on_import(live, ours["spec"], ()) == ["volumeName"]  # what the engine refuses
    assert _replaced_on_import(live, ours["spec"], claim.options.ignore_changes) == []
    assert set(claim.options.ignore_changes) == {"spec.volumeName", "spec.volumeMode"}
    # Same options without the switch: turning it off after the import replaces nothing either.
    assert rendered({}).registrations and all(
        r.options.ignore_changes == claim.options.ignore_changes
        for r in rendered({}).registrations
        if r.type.endswith("PersistentVolumeClaim")
    )
    # The class is ours to set: a kept claim of another class is refused, never silently kept.
    assert _replaced_on_import(
        {**live, "storageClassName": "other"}, ours["spec"], claim.options.ignore_changes
    ) == ["storageClassName"]


# pulumi-kubernetes (provider/pkg/metadata/overrides.go, allowsSkipAwaitWithDelete): kinds whose deletion
# is not awaited when they carry pulumi.com/skipAwait.
SKIPS_DELETION_WAIT = {
    "Namespace",
    "Pod",
    "ReplicationController",
    "DaemonSet",
    "Deployment",
    "StatefulSet",
    "Job",
}


def _deletion_awaited(obj):
    annotations = obj["metadata"].get("annotations") or {}
    return not (annotations.get("pulumi.com/skipAwait") == "true" and obj["kind"] in SKIPS_DELETION_WAIT)


@pytest.mark.parametrize(
    "values",
    [
        {"jobKind": "pytorchjob"},
        {"jobKind": "indexed-job"},
        {"jobKind": "trainjob", "trainerInstall": True, "operatorInstall": False},
    ],
)
def test_a_job_not_awaited_is_still_deleted_before_its_replacement_is_created(values):
    from tests.infra.conftest import training_job

    job = training_job(rendered({**values, "jobWait": False}))
    annotations = job["metadata"]["annotations"]
    assert annotations == {"pulumi.com/waitFor": "jsonpath={.metadata.uid}"}  # satisfied once created
    assert _deletion_awaited(job)


def test_eks_gpu_as_shipped_waits_for_the_old_indexed_job_to_be_gone():
    rendering = shipped("eks-gpu")
    jobs = by_kind(rendering, "Job")
    assert jobs and all(_deletion_awaited(j) for j in jobs)
    assert [
        r.delete_before_replace for r in rendering.registrations if r.name in ("trainer-job", "seed-job")
    ] == [
        True,
        True,
    ]


def _crd_transform_result(transform, name):
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
    }
    return transform(
        pulumi.ResourceTransformArgs(
            custom=True,
            type_="kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition",
            name=f"training-operator-manifests:{name}",
            props=crd,
            opts=pulumi.ResourceOptions(),
        )
    )


@pytest.mark.parametrize(
    ("values", "install", "crd"),
    [
        ({"operatorAdoptCrds": True}, "training-operator-manifests", "pytorchjobs.kubeflow.org"),
        (
            {
                "stackRole": "platform",
                "operatorInstall": False,
                "trainerInstall": True,
                "trainerAdoptCrds": True,
            },
            "trainer-v2-manifests",
            "trainjobs.trainer.kubeflow.org",
        ),
    ],
)
def test_kept_crds_are_adopted_as_the_overlays_own_children(values, install, crd):
    (directory,) = [r for r in rendered(values).external if r.name == install]
    (transform,) = directory.transforms
    adopted = _crd_transform_result(transform, crd)
    assert adopted.opts.import_ == crd  # a cluster-scoped object's import ID is its name
    assert adopted.opts.retain_on_delete is True
    off = {k: v for k, v in values.items() if not k.endswith("AdoptCrds")}
    (directory,) = [r for r in rendered(off).external if r.name == install]
    created = _crd_transform_result(directory.transforms[0], crd)
    assert created.opts.import_ is None and created.opts.retain_on_delete is True


@pytest.mark.parametrize("version", ["v1beta2", "v1beta1"])
def test_the_local_queue_is_valid_at_the_configured_kueue_api_version(version):
    """kueueApiVersion picks the version; the object passes that version's CRD schema (strict)."""
    from infra.review.crd import crd_validator

    rendering = rendered({**QUEUED, "kueueApiVersion": version})
    queue = one(rendering, "LocalQueue")
    assert queue["apiVersion"] == f"kueue.x-k8s.io/{version}"
    validator = crd_validator(LOCAL_QUEUE_CRD, version, strict=True)
    assert [e.message for e in validator.iter_errors(queue)] == []
    assert validation_errors(rendering, "1.33", None) == []  # what `render --validate` runs
    assert "LocalQueue" not in unchecked_kinds(rendering)


def test_render_validation_reports_a_local_queue_kueue_would_refuse():
    rendering = rendered(QUEUED)
    queue = one(rendering, "LocalQueue")
    queue["spec"]["clusterQueues"] = ["gpu-a100"]  # not a field of the CRD
    assert validation_errors(rendering, "1.33", None) == [
        "LocalQueue/team-a: Additional properties are not allowed ('clusterQueues' was unexpected) at $.spec"
    ]
    queue["apiVersion"] = "kueue.x-k8s.io/v1alpha1"
    assert validation_errors(rendering, "1.33", None) == [
        "LocalQueue/team-a: apiVersion kueue.x-k8s.io/v1alpha1 is not served by Kueue's LocalQueue CRD"
    ]


@pytest.mark.parametrize("seed_source", ["https", "s3"])
def test_the_seed_job_is_queued_like_the_training_job_after_the_local_queue(seed_source):
    """With manageJobsWithoutQueueName Kueue suspends every unlabelled Job: the seed Job carries the
    queue label too, and waits for the LocalQueue it names."""
    values = {
        **QUEUED,
        "seedSource": seed_source,
        "minioEndpoint": "minio.minio.svc:9000",
        "minioExistingSecret": "minio-creds",
        "createNamespace": False,
    }
    rendering = rendered(values)
    seed = next(j for j in by_kind(rendering, "Job") if j["metadata"]["name"] == "ddp-mnist-seed")
    assert seed["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    seed_registration = next(
        r for r in rendering.registrations if r.type == "kubernetes:batch/v1:Job" and r.name == "seed-job"
    )
    assert "queue-local-queue" in seed_registration.dependencies
    unqueued = rendered({k: v for k, v in values.items() if k not in QUEUED})
    seed = next(j for j in by_kind(unqueued, "Job") if j["metadata"]["name"] == "ddp-mnist-seed")
    assert "kueue.x-k8s.io/queue-name" not in seed["metadata"]["labels"]
