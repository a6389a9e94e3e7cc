"""One retry rule for every job kind, and what each does with a preempted pod: the rendered restart
policies, deadlines and podFailurePolicies, and the grace period every training pod gets."""

from __future__ import annotations

import pytest

from infra.review.cluster import cluster_view
from tests.infra.conftest import render_config, training_job

KINDS = {
    "pytorchjob": {},
    "indexed-job": {"jobKind": "indexed-job"},
    "trainjob": {"jobKind": "trainjob", "trainerInstall": True, "operatorInstall": False},
}
DISRUPTION_IGNORED = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}


def _training_pods(values: dict) -> list[dict]:
    rendering = render_config({"jobNodes": 2, **values})
    name = training_job(rendering)["metadata"]["name"]
    pods = cluster_view(rendering.objects, rendering.settings).admission.pods
    return [p.manifest for p in pods if p.owner.endswith(f"/{name}")]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_training_pod_gets_the_stacks_grace_period(kind):
    pods = _training_pods({**KINDS[kind], "jobTerminationGracePeriodSeconds": 90})
    assert len(pods) == 2
    assert [p["spec"]["terminationGracePeriodSeconds"] for p in pods] == [90, 90]
    default = _training_pods(KINDS[kind])
    assert [p["spec"]["terminationGracePeriodSeconds"] for p in default] == [60, 60]


def test_a_pytorchjob_fails_bad_input_at_once_and_retries_the_rest_within_a_day_by_default():
    job = training_job(render_config({"jobNodes": 2}))
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert [replicas[r]["restartPolicy"] for r in ("Master", "Worker")] == ["ExitCode", "ExitCode"]
    assert job["spec"]["runPolicy"]["activeDeadlineSeconds"] == 86400
    # The operator turns ExitCode into pods that the kubelet never restarts in place.
    assert [p["spec"]["restartPolicy"] for p in _training_pods({})] == ["Never", "Never"]


def test_on_failure_stays_available_and_a_deadline_of_zero_only_without_exit_code():
    job = training_job(render_config({"jobRestartPolicy": "OnFailure", "jobActiveDeadlineSeconds": 0}))
    assert job["spec"]["pytorchReplicaSpecs"]["Master"]["restartPolicy"] == "OnFailure"
    assert "activeDeadlineSeconds" not in job["spec"]["runPolicy"]


def test_the_job_kinds_ignore_a_disrupted_pod_before_any_exit_code_rule():
    indexed = training_job(render_config(KINDS["indexed-job"]))["spec"]
    assert indexed["podFailurePolicy"]["rules"][0] == DISRUPTION_IGNORED
    assert indexed["activeDeadlineSeconds"] == 86400
    rendering = render_config(KINDS["trainjob"])
    runtime = next(o for o in rendering.objects if o["kind"] == "TrainingRuntime")
    node_job = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert node_job["podFailurePolicy"]["rules"][0] == DISRUPTION_IGNORED
    assert training_job(rendering)["spec"]["activeDeadlineSeconds"] == 86400
