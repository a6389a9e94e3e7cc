"""Kubeflow Trainer v2, with the real engine, API server, Job controller, JobSet v0.12.0 and Trainer
v2.3.0 (their manifests vendored in infra/manifests, the stack's default):

11. the platform stack, updated to gke-platform's shape, installs Trainer v2 with JobSet next to the
    training operator, replacing nothing; its smoke PyTorchJob ends `Succeeded` and its smoke TrainJob
    `Complete` (their pods run no script: KWOK completes them, and the controllers end the jobs);
12. a TrainJob stack comes up from empty volumes: the seed completes before the TrainJob exists, the
    real Trainer controller makes the JobSet, JobSet its Jobs, the Job controller their pods, and the
    TrainJob completes; the pods, as the API server admitted them, equal the offline model's field by
    field; a second `up` and a preview after `refresh` change nothing;
25. (the TrainJob's case of test_preemption.py) a node pod evicted through the API, which a KWOK stage
    then ends with exit 143, and its peer, which another stage ends with exit 201 once the test labels
    it (both codes written by the stages and the test in the kubelet's and the trainer's place,
    infra/localcluster/fleet.py): what is real is the reaction, both pods replaced by the
    JobSet's Job, whose podFailurePolicy ignores them: no failure counted, no JobSet restart, and the
    TrainJob completes;
19. the policy pack (`--policy-pack policy`, the real CLI) passes the platform stack in gke-platform's
    shape (the operator, Trainer v2 with JobSet, KServe: every object of their upstream manifests), and
    refuses KServe's own workloads once `excludeNamespaces` no longer skips them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pulumi import automation as auto

from infra.stackconfig import ROOT
from tests.e2e import judge, live
from tests.e2e.model import modelled
from tests.e2e.project import Backend
from tests.e2e_local import scenario

pytestmark = pytest.mark.e2e_local

JOB = "mnist-r1"
SEED = "ddp-mnist-seed"
NAMESPACE = "ddp-mnist-local-trainjob"
TRAINER_NAMESPACE = "kubeflow-system"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"


@pytest.fixture(scope="module")
def platform_v2(platform: dict) -> dict:
    """The session's platform stack updated to gke-platform's shape: Trainer v2 next to the operator."""
    result = scenario.update_platform(
        platform, {"ddp-mnist:trainerInstall": "true", "ddp-mnist:allowBothOperators": "true"}
    )
    return {"outputs": scenario.outputs(result), "result": result}


@pytest.fixture(scope="module")
def trainjob(backend: Backend, platform_v2: dict) -> Iterator[dict]:
    yield from scenario.job_stack(backend, "trainjob", NAMESPACE, jobKind="trainjob", trainerPresent="true")


def test_11_a_platform_stack_installs_trainer_v2_and_jobset(platform_v2: dict) -> None:
    changed = scenario.changes(platform_v2["result"].summary.resource_changes)
    assert "replace" not in changed and "delete" not in changed, changed
    outputs = platform_v2["outputs"]
    # `up` awaited both smoke jobs (infra/program/platform/smoke.py; a failed one fails `up` itself).
    assert outputs["operatorSmokeCheck"] == "Succeeded"
    assert outputs["trainerSmokeCheck"] == "Complete"
    for crd in ("trainjobs.trainer.kubeflow.org", "jobsets.jobset.x-k8s.io"):
        assert live.exists("crd", crd)
    for deployment in ("kubeflow-trainer-controller-manager", "jobset-controller-manager"):
        assert live.get("deployment", deployment, TRAINER_NAMESPACE)["status"].get("availableReplicas") == 1
    # Each controller's pod alone is selected by the platform's ingress policy: webhook, metrics, and
    # Trainer's status server.
    ingress = scenario.controller_ingress("kubeflow-trainer-controller-manager", TRAINER_NAMESPACE)
    assert sorted(ingress) == [8443, 9443, 10443]
    assert sorted(scenario.controller_ingress("jobset-controller-manager", TRAINER_NAMESPACE)) == [8443, 9443]


def test_12_a_trainjob_stack_seeds_trains_through_jobset_and_changes_nothing_after(trainjob: dict) -> None:
    stack: auto.Stack = trainjob["stack"]
    outputs = scenario.outputs(stack.up(on_output=print, show_secrets=False))
    assert outputs["seedOutcome"] == "Complete"
    assert outputs["jobOutcome"] == "Complete", outputs["jobOutcome"]
    seed = live.get("job", SEED, NAMESPACE)
    train = live.get("trainjob", JOB, NAMESPACE)
    assert judge.job_condition(train) == "Complete"
    assert seed["status"]["completionTime"] <= train["metadata"]["creationTimestamp"]
    jobset = live.get("jobset", JOB, NAMESPACE)
    assert jobset["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"
    completed = [c for c in jobset["status"]["conditions"] if c["type"] == "Completed"]
    assert completed and completed[0]["status"] == "True", jobset["status"]
    assert judge.refused_pod_creations(live.events(NAMESPACE)) == []

    view = modelled("local-trainjob", trainjob["config"])
    assert view.admission.refusals == []
    for pod_model in (p for p in view.admission.pods if p.owner.startswith("TrainJob/")):
        model = pod_model.manifest
        selector = f"jobset.sigs.k8s.io/replicatedjob-name={pod_model.role},{INDEX_LABEL}={pod_model.index}"
        pods = scenario.wait_for_pods(NAMESPACE, selector)
        assert len(pods) == 1, (selector, [p["metadata"]["name"] for p in pods])
        container = model["spec"]["containers"][0]["name"]
        assert judge.pod_differences(pods[0], model, container=container) == []
        assert scenario.covered_differences(pods[0]["spec"], model["spec"], ".spec") == []
        finished = scenario.as_finished(model, pods[0])
        assert scenario.covered_differences(pods[0]["metadata"], finished["metadata"], ".metadata") == []

    again = stack.up(on_output=print, show_secrets=False)
    assert scenario.changes(again.summary.resource_changes) == {}
    stack.refresh(on_output=print)
    assert scenario.changes(stack.preview(on_output=print).change_summary) == {}


def test_25_an_evicted_node_pod_restarts_the_trainjob_without_counting_a_failure(
    backend: Backend, platform_v2: dict
) -> None:
    namespace = "ddp-mnist-local-preempt-trainjob"
    stack, _ = scenario.new_job_stack(
        backend, "preempt-trainjob", namespace, jobKind="trainjob", trainerPresent="true", jobWait="false"
    )
    try:
        run = scenario.preempt_rank_0(stack, namespace, JOB, "trainjob")
        condition = scenario.disruption(run["evicted"])
        assert condition and condition["reason"] == "EvictionByEvictionAPI", run["evicted"]["status"]
        assert run["outcome"] == "Complete"
        (job,) = live.items("job", namespace, f"jobset.sigs.k8s.io/jobset-name={JOB}")
        assert job["status"].get("failed", 0) == 0, job["status"]  # ignored by the podFailurePolicy
        assert job["status"].get("succeeded") == 2, job["status"]
        assert live.get("jobset", JOB, namespace)["status"].get("restarts", 0) == 0
        finished = [p["metadata"]["uid"] for p in run["final_pods"] if p["status"]["phase"] == "Succeeded"]
        assert len(finished) == 2 and not run["first_uids"] & set(finished), run["final_pods"]
    finally:
        scenario.destroy(stack, namespace)


def test_19_the_policy_pack_passes_the_platform_stack_in_gke_platforms_shape(
    platform: dict, platform_v2: dict, tmp_path_factory: pytest.TempPathFactory
) -> None:
    if platform["config"].get("ddp-mnist:kserveInstall") != "true":  # this module run alone
        scenario.update_platform(platform, {"ddp-mnist:kserveInstall": "true"})
    stack: auto.Stack = platform["stack"]
    said: list[str] = []
    stack.preview(on_output=said.append, policy_packs=[str(ROOT / "policy")])
    assert "ddp-mnist-guardrails" in "".join(said), "".join(said)[-3000:]
    # The same pack with nothing excluded sees KServe's own workloads and refuses them (the release
    # manifest's controller has a container without requests and limits).
    strict = tmp_path_factory.mktemp("policy") / "strict.json"
    strict.write_text('{"requests-and-limits-set": {"excludeNamespaces": []}}')
    with pytest.raises(auto.CommandError) as refused:
        stack.preview(on_output=print, policy_packs=[str(ROOT / "policy")], policy_pack_configs=[str(strict)])
    assert "requests-and-limits-set" in str(refused.value), str(refused.value)[-3000:]
    assert "kserve-controller-manager" in str(refused.value), str(refused.value)[-3000:]
