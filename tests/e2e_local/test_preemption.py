"""Preemption, with the real engine, API server, Job controller and training operator:

25. a job pod evicted through the API (what `kubectl drain` and a spot node's termination handler call)
    gets `DisruptionTarget`, ends as the trainer ends on SIGTERM (exit 143, after its checkpoint), and
    its peer then exits 201 (the ranks' agreed stop); the job kind brings both back and the job ends as
    an uninterrupted one, with no failure counted where the kind counts them: the Indexed Job's
    podFailurePolicy ignores both (`status.failed` stays 0), the training operator recreates both
    under `restartPolicy: ExitCode` (the stack's default). The TrainJob's case is in test_trainjob.py
    (it needs Trainer v2 installed). What happens inside the pods (the checkpoint at the agreed step,
    the exact resume) is the local scheduler's to show (`tests/local/test_preempt.py`): KWOK runs no
    process.
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
            exits = scenario.exited_with_codes(namespace)
            assert {143, 201} <= exits, exits  # the operator saw both ends and retried them
    finally:
        scenario.destroy(stack, namespace)
