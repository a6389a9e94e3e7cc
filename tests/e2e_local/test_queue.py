"""Kueue, with the real engine, API server, Job controller and Kueue v0.19.2 (its manifests from the
pinned module, its webhooks judging every Job the cluster admits); last in the session, since from its
install on Kueue's webhooks sit in front of every Job and pod:

10. a job stack submitted through a LocalQueue: the seed Job fits the ClusterQueue's quota and runs;
    the training job does not, so Kueue holds it suspended (no pod) with a pending Workload that says
    why; once the quota has room Kueue admits it and it runs to the end; a preview after refresh then
    changes nothing (what Kueue's webhook set on the Job is no drift).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from pulumi import automation as auto

from infra.localcluster import cluster, kueue
from tests.e2e import live
from tests.e2e.project import Backend
from tests.e2e.stacks import job_config
from tests.e2e_local import scenario

pytestmark = pytest.mark.e2e_local

JOB = "mnist-r1"
SEED = "ddp-mnist-seed"
NAMESPACE = "ddp-mnist-local-queue"
LOCAL_QUEUE = "local"
CLUSTER_QUEUE = "local-cluster-queue"
FLAVOR = "local-default"
# Room for the seed (250m, 256Mi) but not for the job's two 1-CPU pods; then room for both.
SMALL, LARGE = ("1", "2Gi"), ("4", "8Gi")


@pytest.fixture(scope="module")
def queued(local_cluster: cluster.State, platform: dict) -> Iterator[None]:
    kueue.install(local_cluster)
    for obj in kueue.queue_objects(CLUSTER_QUEUE, FLAVOR, *SMALL):
        live.kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(obj))
    yield


def _workload(owner: str, timeout_s: float = 60) -> dict:
    """The Workload Kueue made for the Job `owner` of the namespace, once it exists."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for workload in live.items("workloads.kueue.x-k8s.io", NAMESPACE):
            if any(ref["name"] == owner for ref in workload["metadata"].get("ownerReferences", [])):
                return workload
        time.sleep(1)
    raise AssertionError(f"no Workload for Job {owner} in {NAMESPACE} after {timeout_s} s")


def _condition(workload: dict, kind: str) -> dict:
    return next((c for c in workload.get("status", {}).get("conditions", []) if c["type"] == kind), {})


def _until(check, timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check() and time.monotonic() < deadline:
        time.sleep(1)
    return bool(check())


def test_10_kueue_holds_a_job_over_quota_and_admits_it_once_there_is_room(
    backend: Backend, queued: None
) -> None:
    config = job_config(
        scenario.IMAGE,
        *scenario.KEYS,
        namespace=NAMESPACE,
        storageClassName="ddp-mnist-nfs-queue",
        jobKind="indexed-job",
        jobWait="false",
        jobQueueName=LOCAL_QUEUE,
        jobClusterQueue=CLUSTER_QUEUE,
    )
    stack: auto.Stack = scenario.stack(backend, "local-queue", config)
    try:
        outputs = scenario.outputs(stack.up(on_output=print, show_secrets=False))
        assert outputs["seedOutcome"] == "Complete"
        seed = _workload(SEED)
        assert _condition(seed, "Admitted").get("status") == "True", seed.get("status")
        assert seed["status"]["admission"]["clusterQueue"] == CLUSTER_QUEUE

        # Over quota: held suspended, no pod, and the Workload says why.
        pending = lambda: _condition(_workload(JOB), "QuotaReserved").get("message", "")  # noqa: E731
        assert _until(lambda: "insufficient quota" in pending()), pending()
        assert live.get("job", JOB, NAMESPACE)["spec"]["suspend"] is True
        assert live.items("pod", NAMESPACE, f"job-name={JOB}") == []

        room = kueue.queue_objects(CLUSTER_QUEUE, FLAVOR, *LARGE)[1]
        live.kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(room))
        assert scenario.wait_outcome("job", JOB, NAMESPACE) == "Complete"
        workload = _workload(JOB)
        assert _condition(workload, "Admitted").get("status") == "True", workload.get("status")
        assert len(live.items("pod", NAMESPACE, f"job-name={JOB}")) == int(config["ddp-mnist:jobNodes"])

        stack.refresh(on_output=print)
        preview = stack.preview(on_output=print)
        assert scenario.changes(preview.change_summary) == {}
    finally:
        stack.destroy(on_output=print)
        live.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false")
