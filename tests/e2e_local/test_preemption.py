"""Preemption, with the real engine, API server, Job controller and training operator:

25. a job pod evicted through the API (what `kubectl drain` and a spot node's termination handler call)
    gets `DisruptionTarget` from the API server; the job kind brings it and its peer back and the job
    ends as an uninterrupted one, with no failure counted where the kind counts them: the Indexed
    Job's podFailurePolicy ignores both ends (`status.failed` stays 0), the training operator
    recreates both under `restartPolicy: ExitCode` (the stack's default). The TrainJob's case is in
    test_trainjob.py (it needs Trainer v2 installed).

The exit codes are not the trainer's here: no kubelet and no trainer run under KWOK. A KWOK stage
(infra/localcluster/fleet.py, `sigterm_stage`) writes exit 143 on the evicted pod, what the
kubelet would report once the trainer ends on SIGTERM after its checkpoint; the test labels the peer
and another stage (`failure_stage`) writes exit 201, the trainer's code once the ranks agreed to stop.
What is real is the Job controller's and the training operator's reaction to those codes.
What happens inside the pods (the checkpoint at the agreed step, the exit codes, the exact resume) is
the local scheduler's to show (`tests/local/test_preempt.py`).
"""

from __future__ import annotations

import pytest

from tests.e2e import live
from tests.e2e.project import Backend
from tests.e2e_local import scenario

pytestmark = pytest.mark.e2e_local

JOB = "mnist-r1"
NAMESPACE = "ddp-mnist-local-preempt"


@pytest.mark.parametrize(
    ("kind", "live_kind", "outcome"),
    [("indexed-job", "job", "Complete"), ("pytorchjob", "pytorchjob", "Succeeded")],
)
def test_25_an_evicted_pod_restarts_the_job_without_counting_a_failure(
    backend: Backend, platform: dict, kind: str, live_kind: str, outcome: str
) -> None:
    namespace = f"{NAMESPACE}-{kind}"
    stack, _ = scenario.new_job_stack(backend, f"preempt-{kind}", namespace, jobKind=kind, jobWait="false")
    try:
        run = scenario.preempt_rank_0(stack, namespace, JOB, live_kind)
        condition = scenario.disruption(run["evicted"])
        assert run["evicted"]["metadata"].get("deletionTimestamp"), run["evicted"]["metadata"]
        assert condition and condition["status"] == "True", run["evicted"]["status"]
        assert condition["reason"] == "EvictionByEvictionAPI", condition
        assert run["outcome"] == outcome
        if live_kind == "job":
            status = live.get("job", JOB, namespace)["status"]
            assert status.get("failed", 0) == 0, status  # both pods' ends ignored by the podFailurePolicy
            assert status.get("succeeded") == 2, status
            finished = [
                p["metadata"]["uid"] for p in run["final_pods"] if p["status"]["phase"] == "Succeeded"
            ]
            assert len(finished) == 2 and not run["first_uids"] & set(finished), run["final_pods"]
        else:
            # The operator deletes the pods it retries: the two left are both new.
            final_uids = {p["metadata"]["uid"] for p in run["final_pods"]}
            assert len(final_uids) == 2 and not run["first_uids"] & final_uids, run["final_pods"]
            # The peer is deleted by no one but the operator, so its 201 is always seen and retried. The
            # evicted pod's 143 is seen only if the operator reconciles before the pod is gone; else it
            # finds the index empty and creates the pod again (v1.9.4 pkg/controller.v1/common/pod.go,
            # ReconcilePods): both paths recreate it, and neither fails the job.
            exits = scenario.exited_with_codes(namespace)
            assert 201 in exits and exits <= {0, 143, 201}, exits
    finally:
        scenario.destroy(stack, namespace)
