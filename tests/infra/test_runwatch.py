"""The program's wait for a run: what it reads, the one line a stuck placement fails with, and when.

Objects are shaped as the API server returns them (the real ones are checked in the local tier,
tests/e2e_local/test_placement.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pulumi
import pytest

from infra.program.job.placement import Snapshot, diagnose, progress
from infra.program.job.runwatch import NOT_FOUND, ReadError, RunWatch, Target, read_snapshot
from infra.review.manifest import RecordingMocks

NS = "ddp-mnist"
NOW = datetime(2026, 11, 27, 12, 0, 0, tzinfo=UTC)
LOGS = f"kubectl -n {NS} logs -l ddp-mnist.io/job=mnist-r1 --prefix --max-log-requests=3"


def _run(coroutine: Any) -> Any:
    """Runs a coroutine on a loop of its own (asyncio.run would leave the thread without a current loop,
    which the Pulumi mock runtime of a later test needs)."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()


def ts(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def job(kind: str = "PyTorchJob", age: float = 400, conditions: list | None = None, **spec: Any) -> dict:
    return {
        "kind": kind,
        "metadata": {"name": "mnist-r1", "creationTimestamp": ts(age)},
        "spec": spec,
        "status": {"conditions": conditions or []},
    }


def pending_pod(name: str, age: float, message: str, claims: tuple[str, ...] = ()) -> dict:
    return {
        "metadata": {"name": name, "creationTimestamp": ts(age)},
        "spec": {"volumes": [{"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims]},
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
            ],
        },
    }


def event(kind: str, name: str, reason: str, message: str, ago: float = 10, type_: str = "Warning") -> dict:
    return {
        "involvedObject": {"kind": kind, "name": name},
        "reason": reason,
        "message": message,
        "type": type_,
        "lastTimestamp": ts(ago),
    }


GPU = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available."


def test_a_gpu_pod_unschedulable_past_the_bound_fails_with_the_schedulers_reason_and_a_command():
    pod = pending_pod("mnist-r1-master-0", 301, GPU)
    line = diagnose(Snapshot("PyTorchJob", "mnist-r1", NS, job(), [pod]), NOW, 300)
    assert line == (
        f"Pod {NS}/mnist-r1-master-0 cannot be scheduled after 301s: {GPU}; "
        f"more: kubectl -n {NS} describe pod mnist-r1-master-0"
    )
    assert (
        diagnose(Snapshot("PyTorchJob", "mnist-r1", NS, job(), [pod]), NOW, 302) is None
    )  # within the bound


def test_nodes_on_their_way_restart_the_bound_and_a_refused_scale_up_is_named():
    pod = pending_pod("mnist-r1-master-0", 900, GPU)
    coming = event(
        "Pod",
        "mnist-r1-master-0",
        "TriggeredScaleUp",
        "pod triggered scale-up: [{gpu-pool 0->1}]",
        60,
        "Normal",
    )
    assert diagnose(Snapshot("PyTorchJob", "mnist-r1", NS, job(), [pod], events=[coming]), NOW, 300) is None
    refused = event(
        "Pod",
        "mnist-r1-master-0",
        "NotTriggerScaleUp",
        "pod didn't trigger scale-up: 1 max node group size reached",
    )
    line = diagnose(Snapshot("PyTorchJob", "mnist-r1", NS, job(), [pod], events=[refused]), NOW, 300)
    assert line is not None
    assert "(cluster autoscaler: pod didn't trigger scale-up: 1 max node group size reached)" in line


def test_an_unbound_claim_names_its_class_its_provisioner_and_the_volume_controllers_reason():
    message = "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims."
    pod = pending_pod("ddp-mnist-seed-x", 310, message, claims=("ddp-mnist-data",))
    claim = {"spec": {"storageClassName": "fs-data"}, "status": {"phase": "Pending"}}
    waiting = event(
        "PersistentVolumeClaim",
        "ddp-mnist-data",
        "ExternalProvisioning",
        "Waiting for a volume to be created either by the external provisioner 'filestore.csi.storage.gke.io' "
        "or manually by the system administrator.",
        type_="Normal",
    )
    snapshot = Snapshot(
        "Job",
        "ddp-mnist-seed",
        NS,
        job("Job"),
        [pod],
        claims={"ddp-mnist-data": claim},
        classes={"fs-data": {"provisioner": "filestore.csi.storage.gke.io"}},
        events=[waiting],
    )
    assert diagnose(snapshot, NOW, 300) == (
        f"PersistentVolumeClaim {NS}/ddp-mnist-data (class fs-data, provisioner filestore.csi.storage.gke.io) "
        "is still unbound after 310s: ExternalProvisioning: Waiting for a volume to be created either by the "
        "external provisioner 'filestore.csi.storage.gke.io' or manually by the system administrator.; "
        f"more: kubectl -n {NS} describe pvc ddp-mnist-data"
    )
    failed = event(
        "PersistentVolumeClaim",
        "ddp-mnist-data",
        "ProvisioningFailed",
        'storageclass.storage.k8s.io "fs-data" not found',
    )
    missing = Snapshot(
        "Job",
        "ddp-mnist-seed",
        NS,
        job("Job"),
        [pod],
        {"ddp-mnist-data": claim},
        {"fs-data": None},
        [waiting, failed],
    )
    line = diagnose(missing, NOW, 300)
    assert line is not None
    assert "(class fs-data, which does not exist)" in line
    assert 'ProvisioningFailed: storageclass.storage.k8s.io "fs-data" not found' in line  # the Warning first


def test_a_job_without_pods_names_the_refusal_its_controller_recorded_or_the_missing_controller():
    refused = event(
        "Job",
        "mnist-r1",
        "FailedCreate",
        'Error creating: pods "mnist-r1-0-x" is forbidden: no PriorityClass with name training-high was found',
    )
    line = diagnose(Snapshot("Job", "mnist-r1", NS, job("Job"), [], events=[refused]), NOW, 300)
    assert line == (
        f"Job {NS}/mnist-r1 has no pod after 400s: Job mnist-r1 FailedCreate: Error creating: pods "
        '"mnist-r1-0-x" is forbidden: no PriorityClass with name training-high was found; '
        f"more: kubectl -n {NS} describe job mnist-r1"
    )
    silent = diagnose(Snapshot("PyTorchJob", "mnist-r1", NS, job(), []), NOW, 300)
    assert silent is not None
    assert (
        "no controller recorded why: is the controller that runs PyTorchJobs installed and running?" in silent
    )
    assert diagnose(Snapshot("PyTorchJob", "mnist-r1", NS, job(age=100), []), NOW, 300) is None


def test_a_suspended_job_waits_for_admission_without_a_bound():
    held = job("Job", age=5000, suspend=True)
    assert diagnose(Snapshot("Job", "mnist-r1", NS, held, []), NOW, 300) is None
    assert (
        progress(Snapshot("Job", "mnist-r1", NS, held, []))
        == "Job mnist-r1: suspended (waiting for admission)"
    )
    queued = job(age=5000, runPolicy={"suspend": True})
    assert diagnose(Snapshot("PyTorchJob", "mnist-r1", NS, queued, []), NOW, 300) is None
    gated = pending_pod("mnist-r1-master-0", 5000, "")
    gated["status"]["conditions"][0]["reason"] = "SchedulingGated"
    assert diagnose(Snapshot("PyTorchJob", "mnist-r1", NS, job(), [gated]), NOW, 300) is None


def test_a_container_that_cannot_pull_its_image_fails_after_the_bound_from_its_scheduling():
    pod = {
        "metadata": {"name": "mnist-r1-master-0", "creationTimestamp": ts(900)},
        "spec": {},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": ts(305)}],
            "containerStatuses": [
                {
                    "name": "pytorch",
                    "state": {
                        "waiting": {
                            "reason": "ImagePullBackOff",
                            "message": 'Back-off pulling image "x:0.1.0"',
                        }
                    },
                }
            ],
        },
    }
    line = diagnose(Snapshot("PyTorchJob", "mnist-r1", NS, job(), [pod]), NOW, 300)
    assert line == (
        f"Pod {NS}/mnist-r1-master-0: container pytorch cannot start after 305s (ImagePullBackOff): "
        f'Back-off pulling image "x:0.1.0"; more: kubectl -n {NS} describe pod mnist-r1-master-0'
    )
    assert diagnose(Snapshot("PyTorchJob", "mnist-r1", NS, job(), [pod]), NOW, 310) is None


class FakeCluster:
    """A ClusterReader over fixed objects, answering a sequence of workload states, one per poll."""

    def __init__(
        self, states: list[Mapping[str, Any] | None | Exception], pods: list[dict] | None = None
    ) -> None:
        self.states = states
        self.pods = pods or []
        self.paths: list[str] = []

    def get(self, path: str) -> Mapping[str, Any] | None:
        self.paths.append(path)
        if "/persistentvolumeclaims/" in path or "/storageclasses/" in path:
            return None
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        if isinstance(state, Exception):
            raise state
        return state

    def items(self, path: str, query: Mapping[str, str] | None = None) -> list[Mapping[str, Any]]:
        self.paths.append(path + (f"?{dict(query)}" if query else ""))
        return self.pods if path.endswith("/pods") else []


def _wait(
    cluster: FakeCluster,
    wait: bool = True,
    timeout: float = 3600,
    kind: str = "PyTorchJob",
    placement: float = 300,
) -> str:
    lines: list[str] = []
    watch = RunWatch(
        cluster, wait, placement, poll_seconds=0, log=lambda m, r: lines.append(m), wall=lambda: NOW
    )
    return _run(watch.until_ended(None, Target(kind, "mnist-r1", NS, LOGS), timeout))


def done(kind: str = "Succeeded") -> dict:
    return job(conditions=[{"type": kind, "status": "True"}])


def test_the_wait_reads_the_job_its_pods_by_label_and_ends_on_its_success_condition():
    cluster = FakeCluster([job(age=1), job(age=2), done()])
    assert _wait(cluster) == "Succeeded"
    assert cluster.paths[:2] == [
        f"/apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs/mnist-r1",
        f"/api/v1/namespaces/{NS}/pods?{{'labelSelector': 'ddp-mnist.io/job=mnist-r1'}}",
    ]
    indexed = FakeCluster([job("Job", conditions=[{"type": "Complete", "status": "True"}])])
    assert _wait(indexed, kind="Job") == "Complete"
    assert indexed.paths[0] == f"/apis/batch/v1/namespaces/{NS}/jobs/mnist-r1"


def test_a_failed_job_fails_the_wait_with_the_gates_line():
    failed = job(
        conditions=[{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "x"}]
    )
    with pytest.raises(pulumi.RunError) as raised:
        _wait(FakeCluster([job(age=1), failed]))
    assert (
        str(raised.value) == f"PyTorchJob mnist-r1 failed (BackoffLimitExceeded): x; its pods' logs: {LOGS}"
    )


def test_a_stuck_placement_fails_the_wait_at_once_and_says_the_job_stays():
    stuck = pending_pod("mnist-r1-master-0", 10_000, GPU)  # real clock: long past any bound
    with pytest.raises(pulumi.RunError) as raised:
        _wait(FakeCluster([job(age=10_000)], pods=[stuck]))
    message = str(raised.value)
    assert message.startswith(f"Pod {NS}/mnist-r1-master-0 cannot be scheduled after ")
    assert message.endswith(
        "(jobPlacementTimeoutSeconds=300; the PyTorchJob is left in place: fix the cause and run `pulumi up` "
        "again to wait for it)"
    )


def test_the_wait_gives_up_at_its_timeout_with_where_the_job_stood():
    running = {"metadata": {"name": "p"}, "status": {"phase": "Running", "conditions": []}}
    watch = RunWatch(FakeCluster([job(age=1)], pods=[running]), True, 300, poll_seconds=0, wall=lambda: NOW)
    ticks = iter(range(0, 10_000, 1000))
    watch.clock = lambda: float(next(ticks))
    with pytest.raises(pulumi.RunError) as raised:
        _run(watch.until_ended(None, Target("PyTorchJob", "mnist-r1", NS, LOGS), 3600))
    assert str(raised.value) == (
        "PyTorchJob mnist-r1 did not end within jobWaitTimeoutSeconds=3600 "
        f"(PyTorchJob mnist-r1: 1 pod(s): 1 Running); its pods' logs: {LOGS}"
    )


def test_a_preview_reads_once_and_never_fails_on_placement_or_an_unreachable_cluster():
    stuck = pending_pod("mnist-r1-master-0", 10_000, GPU)
    assert _wait(FakeCluster([job(age=10_000)], pods=[stuck]), wait=False) == (
        "running: PyTorchJob mnist-r1: 1 pod(s): 1 Pending (Unschedulable)"
    )
    assert _wait(FakeCluster([ReadError("GET x: 503 Service Unavailable")]), wait=False) == (
        "unknown (the cluster was not read: GET x: 503 Service Unavailable)"
    )


def test_a_read_error_is_retried_and_a_job_deleted_after_it_ended_is_reported_not_failed():
    assert _wait(FakeCluster([ReadError("GET x: timed out"), done()])) == "Succeeded"
    assert _wait(FakeCluster([None])) == NOT_FOUND


def test_read_snapshot_collects_the_claims_the_pods_mount():
    pod = pending_pod("p", 1, "x", claims=("ddp-mnist-data", "ddp-mnist-checkpoints"))
    cluster = FakeCluster([job()], pods=[pod])
    snapshot = read_snapshot(cluster, Target("PyTorchJob", "mnist-r1", NS, LOGS))
    assert set(snapshot.claims) == {"ddp-mnist-data", "ddp-mnist-checkpoints"}
    assert f"/api/v1/namespaces/{NS}/persistentvolumeclaims/ddp-mnist-data" in cluster.paths


class Answers:
    """A ClusterReader answering per path: the seed Job and the training job in the states given."""

    def __init__(self, seed: Mapping[str, Any], trainer: Mapping[str, Any], pods: list[dict]) -> None:
        self.seed, self.trainer, self.pods = seed, trainer, pods

    def get(self, path: str) -> Mapping[str, Any] | None:
        if path.endswith("/jobs/ddp-mnist-seed"):
            return self.seed
        return self.trainer if path.endswith("/mnist-r1") else None

    def items(self, path: str, query: Mapping[str, str] | None = None) -> list[Mapping[str, Any]]:
        selector = (query or {}).get("labelSelector", "")
        return [p for p in self.pods if selector.endswith(p["metadata"]["labels"]["job"])] if query else []


def _program(cluster: Answers, mocks: RecordingMocks | None = None) -> tuple[list[str], dict]:
    from infra.review.manifest import run_program
    from tests.infra.conftest import BASE, stack_config

    watch = RunWatch(cluster, True, 300, poll_seconds=0, log=lambda m, r: None, wall=lambda: NOW)
    config = stack_config({**BASE, "seedSource": "https", "jobWait": True})
    mocks, outputs = run_program(config, mocks or RecordingMocks(), watch=watch)
    return _kinds(mocks), outputs


def _kinds(mocks: RecordingMocks) -> list[str]:
    return [r.inputs.get("kind", "") for r in mocks.registrations]


def test_the_program_awaits_the_seed_then_the_job_through_its_watch():
    seed = job("Job", conditions=[{"type": "Complete", "status": "True"}])
    kinds, outputs = _program(Answers(seed, done(), []))
    assert "PyTorchJob" in kinds
    assert (outputs["seedOutcome"], outputs["jobOutcome"]) == ("Complete", "Succeeded")


def test_a_seed_that_cannot_be_scheduled_fails_the_program_and_the_job_is_never_registered():
    stuck = pending_pod("ddp-mnist-seed-x", 400, "0/1 nodes are available: 1 node(s) had untolerated taint.")
    stuck["metadata"]["labels"] = {"job": "ddp-mnist-seed"}
    with pytest.raises(
        pulumi.RunError, match=r"^Pod ddp-mnist/ddp-mnist-seed-x cannot be scheduled after 400s: "
    ):
        _program(Answers(job("Job"), done(), [stuck]))


def test_a_failed_program_leaves_no_error_for_a_later_garbage_collection_to_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A failed program leaves Outputs whose futures hold its error, never awaited, freed at some later
    garbage collection once the next program has replaced the runtime's state. asyncio's default
    handler then logs "Future exception was never retrieved" with the error's traceback, and on Python
    3.11 formatting a traceback calls ast.parse (the caret anchors): run inside another ast.parse
    (pytest rewriting a test module, a test reading our sources), that one raised "SystemError: AST
    constructor recursion depth mismatch" in an unrelated quick test. The error has reached the
    caller already; nothing is logged for it again. The futures are finalized here as a collection
    would, since what holds them lets go only later."""
    import gc
    import logging

    stuck = pending_pod("ddp-mnist-seed-x", 400, "0/1 nodes are available: 1 node(s) had untolerated taint.")
    stuck["metadata"]["labels"] = {"job": "ddp-mnist-seed"}
    with pytest.raises(pulumi.RunError):
        _program(Answers(job("Job"), done(), [stuck]))
    left = [
        o
        for o in gc.get_objects()
        if type(o) is asyncio.Future and o.done() and not o.cancelled() and o._log_traceback
    ]
    assert left, "the failed program left no future with an unretrieved error: this test shows nothing"
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        for future in left:
            future.__del__()  # what a garbage collection runs when it frees the future
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []


def test_a_claim_waiting_for_its_first_consumer_leaves_the_cause_to_the_pods_scheduling():
    pod = pending_pod("mnist-r1-master-0", 400, GPU, claims=("ddp-mnist-data",))
    claim = {"metadata": {}, "spec": {"storageClassName": "fs"}, "status": {"phase": "Pending"}}
    classes = {
        "fs": {"provisioner": "filestore.csi.storage.gke.io", "volumeBindingMode": "WaitForFirstConsumer"}
    }
    waiting = event(
        "PersistentVolumeClaim",
        "ddp-mnist-data",
        "WaitForFirstConsumer",
        "waiting for first consumer to be created before binding",
        type_="Normal",
    )
    snapshot = Snapshot(
        "PyTorchJob", "mnist-r1", NS, job(), [pod], {"ddp-mnist-data": claim}, classes, [waiting]
    )
    line = diagnose(snapshot, NOW, 300)
    assert line is not None
    assert line.startswith(f"Pod {NS}/mnist-r1-master-0 cannot be scheduled after 400s: {GPU}")
    # Once the scheduler picked a node for it, an unbound claim is the provisioner's to explain.
    claim["metadata"]["annotations"] = {"volume.kubernetes.io/selected-node": "gpu-node-1"}
    failed = event(
        "PersistentVolumeClaim", "ddp-mnist-data", "ProvisioningFailed", "rpc error: code = PermissionDenied"
    )
    snapshot = Snapshot(
        "PyTorchJob", "mnist-r1", NS, job(), [pod], {"ddp-mnist-data": claim}, classes, [failed]
    )
    line = diagnose(snapshot, NOW, 300)
    assert line is not None
    assert line.startswith(
        f"PersistentVolumeClaim {NS}/ddp-mnist-data (class fs, provisioner filestore.csi.storage.gke.io)"
    )


def test_a_volume_that_cannot_be_mounted_fails_after_the_bound_with_the_kubelets_reason():
    pod = {
        "metadata": {"name": "mnist-r1-master-0", "creationTimestamp": ts(900)},
        "spec": {},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": ts(320)}],
            "containerStatuses": [{"name": "pytorch", "state": {"waiting": {"reason": "ContainerCreating"}}}],
        },
    }
    mount = event(
        "Pod",
        "mnist-r1-master-0",
        "FailedMount",
        'MountVolume.SetUp failed for volume "pvc-1" : rpc error: code = DeadlineExceeded',
    )
    line = diagnose(Snapshot("PyTorchJob", "mnist-r1", NS, job(), [pod], events=[mount]), NOW, 300)
    assert line == (
        f"Pod {NS}/mnist-r1-master-0 cannot mount its volumes after 320s: FailedMount: MountVolume.SetUp failed "
        f'for volume "pvc-1" : rpc error: code = DeadlineExceeded; more: kubectl -n {NS} describe pod mnist-r1-master-0'
    )
    assert (
        diagnose(Snapshot("PyTorchJob", "mnist-r1", NS, job(), [pod]), NOW, 300) is None
    )  # no event: still creating


def test_workers_refused_at_admission_beside_a_running_master_fail_with_the_operators_refusal():
    master = {"metadata": {"name": "mnist-r1-master-0"}, "status": {"phase": "Running", "conditions": []}}
    refused = event(
        "PyTorchJob",
        "mnist-r1",
        "FailedCreatePod",
        'Error creating: pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "init-pytorch" ...)',
    )
    snapshot = Snapshot("PyTorchJob", "mnist-r1", NS, job(), [master], events=[refused], expected_pods=2)
    line = diagnose(snapshot, NOW, 300)
    assert line is not None
    assert line.startswith(
        f"PyTorchJob {NS}/mnist-r1 has 1 of its 2 pods after 400s: PyTorchJob mnist-r1 FailedCreatePod: "
        'Error creating: pods "mnist-r1-worker-0" is forbidden: violates PodSecurity'
    )
    # Every pod there: an old refusal in the namespace's events is history, not a cause.
    both = Snapshot("PyTorchJob", "mnist-r1", NS, job(), [master, master], events=[refused], expected_pods=2)
    assert diagnose(both, NOW, 300) is None
    # Some pods, no refusal: the rest may still be on their way.
    assert (
        diagnose(Snapshot("PyTorchJob", "mnist-r1", NS, job(), [master], expected_pods=2), NOW, 300) is None
    )


def test_a_job_fails_the_wait_at_its_failure_target_before_its_other_pods_have_ended():
    """Kubernetes 1.33's Job controller says FailureTarget as soon as a podFailurePolicy rule fails the
    Job, and Failed only once every pod ended: the real node tier waited a peer's grace period (about
    40 s) for it. The wait ends at the first, with the controller's message."""
    from infra.program.common.outcome import job_outcome
    from infra.program.job.jobs import wait_annotations

    logs = "kubectl -n ns logs -l ddp-mnist.io/job=mnist-r1 --prefix --max-log-requests=3"
    message = "Container pytorch for pod ns/mnist-r1-0-abcde failed with exit code 5 matching FailJob rule"
    deciding = {
        "conditions": [
            {"type": "FailureTarget", "status": "True", "reason": "PodFailurePolicy", "message": message}
        ]
    }
    with pytest.raises(pulumi.RunError) as raised:
        job_outcome(deciding, "Job", "mnist-r1", logs)
    assert str(raised.value) == f"Job mnist-r1 failed (PodFailurePolicy): {message}; its pods' logs: {logs}"
    assert "@.type=='FailureTarget'" in wait_annotations("Job", 60)["pulumi.com/waitFor"]
    # Only a batch/v1 Job has that condition; the operators' kinds end on Failed alone.
    assert "FailureTarget" not in wait_annotations("PyTorchJob", 60)["pulumi.com/waitFor"]
    assert job_outcome(deciding, "PyTorchJob", "mnist-r1", logs) == "unknown (not awaited)"


