"""Every stack in stacks/ renders, matches its golden manifest and passes the upstream schemas."""

from __future__ import annotations

import os
from pathlib import Path

import kubernetes_validate
import pytest

from infra.program.common.config import settings_from_raw
from infra.review.cluster import cluster_view, effective_yaml
from infra.review.crd import crd_validator
from infra.review.manifest import to_yaml
from infra.review.render import is_builtin
from infra.stackconfig import ROOT, load_stack, stack_names
from tests.infra.conftest import JOB_STACKS, PREREQUISITE_STACKS, shipped

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
CRD = ROOT.parent / "shared" / "k8s" / "crds" / "kubeflow.org_pytorchjobs.yaml"
STACKS = stack_names()


def test_the_documented_stacks_exist():
    assert {"dev", "gke-gpu", "eks-gpu", "aks-gpu"} <= set(STACKS)


@pytest.mark.parametrize("name", STACKS)
def test_stack_matches_golden_manifest(name):
    text = to_yaml(shipped(name))
    golden = GOLDEN / f"{name}.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.is_file(), f"no golden file for {name}: run `make golden`"
    assert text == golden.read_text(), f"{name} renders differently from {golden}; review, then `make golden`"


@pytest.mark.parametrize("name", STACKS)
def test_effective_objects_match_golden_file(name):
    """A reviewer sees what the cluster will run: the controllers' pods and Services, as admitted."""
    rendering = shipped(name)
    text = effective_yaml(cluster_view(rendering.objects, rendering.settings), name)
    golden = GOLDEN / f"{name}.effective.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.is_file(), f"no golden file for {name}: run `make golden`"
    assert text == golden.read_text(), (
        f"{name}'s effective pods differ from {golden}; review, then `make golden`"
    )


@pytest.mark.parametrize("name", STACKS)
def test_every_effective_pod_is_admitted_and_schema_valid(name):
    rendering = shipped(name)
    view = cluster_view(rendering.objects, rendering.settings)
    assert view.namespace.level == "restricted"
    assert view.admission.refusals == []
    for manifest in [p.manifest for p in view.admission.pods] + view.effective.services:
        kubernetes_validate.validate(manifest, f"{rendering.settings.kubernetes_version}.0", strict=True)
    if name in PREREQUISITE_STACKS:
        # MinIO and the fill Job 'restricted'; the NFS server alone 'privileged', in its own namespace.
        levels = {p.owner: view.level_of(p) for p in view.admission.pods}
        assert levels == {
            "Deployment/nfs-server": "privileged",
            "Deployment/minio": "restricted",
            "Job/minio-mnist": "restricted",
        }
        return
    platform = rendering.settings.stack_role == "platform"
    seed = 1 if rendering.settings.seeds_data else 0
    servers = rendering.settings.serve_replicas if rendering.settings.serve_kind != "none" else 0
    board = 1 if rendering.settings.tensorboard_deploy else 0
    own = [p for p in view.admission.pods if p.manifest["metadata"]["namespace"] == view.namespace.name]
    assert len(own) == (0 if platform else rendering.settings.job_nodes + seed + servers + board)
    # The rest is the post-install smoke check's, in its own namespace enforcing 'restricted' too.
    smoke = [p for p in view.admission.pods if p not in own]
    assert {p.manifest["metadata"]["namespace"] for p in smoke} <= {"ddp-mnist-smoke"}
    assert all(view.level_of(p) == "restricted" for p in smoke)
    operator_smoke = rendering.settings.operator_install and rendering.settings.operator_smoke_check
    assert bool(smoke) == (operator_smoke or bool(rendering.settings.gpu_smoke_node_selector))


@pytest.mark.parametrize("name", [*JOB_STACKS, *PREREQUISITE_STACKS])
def test_builtin_objects_pass_strict_upstream_schema(name):
    stack = load_stack(name)
    version = settings_from_raw(stack.values, set(stack.secret_keys))[0].kubernetes_version
    builtins = [o for o in shipped(name).objects if is_builtin(o)]
    assert builtins
    for obj in builtins:
        kubernetes_validate.validate(obj, f"{version}.0", strict=True)


@pytest.mark.parametrize("name", STACKS)
def test_pytorchjobs_pass_the_crd_schema(name):
    jobs = [o for o in shipped(name).objects if o["kind"] == "PyTorchJob"]
    validator = crd_validator(CRD)
    for job in jobs:
        assert [e.message for e in validator.iter_errors(job)] == []


def test_crd_validation_can_fail():
    job = next(o for o in shipped("dev").objects if o["kind"] == "PyTorchJob")
    job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = "one"
    assert list(crd_validator(CRD).iter_errors(job))


def test_strict_validation_can_fail():
    pvc = next(o for o in shipped("dev").objects if o["kind"] == "PersistentVolumeClaim")
    pvc["spec"]["accesMode"] = ["ReadWriteMany"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pvc, "1.33.0", strict=True)
