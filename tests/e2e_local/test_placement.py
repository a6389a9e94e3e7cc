"""A run that cannot start fails `pulumi up` within jobPlacementTimeoutSeconds, with the cause, against
the real engine, API server, scheduler, volume controller and training operator:

20. a job whose pods ask for GPUs no node can give: the real kube-scheduler keeps them Pending
    (Unschedulable: "Insufficient nvidia.com/gpu", the GPU nodes' taints) and `up` fails with one line
    naming the pod and the scheduler's reason, long before jobWaitTimeoutSeconds; the PyTorchJob stays;
21. a data claim whose StorageClass does not exist: the PV controller records why on the claim, the seed
    pod waits for it, and `up` fails with one line naming the claim, its class and that reason; the
    training job is never created.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from pulumi import automation as auto

from tests.e2e import judge, live
from tests.e2e.project import Backend
from tests.e2e_local import scenario

pytestmark = pytest.mark.e2e_local

JOB = "mnist-r1"
BOUND_S = 20  # jobPlacementTimeoutSeconds in both stacks
# What the program's wait adds at most past the bound: its 5 s poll, the seed before the job, the engine.
SLACK_S = 90


@pytest.fixture(scope="module")
def gpu_job(backend: Backend, platform: dict) -> Iterator[dict]:
    yield from scenario.job_stack(
        backend,
        "gpu",
        "ddp-mnist-local-gpu",
        jobGpusPerNode="8",  # more than any node of the fleet has
        jobProcsPerNode="1",
        jobPlacementTimeoutSeconds=str(BOUND_S),
    )


@pytest.fixture(scope="module")
def unbound(backend: Backend, platform: dict) -> Iterator[dict]:
    yield from scenario.job_stack(
        backend,
        "unbound",
        "ddp-mnist-local-unbound",
        storageProvider="existing",
        jobPlacementTimeoutSeconds=str(BOUND_S),
    )


def _age(obj: dict) -> float:
    """Seconds since the object was created, by the API server's clock (the same host's)."""
    created = datetime.fromisoformat(obj["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
    return (datetime.now(UTC) - created).total_seconds()


def _failed_up(stack: auto.Stack) -> tuple[str, float]:
    start = time.monotonic()
    with pytest.raises(auto.CommandError) as failed:
        stack.up(on_output=print, show_secrets=False)
    return str(failed.value), time.monotonic() - start


def test_20_a_pod_no_node_can_take_fails_up_with_the_schedulers_reason(gpu_job: dict) -> None:
    namespace = gpu_job["config"]["ddp-mnist:namespace"]
    text, _ = _failed_up(gpu_job["stack"])
    lines = judge.messages(text, rf"Pod {namespace}/{JOB}-\S+ cannot be scheduled after \d+s: ")
    assert len(lines) == 1, text[-3000:]
    print(f"scenario 20: {lines[0]}")
    assert "Insufficient nvidia.com/gpu" in lines[0], lines[0]
    assert f"more: kubectl -n {namespace} describe pod {JOB}-" in lines[0]
    assert "jobPlacementTimeoutSeconds=20; the PyTorchJob is left in place" in lines[0]
    pods = live.items("pod", namespace, f"ddp-mnist.io/job={JOB}")
    assert pods and all(p["status"]["phase"] == "Pending" for p in pods)
    # Failed within the bound (and the poll) of the pods' creation, not after jobWaitTimeoutSeconds.
    assert live.exists("pytorchjob", JOB, namespace)
    assert min(_age(p) for p in pods) < BOUND_S + SLACK_S


def test_21_a_claim_that_never_binds_fails_up_naming_the_claim_its_class_and_why(unbound: dict) -> None:
    namespace = unbound["config"]["ddp-mnist:namespace"]
    storage_class = unbound["config"]["ddp-mnist:storageClassName"]
    text, took = _failed_up(unbound["stack"])
    lines = judge.messages(
        text, rf"PersistentVolumeClaim {namespace}/\S+ \(class {storage_class}, which does not exist\)"
    )
    assert len(lines) == 1, text[-3000:]
    print(f"scenario 21: {lines[0]}")
    assert f'storageclass.storage.k8s.io "{storage_class}" not found' in lines[0], lines[0]
    assert "is still unbound after" in lines[0]
    assert not live.exists("pytorchjob", JOB, namespace)
    assert took < BOUND_S + SLACK_S + 120  # the namespace, claims and seed Job are created first