def test_the_wait_first_says_what_it_waits_for_and_the_command_that_shows_its_logs_meanwhile():
    """`pulumi stack output logsCommand` exists only once `up` has ended: the wait names the logs
    command on its first line, for another terminal. A preview (no wait) says nothing of it."""
    for wait, expected in ((True, [f"waiting for PyTorchJob {NS}/mnist-r1; its logs: {LOGS}"]), (False, [])):
        lines: list[str] = []
        watch = RunWatch(
            FakeCluster([done()]),
            wait,
            300,
            poll_seconds=0,
            log=lambda m, r, lines=lines: lines.append(m),
            wall=lambda: NOW,
        )
        assert _run(watch.until_ended(None, Target("PyTorchJob", "mnist-r1", NS, LOGS), 60)) == "Succeeded"
        assert lines == expected


def failed_pod(name: str, code: int, message: str, finished: str, previous: dict | None = None) -> dict:
    """A pod whose container `pytorch` ended with `code`, its termination message `message`."""
    ended = {"exitCode": code, "reason": "Error", "message": message, "finishedAt": finished}
    return {
        "metadata": {"name": name},
        "status": {
            "phase": "Failed" if previous is None else "Running",
            "containerStatuses": [
                {"name": "pytorch", "state": {"terminated": ended}, "lastState": previous or {}}
            ],
        },
    }


