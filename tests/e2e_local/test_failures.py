"""Failures, with the real engine, Job controller and training operator:

7. a seed whose pod exits 3 fails `pulumi up` with one line, and the training job is never created;
   the next `up` after the fix succeeds without `--replace`;
8. the Indexed Job with `jobWait: false` is replaced without AlreadyExists; the pods the Job controller
   created for it equal the offline model's field by field (scenario 5 for this job kind);
9. the retry rule: exit 1-127 fails the job at once, exit >= 128 is retried (the Job controller with our
   podFailurePolicy; the operator with our restart policy).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pulumi import automation as auto

from infra.program.common.meta import JOB_LABEL
from tests.e2e import judge, live
from tests.e2e.model import modelled, modelled_pod
from tests.e2e.project import Backend, set_config
from tests.e2e.stacks import SEED_NAMESPACE, job_config, seed_config
from tests.e2e_local import scenario

pytestmark = pytest.mark.e2e_local

SEED = "ddp-mnist-seed"
JOB = "mnist-r1"
INDEXED_NAMESPACE = "ddp-mnist-local-indexed"
RETRY_NAMESPACE = "ddp-mnist-local-retry"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"


def _cleanup(stack: auto.Stack, namespace: str) -> None:
    stack.destroy(on_output=print)
    live.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=false")


@pytest.fixture(scope="module")
def seeded(backend: Backend, platform: dict) -> Iterator[auto.Stack]:
    stack = scenario.stack(backend, "local-seed", seed_config(scenario.IMAGE, *scenario.KEYS, bucket="mnist"))
    yield stack
    _cleanup(stack, SEED_NAMESPACE)


def test_7_a_failed_seed_fails_up_with_one_line_and_the_next_up_succeeds(seeded: auto.Stack) -> None:
    failing = scenario.failing_pods("seed-exits-3", SEED_NAMESPACE, {"job-name": SEED}, 3)
    with failing, pytest.raises(auto.CommandError) as failed:
        seeded.up(on_output=print, show_secrets=False)
    lines = judge.messages(str(failed.value), rf"Job {SEED} failed")
    assert len(lines) == 1, str(failed.value)[-3000:]
    assert judge.job_condition(live.get("job", SEED, SEED_NAMESPACE)) == "Failed"
    pod = live.items("pod", SEED_NAMESPACE, f"job-name={SEED}")[0]
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    assert not live.exists("pytorchjob", JOB, SEED_NAMESPACE)

    outputs = scenario.outputs(seeded.up(on_output=print, show_secrets=False))  # no --replace
    assert outputs["seedOutcome"] == "Complete"
    assert live.exists("pytorchjob", JOB, SEED_NAMESPACE)


def test_8_an_indexed_job_not_awaited_is_replaced_without_already_exists(
    backend: Backend, platform: dict
) -> None:
    config = job_config(
        scenario.IMAGE,
        *scenario.KEYS,
        namespace=INDEXED_NAMESPACE,
        storageClassName="ddp-mnist-nfs-indexed",
        jobKind="indexed-job",
        jobWait="false",
    )
    stack = scenario.stack(backend, "local-indexed", config)
    try:
        stack.up(on_output=print, show_secrets=False)
        first = live.get("job", JOB, INDEXED_NAMESPACE)["metadata"]["uid"]
        _the_job_controllers_pods_equal_the_model(config)
        set_config(stack, {**config, "ddp-mnist:jobCpuLimit": "3"})
        stack.up(on_output=print, show_secrets=False)  # AlreadyExists would fail this
        assert live.get("job", JOB, INDEXED_NAMESPACE)["metadata"]["uid"] != first
    finally:
        _cleanup(stack, INDEXED_NAMESPACE)


def _the_job_controllers_pods_equal_the_model(config: dict[str, str]) -> None:
    """Scenario 5's comparison for the Indexed Job: each completion's pod as the Job controller created
    it and the API server admitted it, field by field for what infra/review/effective sets."""
    view = modelled("local-indexed", config)
    assert view.admission.refusals == []
    for index in range(int(config["ddp-mnist:jobNodes"])):
        model = modelled_pod(view, "Index", index)
        selector = f"job-name={JOB},{INDEX_LABEL}={index}"
        pods = scenario.wait_for_pods(INDEXED_NAMESPACE, selector)
        assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
        container = model["spec"]["containers"][0]["name"]
        assert judge.pod_differences(pods[0], model, container=container) == []
        assert scenario.covered_differences(pods[0]["spec"], model["spec"], ".spec") == []
        finished = scenario.as_finished(model, pods[0])
        assert scenario.covered_differences(pods[0]["metadata"], finished["metadata"], ".metadata") == []


@pytest.mark.parametrize(
    ("kind", "exit_code", "outcome"),
    [
        ("indexed-job", 2, "Failed"),
        ("indexed-job", 137, "Complete"),
        ("pytorchjob", 2, "Failed"),
        ("pytorchjob", 137, "Succeeded"),
    ],
)
def test_9_the_retry_rule(backend: Backend, platform: dict, kind: str, exit_code: int, outcome: str) -> None:
    """The first pod of rank 0 exits with `exit_code` once; the job's final outcome."""
    namespace = f"{RETRY_NAMESPACE}-{kind}-{exit_code}"
    # ExitCode: the PyTorchJob rule this scenario judges (OnFailure restarts containers in place, which a
    # kubelet does and KWOK does not); the program requires a deadline with it.
    config = job_config(
        scenario.IMAGE,
        *scenario.KEYS,
        namespace=namespace,
        jobKind=kind,
        storageClassName=f"ddp-mnist-nfs-retry-{kind}-{exit_code}",
        jobWait="false",
        jobRestartPolicy="ExitCode",
        jobActiveDeadlineSeconds="600",
    )
    stack = scenario.stack(backend, f"local-retry-{kind}-{exit_code}", config)
    live_kind = "job" if kind == "indexed-job" else "pytorchjob"
    try:
        with scenario.failing_pods(f"retry-{kind}-{exit_code}", namespace, {JOB_LABEL: JOB}, exit_code):
            stack.up(on_output=print, show_secrets=False)
            failed = scenario.wait_for_failed_pod(namespace, exit_code)
        assert failed, f"no pod of {namespace} exited {exit_code}"
        assert scenario.wait_outcome(live_kind, JOB, namespace) == outcome
    finally:
        _cleanup(stack, namespace)
