"""The post-install smoke check: a tiny PyTorchJob (and TrainJob) that proves the installed operators run
a job in a namespace enforcing Pod Security 'restricted', and fails `pulumi up` naming the cause."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from infra.local.plan import workloads
from infra.program.checks import ConfigError
from infra.program.platform.smoke import DEADLINE_SECONDS, SMOKE_NAMESPACE, SMOKE_POLICY
from infra.program.settings import OPERATOR_INIT_IMAGE
from infra.review.admission import admit, namespace_of
from infra.review.cluster import cluster_view, controllers_for
from infra.review.effective import Controllers, derive
from infra.review.effective.pytorchjob import UPSTREAM_INIT_CONTAINER_TEMPLATE
from infra.review.manifest import RecordingMocks, render, run_program
from infra.review.render import DEFAULT_CRD, DEFAULT_CRD_DIR, trainer_crds_present, validation_errors
from tests.infra.conftest import BASE, by_kind, one, render_config, shipped, stack_config

PLATFORM = {"stackRole": "platform"}
EVENTS = "see `kubectl -n ddp-mnist-smoke get events --field-selector involvedObject.name={name}`"

COMPONENT = "app.kubernetes.io/component"


def run_program_outputs(values: dict[str, Any], mocks: RecordingMocks) -> dict[str, Any]:
    return run_program(stack_config(values), mocks)[1]


def smoke_objects(rendering: Any) -> list[dict[str, Any]]:
    return [
        o
        for o in rendering.objects
        if o["metadata"].get("namespace", o["metadata"]["name"]) == SMOKE_NAMESPACE
    ]


def test_a_platform_stack_runs_a_restricted_pytorchjob_after_the_operator():
    rendering = render(stack_config(PLATFORM))
    namespace = one(rendering, "Namespace")
    assert namespace["metadata"]["name"] == SMOKE_NAMESPACE
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    job = one(rendering, "PyTorchJob")
    assert job["metadata"]["namespace"] == SMOKE_NAMESPACE
    assert job["metadata"]["annotations"]["pulumi.com/waitFor"] == (
        "jsonpath={.status.conditions[?(@.status=='True' && (@.type=='Succeeded' || @.type=='Failed'))].type}"
    )
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert {t: r["replicas"] for t, r in replicas.items()} == {"Master": 1, "Worker": 1}
    assert {r["restartPolicy"] for r in replicas.values()} == {"Never"}
    run_policy = job["spec"]["runPolicy"]
    assert run_policy["backoffLimit"] == 0
    assert run_policy["cleanPodPolicy"] == "All"  # the pods go when it ends
    assert run_policy["ttlSecondsAfterFinished"] > 0  # and the job after a while
    assert run_policy["activeDeadlineSeconds"] == DEADLINE_SECONDS
    for replica in replicas.values():
        (container,) = replica["template"]["spec"]["containers"]
        assert container["image"] == OPERATOR_INIT_IMAGE  # no GPU, no trainer image: the init image
        assert "nvidia.com/gpu" not in container["resources"]["limits"]
    # The Master succeeds only once the Worker (past its init container) is up.
    assert (
        "getent hosts operator-smoke-worker-0"
        in replicas["Master"]["template"]["spec"]["containers"][0]["command"][2]
    )
    (reg,) = [r for r in rendering.registrations if r.type.endswith(":PyTorchJob")]
    assert "training-operator-manifests" in reg.dependencies  # the overlay, its Deployment awaited
    assert reg.replace_on_changes == ("spec",) and reg.delete_before_replace
    assert rendering.outputs["operatorSmokeCheck"] == "unknown (not awaited)"


def test_the_smoke_pods_follow_the_init_image_mirror():
    mirror = "registry.example.internal/alpine:3.20@sha256:" + "a" * 64
    rendering = render(stack_config({**PLATFORM, "operatorInitContainerImage": mirror}))
    images = {
        c["image"]
        for r in one(rendering, "PyTorchJob")["spec"]["pytorchReplicaSpecs"].values()
        for c in r["template"]["spec"]["containers"]
    }
    assert images == {mirror}
    worker = next(
        p for p in cluster_view(rendering.objects, rendering.settings).admission.pods if p.role == "Worker"
    )
    assert [c["image"] for c in worker.spec["initContainers"]] == [mirror]


def test_the_effective_worker_carries_the_restricted_init_container_and_is_admitted():
    rendering = render(stack_config(PLATFORM))
    view = cluster_view(rendering.objects, rendering.settings)
    assert view.admission.refusals == []
    pods = {p.role: p for p in view.admission.pods if p.owner == "PyTorchJob/operator-smoke"}
    assert set(pods) == {"Master", "Worker"}
    (init,) = pods["Worker"].spec["initContainers"]
    assert init["name"] == "init-pytorch"
    assert init["securityContext"]["allowPrivilegeEscalation"] is False
    assert "getent hosts operator-smoke-master-0" in init["command"][2]
    assert "initContainers" not in pods["Master"].spec
    assert {view.level_of(p) for p in pods.values()} == {"restricted"}


def test_with_upstreams_template_the_smoke_worker_alone_is_refused():
    """What the smoke check catches on a cluster: an operator that does not read our template."""
    rendering = render(stack_config(PLATFORM))
    settings = rendering.settings
    restricted = controllers_for(settings)
    upstream = Controllers(UPSTREAM_INIT_CONTAINER_TEMPLATE, settings.operator_init_container_image, 100)
    namespace = namespace_of(rendering.objects, SMOKE_NAMESPACE, "privileged")
    assert namespace.level == "restricted"
    jobs = by_kind(rendering, "PyTorchJob")
    assert admit(derive(jobs, restricted).pods, namespace).refusals == []
    refusals = admit(derive(jobs, upstream).pods, namespace).refusals
    assert refusals and all(
        line.startswith('pods "operator-smoke-worker-0" is forbidden') for line in refusals
    )


def test_trainer_v2_gets_a_two_node_trainjob_that_is_admitted():
    rendering = render(stack_config({**PLATFORM, "trainerInstall": True, "allowBothOperators": True}))
    trainjob = one(rendering, "TrainJob")
    assert trainjob["metadata"]["namespace"] == SMOKE_NAMESPACE
    assert trainjob["spec"]["trainer"]["numNodes"] == 2
    assert trainjob["metadata"]["annotations"]["pulumi.com/waitFor"].endswith(
        "(@.type=='Complete' || @.type=='Failed'))].type}"
    )
    (reg,) = [r for r in rendering.registrations if r.type.endswith(":TrainJob")]
    assert {"trainer-v2-manifests", "smoke-runtime"} <= set(reg.dependencies)
    view = cluster_view(rendering.objects, rendering.settings)
    assert view.admission.refusals == []
    assert len([p for p in view.admission.pods if p.owner == "TrainJob/trainer-smoke"]) == 2
    assert set(rendering.outputs) >= {"operatorSmokeCheck", "trainerSmokeCheck"}


@pytest.mark.skipif(
    not (DEFAULT_CRD.is_file() and trainer_crds_present(DEFAULT_CRD_DIR)),
    reason="the PyTorchJob, Trainer v2 and JobSet CRD files are not in ../shared/k8s/crds",
)
def test_the_smoke_objects_pass_strict_schemas_and_their_crds():
    rendering = shipped("gke-platform")
    # ...besides the team namespaces, roles, classes and label guard (tests/infra/test_tenancy.py).
    assert {
        o["kind"]
        for o in rendering.objects
        if o["metadata"]["labels"].get(COMPONENT) not in ("tenancy", "storage")
    } == {
        "Namespace",
        "NetworkPolicy",
        "PyTorchJob",
        "TrainingRuntime",
        "TrainJob",
        "Service",  # the NetworkPolicy check's (tests/infra/test_network_check.py)
        "Job",
    }
    assert validation_errors(rendering, "1.33", DEFAULT_CRD, DEFAULT_CRD_DIR) == []
    broken = shipped("gke-platform")
    one(broken, "TrainJob")["spec"]["trainer"]["numNodes"] = "two"
    one(broken, "PyTorchJob")["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "one"
    assert len(validation_errors(broken, "1.33", DEFAULT_CRD, DEFAULT_CRD_DIR)) == 2


@pytest.mark.parametrize(
    "values",
    [
        {**PLATFORM, "operatorSmokeCheck": False, "networkPolicySmokeCheck": False},
        {**BASE, "operatorSmokeCheck": False},  # an 'all' stack
        # Nothing installed to check (the operator present is declared restricted).
        {
            **BASE,
            "operatorSmokeCheck": True,
            "operatorInstall": False,
            "operatorInitContainerRestricted": True,
        },
    ],
)
def test_switching_it_off_or_installing_nothing_renders_no_smoke_check(values):
    rendering = render(stack_config(values))
    assert smoke_objects(rendering) == []
    assert not {"operatorSmokeCheck", "trainerSmokeCheck", "networkPolicySmokeCheck"} & set(rendering.outputs)


def test_an_all_stack_that_installs_the_operator_checks_it_too():
    rendering = render_config({"operatorSmokeCheck": True})
    assert [o["kind"] for o in smoke_objects(rendering)] == ["Namespace", "NetworkPolicy", "PyTorchJob"]
    assert "operatorSmokeCheck" in rendering.outputs


def test_the_smoke_pods_may_only_resolve_names_and_start_after_their_network_policy():
    """Nothing in, DNS out: the Worker's init container and the Master's check only resolve names."""
    rendering = render_config({"operatorSmokeCheck": True})
    (policy,) = [
        o
        for o in smoke_objects(rendering)
        if (o["kind"], o["metadata"]["name"]) == ("NetworkPolicy", SMOKE_POLICY)
    ]
    assert policy["spec"]["podSelector"] == {}
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert "ingress" not in policy["spec"]
    (dns,) = policy["spec"]["egress"]
    assert {(p["protocol"], p["port"]) for p in dns["ports"]} == {("UDP", 53), ("TCP", 53)}
    (job,) = [r for r in rendering.registrations if r.name == "smoke-pytorchjob"]
    assert any(d.endswith("smoke-network") for d in job.dependencies), job.dependencies


def test_the_stacks_own_namespace_cannot_be_the_smoke_checks():
    mocks = RecordingMocks()
    with pytest.raises(ConfigError) as raised:
        run_program(stack_config({**BASE, "operatorSmokeCheck": True, "namespace": SMOKE_NAMESPACE}), mocks)
    assert str(raised.value) == (
        "config ddp-mnist:namespace=ddp-mnist-smoke is invalid: must be another namespace than "
        "ddp-mnist-smoke, which the post-install smoke check creates and owns (or set operatorSmokeCheck "
        "false)"
    )
    assert mocks.registrations == []
    with pytest.raises(ConfigError) as raised:
        render(stack_config({**BASE, "namespace": SMOKE_NAMESPACE, "networkPolicySmokeCheck": True}))
    assert str(raised.value).endswith("(or set networkPolicySmokeCheck false)")
    assert render(stack_config({**BASE, "namespace": SMOKE_NAMESPACE})).objects  # switched off: fine


def test_job_stacks_never_run_it():
    rendering = shipped("gke-gpu")
    assert smoke_objects(rendering) == []


def test_the_local_runner_runs_the_stacks_own_workloads_only():
    rendering = shipped("dev")
    assert any(o["metadata"]["name"] == "operator-smoke" for o in rendering.objects)
    names = [o["metadata"]["name"] for o in workloads(rendering.objects, {})]
    assert "operator-smoke" not in names and "mnist-r1" in names


class _FinishedSmoke(RecordingMocks):
    """Mocks whose smoke job comes back from the wait with a final status, as the provider returns it."""

    def __init__(self, kind: str, status: dict[str, Any]) -> None:
        super().__init__()
        self.kind, self.status = kind, status

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        rid, outputs = super().new_resource(args)
        if args.typ.endswith(f":{self.kind}") and (args.inputs.get("metadata") or {}).get("namespace") == (
            SMOKE_NAMESPACE
        ):
            outputs = {**outputs, "status": self.status}
        return rid, outputs


def _condition(type_: str, status: str = "True", reason: str = "", message: str = "") -> dict[str, str]:
    return {"type": type_, "status": status, "reason": reason, "message": message}


CREATED = _condition("Created", reason="PyTorchJobCreated", message="PyTorchJob operator-smoke is created.")
BACKOFF = "Job operator-smoke has failed because it has reached the specified backoff limit"
DEADLINE = "Job operator-smoke has failed because it was active longer than specified deadline"


@pytest.mark.parametrize(
    ("conditions", "cause"),
    [
        # Worker refused: the reconcile errors before any status update, the Master gives up.
        (
            [CREATED, _condition("Failed", reason="PyTorchJobFailed", message=BACKOFF)],
            "the Worker pod was refused by admission (the Master, the same pod, was not): its operator-added "
            "init container is not Pod Security 'restricted', i.e. the operator does not read the restricted "
            "template (its /etc/config/initContainer.yaml is not mounted, and upstream falls back to its "
            "built-in one silently)",
        ),
        # No pod ever ran: the deadline fails it.
        (
            [CREATED, _condition("Failed", reason="PyTorchJobFailed", message=DEADLINE)],
            f"no pod started within {DEADLINE_SECONDS}s: the image {OPERATOR_INIT_IMAGE} is not pullable "
            "from the nodes (operatorInitContainerImage; a mirror must serve it) or no node fits the pods",
        ),
        # The Master ran, the Worker was admitted but never got past its init container.
        (
            [
                CREATED,
                _condition("Running", "False", "PyTorchJobRunning", "PyTorchJob operator-smoke is running."),
                _condition("Failed", reason="PyTorchJobFailed", message=BACKOFF),
            ],
            "the Master ran but never saw the Worker start: the Worker's init container (which waits "
            "for the Master's name operator-smoke-master-0) did not finish, or the Worker's name "
            "operator-smoke-worker-0 does not resolve (cluster DNS)",
        ),
    ],
    ids=["worker-refused", "image-not-pullable", "init-container-stuck"],
)
def test_a_failed_smoke_pytorchjob_fails_pulumi_up_naming_the_cause(conditions, cause):
    with pytest.raises(pulumi.RunError) as raised:
        run_program_outputs(PLATFORM, _FinishedSmoke("PyTorchJob", {"conditions": conditions}))
    assert str(raised.value) == (
        f"smoke check PyTorchJob ddp-mnist-smoke/operator-smoke failed: {cause}; "
        + EVENTS.format(name="operator-smoke")
    )


def test_a_succeeded_smoke_pytorchjob_is_the_stack_output():
    done = {"conditions": [CREATED, _condition("Succeeded", reason="PyTorchJobSucceeded")]}
    outputs = run_program_outputs(PLATFORM, _FinishedSmoke("PyTorchJob", done))
    assert outputs["operatorSmokeCheck"] == "Succeeded"


@pytest.mark.parametrize(
    ("condition", "cause"),
    [
        (
            _condition("Failed", reason="DeadlineExceeded", message="Exceeded the active deadline"),
            f"no node finished within {DEADLINE_SECONDS}s: pods refused by admission, the image "
            f"{OPERATOR_INIT_IMAGE} not pullable, or the JobSet controller not running",
        ),
        (
            _condition("Failed", reason="JobSetFailed", message="jobset failed"),
            "JobSetFailed: jobset failed",
        ),
    ],
)
def test_a_failed_smoke_trainjob_fails_pulumi_up_naming_the_cause(condition, cause):
    values = {**PLATFORM, "operatorInstall": False, "trainerInstall": True}
    with pytest.raises(pulumi.RunError) as raised:
        run_program_outputs(values, _FinishedSmoke("TrainJob", {"conditions": [condition]}))
    assert str(raised.value) == (
        f"smoke check TrainJob ddp-mnist-smoke/trainer-smoke failed: {cause}; "
        + EVENTS.format(name="trainer-smoke")
    )
    done = {"conditions": [_condition("Complete")]}
    assert run_program_outputs(values, _FinishedSmoke("TrainJob", done))["trainerSmokeCheck"] == "Complete"
