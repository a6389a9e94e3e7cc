"""Scenarios 1, 2, 3 and 6 on one job stack, the dev stack's twin, in this order.

1. up from empty volumes: the seed Job completes, the PyTorchJob succeeds, metrics.json on the
   checkpoint PVC shows >= 98%, the model and its SHA256SUMS are in MinIO and verify;
2. an edit of the job (its pods' CPU limit): preview shows a replace, up replaces, the run resumes from
   its checkpoints;
3. destroy keeps the checkpoint claim and its namespace; up with `reattachRetained` adopts them and the
   same run id resumes;
6. no pod was refused (no FailedCreate/FailedCreatePod event), the live Worker pod matches the offline
   model, and the NetworkPolicy let the ranks meet.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from pulumi import automation as auto

from tests.e2e import judge, live, minio, project
from tests.e2e.conftest import destroy
from tests.e2e.fixtures.cluster import BUCKET, PREFIX
from tests.e2e.model import modelled, modelled_pod
from tests.e2e.project import Backend, program_stack, set_config, up
from tests.e2e.stacks import JOB_NAMESPACE, job_config

pytestmark = pytest.mark.e2e

JOB = "mnist-r1"
METRICS = f"/checkpoints/{JOB}/metrics.json"
CLAIMS = {"ddp-mnist-checkpoints": "/checkpoints"}
MIN_ACCURACY = 0.98
EDITED_CPU_LIMIT = "2"


@pytest.fixture(scope="module")
def job(backend: Backend, image: str, s3_keys: tuple[str, str], platform: dict) -> Iterator[dict]:
    """The job stack, its config and the facts later scenarios compare with."""
    config = job_config(image, *s3_keys)
    stack = program_stack(backend, "e2e-job", config)
    state: dict = {"stack": stack, "config": config, "image": image, "keys": s3_keys}
    yield state
    destroy(stack, JOB_NAMESPACE)


def _metrics(state: dict) -> dict:
    text = live.read_files(JOB_NAMESPACE, state["image"], CLAIMS, [METRICS])[METRICS]
    return json.loads(text)


def test_1_a_fresh_job_stack_seeds_trains_and_exports(job: dict) -> None:
    outputs = up(job["stack"])
    assert outputs["seedOutcome"] == "Complete"
    assert outputs["jobOutcome"] == "Succeeded"
    assert outputs["checkpointDir"] == f"/checkpoints/{JOB}"
    assert outputs["modelExport"] == f"s3://{BUCKET}/{PREFIX}/models/{JOB}"
    assert judge.job_condition(live.get("job", "ddp-mnist-seed", JOB_NAMESPACE)) == "Complete"
    assert judge.job_condition(live.get("pytorchjob", JOB, JOB_NAMESPACE)) == "Succeeded"

    metrics = _metrics(job)
    assert judge.final_accuracy(json.dumps(metrics)) >= MIN_ACCURACY
    job["history"] = metrics["history"]
    job["pytorchjob_uid"] = live.get("pytorchjob", JOB, JOB_NAMESPACE)["metadata"]["uid"]
    job["claim_uid"] = live.get("pvc", "ddp-mnist-checkpoints", JOB_NAMESPACE)["metadata"]["uid"]

    exported = minio.read_objects(
        job["keys"], BUCKET, f"{PREFIX}/models/{JOB}", ["model.pt", "metrics.json", "SHA256SUMS"]
    )
    assert sorted(exported) == ["SHA256SUMS", "metrics.json", "model.pt"]
    assert judge.sha256sums_problems(exported, exported["SHA256SUMS"].decode()) == []


def test_6_no_pod_refused_live_pods_match_the_model_and_ranks_met(job: dict) -> None:
    assert judge.refused_pod_creations(live.events(JOB_NAMESPACE)) == []
    view = modelled("e2e-job", job["config"])
    assert view.admission.refusals == []
    for role in ("Worker", "Master"):
        model = modelled_pod(view, role)
        pod = live.get("pod", model["metadata"]["name"], JOB_NAMESPACE)
        assert judge.pod_differences(pod, model, container="pytorch") == []
    # The ranks met through the NetworkPolicy: the job it selects succeeded with both nodes.
    policy = live.get("networkpolicy", JOB, JOB_NAMESPACE)
    assert policy["spec"]["podSelector"]["matchLabels"]["ddp-mnist.io/job"] == JOB
    statuses = live.get("pytorchjob", JOB, JOB_NAMESPACE)["status"]["replicaStatuses"]
    assert {kind: status.get("succeeded") for kind, status in statuses.items()} == {"Master": 1, "Worker": 1}


def test_2_an_edited_job_is_replaced_and_resumes(job: dict) -> None:
    # An edit of the pods (a CPU limit), not of the schedule: the trainer refuses to resume a run's
    # checkpoints under other epochs or batch size, so the same run id with other flags is no resume.
    restarts_before = judge.restarts_recorded(json.dumps(_metrics(job)))
    job["config"] = {**job["config"], "ddp-mnist:jobCpuLimit": EDITED_CPU_LIMIT}
    set_config(job["stack"], job["config"])
    steps: list[tuple[str, str]] = []
    job["stack"].preview(on_output=print, on_event=lambda event: steps.extend(judge.planned_steps(event)))
    assert ("replace", "kubernetes:kubeflow.org/v1:PyTorchJob") in steps

    up(job["stack"])
    assert live.get("pytorchjob", JOB, JOB_NAMESPACE)["metadata"]["uid"] != job["pytorchjob_uid"]
    pod = live.get("pod", f"{JOB}-master-0", JOB_NAMESPACE)
    assert pod["spec"]["containers"][0]["resources"]["limits"]["cpu"] == EDITED_CPU_LIMIT
    metrics = _metrics(job)
    # Resumed from the run's final checkpoint, not trained afresh: the same epoch records, and the
    # start recorded as a restart.
    assert metrics["history"] == job["history"]
    assert judge.restarts_recorded(json.dumps(metrics)) == restarts_before + 1


def test_3_destroy_keeps_the_claim_and_reattaching_resumes_the_same_run(job: dict) -> None:
    stack: auto.Stack = job["stack"]
    project.destroy(stack)
    assert live.exists("namespace", JOB_NAMESPACE)
    assert live.get("pvc", "ddp-mnist-checkpoints", JOB_NAMESPACE)["metadata"]["uid"] == job["claim_uid"]
    assert not live.exists("pytorchjob", JOB, JOB_NAMESPACE)
    restarts_before = judge.restarts_recorded(json.dumps(_metrics(job)))

    job["config"] = {**job["config"], "ddp-mnist:reattachRetained": "true"}
    set_config(stack, job["config"])
    up(stack)
    assert live.get("pvc", "ddp-mnist-checkpoints", JOB_NAMESPACE)["metadata"]["uid"] == job["claim_uid"]
    metrics = _metrics(job)
    assert metrics["history"] == job["history"]  # the finished run was found, not trained again
    assert judge.restarts_recorded(json.dumps(metrics)) == restarts_before + 1
