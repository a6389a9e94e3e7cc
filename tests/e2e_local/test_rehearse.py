"""`make rehearse` for every shipped stack, and for an on-prem job stack, through the command itself
(`python -m infra.localcluster.rehearse`) with the real CLI, engine and provider:

26. every stacks/Pulumi.*.yaml rehearses: each cloud's platform stack (and dev-prereqs) with `--up`
    first, its list values (team namespaces, PriorityClasses, the GPU smoke check's node selector)
    reaching the cluster as lists, then each job stack that names it previewed (exit 0). eks-gpu's
    preview names Kueue and its ClusterQueue gpu-a10g as missing (what EKS's cluster admin provides, no
    stack makes), which `--up` would stop on; with both there it previews with nothing missing. The
    on-prem stack (stacks/Pulumi.onprem-gpu.yaml beside this file: an existing StorageClass, namespace
    and S3 Secret, the operator assumed present, GPU tolerations) `--up` stops at once on a bare cluster
    with one line per missing prerequisite; once the platform team's objects are there but the operator
    is not running (its CRD left behind), `up` stops within `jobPlacementTimeoutSeconds` with the
    program's one line naming the missing controller.

Each cloud gets a cluster of the scenario's own, started and stopped here: the three platform stacks
install the same cluster-wide objects (the training operator, the team namespace ddp-mnist, the
PriorityClass training-high), as does the session's platform stack, which a destroy here would take
away from the scenarios after this one. Run before test_trainjob.py's (alphabetical order), while the
session's cluster runs no Trainer v2: its status server's port, 10443, is fixed on the host.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from infra.localcluster import cluster, kueue
from infra.localcluster.rehearse import EXIT_FAILED, EXIT_MISSING, rehearsal_config
from infra.program.common import yamlio
from infra.stackconfig import ROOT, stack_names
from tests.e2e_local import scenario

pytestmark = pytest.mark.e2e_local

# Each shipped job stack after the stack that makes what it uses (platformStack; dev's prerequisites).
GROUPS = {
    "dev-prereqs": ("dev",),
    "gke-platform": ("gke-gpu", "gke-trainjob"),
    "aks-platform": ("aks-gpu",),
    "eks-platform": ("eks-gpu",),
}
ON_PREM = Path(__file__).parent / "stacks" / "Pulumi.onprem-gpu.yaml"
BOUND_S = 60  # the on-prem stack's jobPlacementTimeoutSeconds
SLACK_S = 90  # what the program's wait adds at most past the bound (scenario 20's)


@contextmanager
def own_cluster(directory: Path) -> Iterator[cluster.State]:
    state = cluster.State(directory)
    cluster.up(state)
    try:
        yield state
    finally:
        if scenario.KEEP:
            print(f"E2E_KEEP=1: the cluster keeps running from {directory}")
        else:
            cluster.down(state)


def rehearse(state: cluster.State, stack: str, *flags: str) -> subprocess.CompletedProcess[str]:
    """`make rehearse`'s command against `state`'s cluster; its output shown in the test's report."""
    argv = ["-m", "infra.localcluster.rehearse", "--stack", stack, "--state", str(state.directory)]
    done = subprocess.run(
        [sys.executable, *argv, *flags], cwd=ROOT, capture_output=True, text=True, timeout=900, check=False
    )
    print(f"$ rehearse --stack {stack} {' '.join(flags)}: exit {done.returncode}")
    print(done.stdout[-6000:], done.stderr[-6000:], sep="\n")
    return done


def _previewed(done: subprocess.CompletedProcess[str]) -> None:
    """Exit 0, something to create, and nothing missing or refused on the way."""
    assert done.returncode == 0, done.stderr[-3000:]
    assert " to create" in done.stdout or " created" in done.stdout, done.stdout[-3000:]
    assert "error:" not in done.stderr and "rehearse: missing" not in done.stderr, done.stderr[-3000:]


def _get(state: cluster.State, path: str) -> dict:
    found = state.client().get(path)
    assert found is not None, f"{path} not found"
    return found