TRACEBACK = (
    'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n'
    "trainer: data: /data/mnist not found; seed it\n"
)


def test_each_failed_container_is_said_once_with_its_last_line_and_the_failure_names_the_last():
    """The kubelet's `FallbackToLogsOnError` message is the log's last lines: the watch logs the last
    one for each failed run as it sees it, once, and the Failed line ends with the last of them."""
    first = failed_pod("mnist-r1-0-a", 3, TRACEBACK, ts(30))
    second = failed_pod("mnist-r1-0-b", 3, "launch: worker rank 0 failed with exit code 3\n\n", ts(10))
    restarted = failed_pod(
        "mnist-r1-0-c",
        137,
        "",
        ts(5),
        previous={"terminated": {"exitCode": 1, "reason": "Error", "message": "boom", "finishedAt": ts(8)}},
    )
    failed = job(
        "Job",
        conditions=[{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "x"}],
    )
    cluster = FakeCluster([job("Job"), job("Job"), failed], pods=[first])
    lines: list[str] = []
    watch = RunWatch(cluster, True, 300, poll_seconds=0, log=lambda m, r: lines.append(m), wall=lambda: NOW)
    target = Target("Job", "mnist-r1", NS, LOGS)
    real_items = cluster.items
    polls = iter([[first], [first, second], [first, second, restarted]])
    cluster.items = lambda path, query=None: (
        next(polls) if path.endswith("/pods") else real_items(path, query)
    )
    with pytest.raises(pulumi.RunError) as raised:
        _run(watch.until_ended(None, target, 3600))
    said = [line for line in lines if line.startswith("Pod ")]
    assert said == [
        f"Pod {NS}/mnist-r1-0-a: container pytorch exited 3 (Error): trainer: data: /data/mnist not found; seed it",
        f"Pod {NS}/mnist-r1-0-b: container pytorch exited 3 (Error): launch: worker rank 0 failed with exit code 3",
        f"Pod {NS}/mnist-r1-0-c: container pytorch exited 1 (Error): boom",
        f"Pod {NS}/mnist-r1-0-c: container pytorch exited 137 (Error) and left no message",
    ]
    assert str(raised.value) == (
        f"Job mnist-r1 failed (BackoffLimitExceeded): x; its pods' logs: {LOGS}; the last failed "
        f"Pod {NS}/mnist-r1-0-c: container pytorch exited 137 (Error) and left no message"
    )


