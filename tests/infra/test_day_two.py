"""What the cluster does with the stack after the first `pulumi up`: edits, destroys, shared clusters,
network plugins as they are, Kueue. Each test reads the registration options Pulumi acts on."""

from __future__ import annotations

import pulumi
import pytest

from infra.offline.manifest import render
from infra.offline.stackconfig import load_stack
from tests.infra.conftest import PLATFORM_STACKS, by_kind, one, render_config

JOB_TYPES = {"pytorchjob": "kubernetes:kubeflow.org/v1:PyTorchJob", "indexed-job": "kubernetes:batch/v1:Job"}


def _registration(rendering, type_):
    (found,) = [r for r in rendering.registrations if r.type == type_]
    return found


@pytest.mark.parametrize("kind", sorted(JOB_TYPES))
def test_any_change_of_the_job_spec_is_a_delete_before_replace(kind):
    job = _registration(render_config({"jobKind": kind}), JOB_TYPES[kind])
    assert job.replace_on_changes == ("spec",)
    assert job.delete_before_replace is True


def test_a_destroy_keeps_the_checkpoint_claim_and_the_namespace_it_lives_in():
    rendering = render_config({})
    assert _registration(rendering, "kubernetes:core/v1:Namespace").retain_on_delete is True
    claims = {r.name: r for r in rendering.registrations if r.type.endswith("PersistentVolumeClaim")}
    assert claims["storage-checkpoints"].retain_on_delete is True
    assert claims["storage-data"].retain_on_delete is False
    released = render_config({"checkpointVolumeRetain": False})
    assert _registration(released, "kubernetes:core/v1:Namespace").retain_on_delete is False


def test_reattach_adopts_the_retained_namespace_and_claim():
    rendering = render_config({"namespace": "team-a", "reattachRetained": True})
    assert _registration(rendering, "kubernetes:core/v1:Namespace").import_id == "team-a"
    claims = {r.name: r for r in rendering.registrations if r.type.endswith("PersistentVolumeClaim")}
    assert claims["storage-checkpoints"].import_id == "team-a/ddp-mnist-checkpoints"
    assert claims["storage-data"].import_id == ""
    assert _registration(render_config({}), "kubernetes:core/v1:Namespace").import_id == ""


# What each platform stack installs: the operator v1 overlay, and on GKE Trainer v2's too.
PLATFORM_INSTALLS = {
    "aks-platform": ["standalone?ref=v1.9.4"],
    "gke-platform": ["manager?ref=v2.3.0", "standalone?ref=v1.9.4"],
}


# ...and the post-install smoke check of each: its namespace, a PyTorchJob, and for Trainer v2 a TrainJob.
PLATFORM_SMOKE = {
    "aks-platform": ["Namespace/ddp-mnist-smoke", "PyTorchJob/operator-smoke"],
    "gke-platform": [
        "Namespace/ddp-mnist-smoke",
        "PyTorchJob/operator-smoke",
        "TrainingRuntime/trainer-smoke",
        "TrainJob/trainer-smoke",
    ],
}


@pytest.mark.parametrize("name", PLATFORM_STACKS)
def test_a_platform_stack_installs_only_the_operators_and_their_smoke_check(name):
    rendering = render(load_stack(name))
    found = [f"{o['kind']}/{o['metadata']['name']}" for o in rendering.objects]
    assert found == PLATFORM_SMOKE[name]
    assert {o["metadata"].get("namespace", "ddp-mnist-smoke") for o in rendering.objects} == {
        "ddp-mnist-smoke"
    }
    sources = sorted(r.inputs["directory"].rsplit("/", 1)[-1] for r in rendering.external)
    assert sources == PLATFORM_INSTALLS[name]
    assert rendering.outputs["stackRole"] == "platform"


@pytest.mark.parametrize("name", ["gke-gpu", "aks-gpu", "eks-gpu"])
def test_job_stacks_on_shared_clusters_install_no_cluster_level_object(name):
    rendering = render(load_stack(name))
    assert rendering.external == []
    assert not {"Namespace"} - {o["kind"] for o in rendering.objects}
    cluster_scoped = {"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
    assert not cluster_scoped & {o["kind"] for o in rendering.objects}


def test_the_operator_crds_outlive_a_destroy():
    rendering = render_config({})
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
    spec = one(render_config({"jobKind": "indexed-job"}), "Job")["spec"]
    assert spec["maxFailedIndexes"] == 0
    assert spec["backoffLimitPerIndex"] == 3


@pytest.mark.parametrize(("nodes", "incidents", "limit"), [(2, 3, 7), (4, 3, 13), (4, 0, 1), (1, 2, 3)])
def test_pytorchjob_backoff_limit_counts_incidents(nodes, incidents, limit):
    values = {"jobNodes": nodes, "jobBackoffLimit": incidents, "jobBatchSize": 256}
    job = one(render_config(values), "PyTorchJob")
    assert job["spec"]["runPolicy"]["backoffLimit"] == limit


def test_the_kueue_local_queue_is_created_before_the_job():
    rendering = render_config({"jobQueueName": "team-a", "jobClusterQueue": "gpu-a100"})
    queue = one(rendering, "LocalQueue")
    assert queue["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    assert queue["metadata"]["name"] == "team-a" and queue["metadata"]["namespace"] == "ddp-mnist"
    assert queue["spec"] == {"clusterQueue": "gpu-a100"}
    job = _registration(rendering, JOB_TYPES["pytorchjob"])
    assert "queue-local-queue" in job.dependencies
    assert by_kind(render_config({}), "LocalQueue") == []