def _platform_lists_landed(state: cluster.State, platform: str) -> None:
    """The platform stack's list values reached the program as lists: one object per entry."""
    plain = rehearsal_config(platform, []).plain
    for namespace in plain.get("ddp-mnist:teamNamespaces", []):
        assert (
            _get(state, f"/api/v1/namespaces/{namespace}")["metadata"]["labels"][
                "pod-security.kubernetes.io/enforce"
            ]
            == "restricted"
        )
        if budget := plain.get("ddp-mnist:teamQuota"):
            quota = _get(state, f"/api/v1/namespaces/{namespace}/resourcequotas/ddp-mnist-team-quota")
            assert quota["spec"]["hard"] == dict(entry.split("=", 1) for entry in budget)
    for entry in plain.get("ddp-mnist:priorityClasses", []):
        name, value = entry.split("=")
        assert _get(state, f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")["value"] == int(value)
    if selector := plain.get("ddp-mnist:gpuSmokeNodeSelector"):
        job = _get(state, "/apis/batch/v1/namespaces/ddp-mnist-smoke/jobs/gpu-smoke")
        wanted = dict(entry.split("=", 1) for entry in selector)
        assert job["spec"]["template"]["spec"]["nodeSelector"] == wanted


def test_26_the_groups_cover_every_shipped_stack() -> None:
    assert sorted([*GROUPS, *(job for jobs in GROUPS.values() for job in jobs)]) == stack_names()


@pytest.mark.parametrize("first", list(GROUPS))
def test_26_every_shipped_stack_rehearses_after_the_stack_it_names(first: str, tmp_path: Path) -> None:
    with own_cluster(tmp_path / "cluster") as state:
        _previewed(rehearse(state, first, "--up"))
        _platform_lists_landed(state, first)
        for job in GROUPS[first]:
            if job == "eks-gpu":
                noted = rehearse(state, job)
                assert noted.returncode == 0, noted.stderr[-3000:]
                assert noted.stderr.splitlines() == [
                    "rehearse: missing: CustomResourceDefinition localqueues.kueue.x-k8s.io (Kueue: "
                    "jobQueueName) does not exist",
                    "rehearse: missing: ClusterQueue gpu-a10g (jobClusterQueue) does not exist",
                    "rehearse: the preview passed; `--up` would stop on the 2 thing(s) above: create them "
                    f"(KUBECONFIG={state.kubeconfig} kubectl ...) or rehearse the stack that makes them",
                ]
                kueue.install(state)
                for obj in gpu_queue("gpu-a10g", "eks-g5"):
                    plural = obj["kind"].lower() + "s"
                    state.client().apply(f"/apis/kueue.x-k8s.io/v1beta2/{plural}", obj)
            _previewed(rehearse(state, job))


def gpu_queue(name: str, flavor: str) -> list[dict]:
    """A ClusterQueue of GPU nodes, as a cluster's admin makes one: CPU, memory and GPUs covered."""
    objects = kueue.queue_objects(name, flavor, "200", "800Gi")
    group = objects[1]["spec"]["resourceGroups"][0]
    group["coveredResources"].append("nvidia.com/gpu")
    group["flavors"][0]["resources"].append({"name": "nvidia.com/gpu", "nominalQuota": "8"})
    return objects


def _crd(kind: str) -> dict:
    """The vendored training operator's CRD of `kind`, as its install would leave it behind."""
    path = ROOT / "infra" / "manifests" / "training-operator" / "manifests.yaml"
    return next(
        doc
        for doc in yamlio.load_all(path.read_text())
        if doc and doc["kind"] == "CustomResourceDefinition" and doc["spec"]["names"]["kind"] == kind
    )


def _platform_teams_objects(state: cluster.State) -> None:
    """What the on-prem stack's platform team made: its namespace (restricted), the S3 Secret, the
    CephFS class; and the operator's CRD, left by an operator that no longer runs."""
    client = state.client()
    labels = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn", "audit")}
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "ml-training", "labels": labels},
    }
    client.apply("/api/v1/namespaces", namespace)
    keys = {"AWS_ACCESS_KEY_ID": "onprem-key", "AWS_SECRET_ACCESS_KEY": "onprem-secret-0123456789"}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "minio-training"},
        "stringData": keys,
    }
    client.apply("/api/v1/namespaces/ml-training/secrets", secret)
    cephfs = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "rook-cephfs"},
        "provisioner": "rook-ceph.cephfs.csi.ceph.com",
        "reclaimPolicy": "Delete",
    }
    client.apply("/apis/storage.k8s.io/v1/storageclasses", cephfs)
    client.apply("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", _crd("PyTorchJob"))


def test_26_an_on_prem_job_stack_up_stops_with_one_line_per_missing_prerequisite(tmp_path: Path) -> None:
    with own_cluster(tmp_path / "cluster") as state:
        start = time.monotonic()
        bare = rehearse(state, str(ON_PREM), "--up")
        took_bare = time.monotonic() - start
        _platform_teams_objects(state)
        start = time.monotonic()
        stuck = rehearse(state, str(ON_PREM), "--up")
        took_stuck = time.monotonic() - start
    assert bare.returncode == EXIT_MISSING, bare.stderr[-3000:]
    assert bare.stderr.splitlines() == [
        "rehearse: missing: Namespace ml-training (createNamespace: false) does not exist",
        "rehearse: missing: StorageClass rook-cephfs (storageClassName, storageProvider: existing) does not "
        "exist",
        "rehearse: missing: Secret ml-training/minio-training (minioExistingSecret) does not exist",
        "rehearse: missing: CustomResourceDefinition pytorchjobs.kubeflow.org (the training operator: "
        "operatorInstall false) does not exist",
        "rehearse: no `pulumi up` of onprem-gpu: it expects 4 thing(s) the cluster lacks (above), which it "
        f"would wait for or fail on: create them (KUBECONFIG={state.kubeconfig} kubectl ...) or rehearse "
        "the stack that makes them",
    ]
    assert took_bare < BOUND_S
    # With what the platform team makes in place, the operator itself is what is missing: the program's
    # wait stops `up` within the bound, its one line shown by the engine, then rehearse's naming it.
    assert stuck.returncode == EXIT_FAILED, stuck.stderr[-3000:]
    last = stuck.stderr.splitlines()[-1]
    assert re.fullmatch(
        r"rehearse: `pulumi up` of onprem-gpu failed: PyTorchJob ml-training/mnist-r1 has no pod after \d+s "
        r"and no controller recorded why: is the controller that runs PyTorchJobs installed and running\? "
        r"more: kubectl -n ml-training describe pytorchjob mnist-r1 \(jobPlacementTimeoutSeconds=60; .*\)",
        last,
    ), last
    assert f"    error: {last.split(' failed: ', 1)[1]}" in stuck.stdout  # the engine's diagnostics, above
    assert took_stuck < BOUND_S + SLACK_S + 60  # preview, the namespace's objects and the seed come first