def test_the_failure_names_the_pod_the_condition_names_not_the_peer_that_failed_after_it():
    """A Job's pod failure policy names the pod whose exit code matched; its peer, ended by it, fails
    later (the trainer's peer-lost exit). The Failed line quotes the named pod's container."""
    cause = failed_pod("mnist-r1-0-x", 5, "launch: worker rank 0 failed with exit code 5", ts(2))
    # A name that only starts like the cause's must not count as named.
    peer = failed_pod("mnist-r1-0-x2", 200, "launch: worker rank 1 failed with exit code 200", ts(1))
    message = f"Container pytorch for pod {NS}/mnist-r1-0-x failed with exit code 5 matching FailJob rule at index 0"
    failed = job(
        "Job",
        conditions=[{"type": "Failed", "status": "True", "reason": "PodFailurePolicy", "message": message}],
    )
    for pods, said in (
        (
            [cause, peer],
            f"the named Pod {NS}/mnist-r1-0-x: container pytorch exited 5 (Error): launch: worker rank 0",
        ),
        (
            [peer],
            f"the last failed Pod {NS}/mnist-r1-0-x2: container pytorch exited 200 (Error): launch: worker rank 1",
        ),
    ):
        watch = RunWatch(
            FakeCluster([failed], pods=pods),
            True,
            300,
            poll_seconds=0,
            log=lambda m, r: None,
            wall=lambda: NOW,
        )
        with pytest.raises(pulumi.RunError) as raised:
            _run(watch.until_ended(None, Target("Job", "mnist-r1", NS, LOGS), 3600))
        assert said in str(raised.value), str(raised.value)


def test_a_preview_says_no_failure_and_a_long_message_is_cut():
    from infra.program.job.placement import SAID_CHARS, last_line

    pod = failed_pod("p", 3, "x", ts(1))
    lines: list[str] = []
    watch = RunWatch(
        FakeCluster([job()], pods=[pod]), False, 300, poll_seconds=0, log=lambda m, r: lines.append(m)
    )
    assert _run(watch.until_ended(None, Target("PyTorchJob", "mnist-r1", NS, LOGS), 60)).startswith(
        "running:"
    )
    assert lines == []
    cut = last_line("a" * (SAID_CHARS + 50))
    assert len(cut) == SAID_CHARS and cut.endswith("…")
    assert last_line(" \n\n") == ""
