"""jobKind trainjob: a Kubeflow Trainer v2 TrainJob and its own TrainingRuntime, as rendered, as the
Trainer, JobSet and the Job controller turn them into pods, and the config it refuses."""

from __future__ import annotations

import copy
import subprocess
import sys

import pulumi
import pytest

from infra.program.checks import ConfigError
from infra.program.common import yamlio
from infra.program.common.outcome import job_outcome
from infra.program.common.vendored import MANIFESTS
from infra.program.job.trainjob import RESERVED_ENV
from infra.review.cluster import cluster_view
from infra.review.crd import crd_validator
from infra.review.manifest import RecordingMocks, run_program
from infra.review.podenv import container_env, node_argv
from infra.review.render import DEFAULT_CRD_DIR, JOBSET_CRD, TRAINER_CRDS, validation_errors
from infra.stackconfig import ROOT
from tests.infra.conftest import BASE, one, render_config, shipped, stack_config, team_policies

# A stack of kind "all" that runs a TrainJob: Trainer v2 installed here, the v1 operator not.
TRAINJOB = {"jobKind": "trainjob", "trainerInstall": True, "operatorInstall": False}
CRDS = DEFAULT_CRD_DIR
needs_crds = pytest.mark.skipif(
    not all((CRDS / f).is_file() for f in (*TRAINER_CRDS.values(), JOBSET_CRD)),
    reason="the Trainer v2 and JobSet CRD files are not in ../shared/k8s/crds",
)


def _trainjob(values: dict | None = None):
    return render_config({**TRAINJOB, **(values or {})})


def _torchrun_flags(argv):
    start, end = argv.index("--") + 1, argv.index("-m", argv.index("--"))
    return dict(a[2:].split("=", 1) for a in argv[start:end])


def _strict(kind: str, at: tuple[str, ...] = ()):
    name = JOBSET_CRD if kind == "JobSet" else TRAINER_CRDS[kind]
    return crd_validator(CRDS / name, None, strict=True, at=at)


def _errors(validator, document):
    return [f"{e.message} at {e.json_path}" for e in validator.iter_errors(document)]


# --- upstream schemas ---------------------------------------------------------------------------


@needs_crds
@pytest.mark.parametrize(
    "values",
    [{}, {"jobNodes": 4, "jobGpusPerNode": 2, "jobProcsPerNode": 2, "jobTtlSecondsAfterFinished": 600}],
)
def test_trainjob_and_runtime_pass_their_crds_strictly_and_jobset_its_own(values):
    rendering = _trainjob(
        {**values, "jobActiveDeadlineSeconds": 3600, "jobQueueName": "q", "jobClusterQueue": "c"}
    )
    trainjob, runtime = one(rendering, "TrainJob"), one(rendering, "TrainingRuntime")
    assert _errors(_strict("TrainJob"), trainjob) == []
    assert _errors(_strict("TrainingRuntime"), runtime) == []
    assert _errors(_strict("JobSet", ("spec",)), runtime["spec"]["template"]["spec"]) == []
    assert validation_errors(rendering, "1.33", None, CRDS) == []


@needs_crds
def test_strict_schemas_report_unknown_and_mistyped_fields():
    rendering = _trainjob()
    trainjob, runtime = one(rendering, "TrainJob"), one(rendering, "TrainingRuntime")
    typo = copy.deepcopy(trainjob)
    typo["spec"]["trainer"]["numProcsPerNode"] = 1
    assert _errors(_strict("TrainJob"), typo) == [
        "Additional properties are not allowed ('numProcsPerNode' was unexpected) at $.spec.trainer"
    ]
    assert _errors(crd_validator(CRDS / TRAINER_CRDS["TrainJob"], None), typo) == []  # lenient: silent
    jobset = copy.deepcopy(runtime["spec"]["template"]["spec"])
    jobset["failurePolicy"]["maxRestart"] = 3
    jobset["replicatedJobs"][0]["replicas"] = "one"
    assert sorted(_errors(_strict("JobSet", ("spec",)), jobset)) == [
        "'one' is not of type 'integer' at $.replicatedJobs[0].replicas",
        "Additional properties are not allowed ('maxRestart' was unexpected) at $.failurePolicy",
    ]
    broken = copy.deepcopy(rendering)
    one(broken, "TrainingRuntime")["spec"]["template"]["spec"]["replicatedJobs"][0]["replicas"] = "one"
    assert validation_errors(broken, "1.33", None, CRDS) == [
        "TrainingRuntime/mnist-r1: 'one' is not of type 'integer' at "
        "$.spec.template.spec.replicatedJobs[0].replicas",
        "TrainingRuntime/mnist-r1 (JobSet spec): 'one' is not of type 'integer' at "
        "$.replicatedJobs[0].replicas",
    ]


@pytest.mark.slow
@needs_crds
def test_render_validate_checks_the_trainjob_stack_and_reports_what_it_checked(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "infra.review.render", "--stack", "gke-trainjob", "--out", str(tmp_path)]
        + ["--validate"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert (
        "TrainJob, TrainingRuntime: CRD schemas (strict), the runtime's JobSet template: JobSet's"
        in result.stdout
    )
    assert "TrainJob               mnist-r1" in result.stdout
    assert "runtime=TrainingRuntime/mnist-r1 nodes=4 procs/node=1" in result.stdout
    assert "TrainJob/mnist-r1 node node-rank=3 init=- admitted (restricted)" in result.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "infra.review.render", "--stack", "gke-trainjob", "--out", str(tmp_path)]
        + ["--validate", "--crd-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 2
    assert missing.stderr.strip() == f"render: --crd-dir {tmp_path}: no Trainer v2 and JobSet CRD files"


# --- what each node runs ------------------------------------------------------------------------


@pytest.mark.parametrize("nodes", [1, 2, 4])
def test_torchrun_arguments_per_node_from_the_torch_plugins_env(nodes):
    rendering = _trainjob({"jobNodes": nodes, "jobProcsPerNode": 2, "jobBatchSize": 256})
    view = cluster_view(rendering.objects, rendering.settings)
    assert view.admission.refusals == []
    pods = view.admission.pods
    assert [p.name for p in pods] == [f"mnist-r1-node-0-{i}-xxxxx" for i in range(nodes)]
    for index, pod in enumerate(pods):
        assert (pod.owner, pod.role, pod.node_rank) == ("TrainJob/mnist-r1", "node", index)
        assert (pod.spec["hostname"], pod.spec["subdomain"]) == (f"mnist-r1-node-0-{index}", "mnist-r1")
        (container,) = pod.spec["containers"]
        assert container["name"] == "node"
        assert container["ports"] == [{"containerPort": 29500}]  # upserted over the template's port
        argv = node_argv(container, container_env(container, pod.manifest))
        assert argv[:3] == ["python", "-m", "trainer.launch"]
        assert _torchrun_flags(argv) == {
            "nnodes": str(nodes),
            "node-rank": str(index),
            "nproc-per-node": "2",
            "master-addr": "mnist-r1-node-0-0.mnist-r1",
            "master-port": "29500",
            "max-restarts": "0",
        }
    (service,) = view.effective.services
    assert service["metadata"]["name"] == "mnist-r1"
    assert service["spec"] == {
        "clusterIP": "None",
        "selector": {"jobset.sigs.k8s.io/jobset-name": "mnist-r1"},
        "publishNotReadyAddresses": True,
    }
    assert all(p.manifest["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] == "mnist-r1" for p in pods)


def _env_names(container):
    return [e["name"] for e in container.get("env", [])]


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"jobGpusPerNode": 4, "jobProcsPerNode": 4, "jobBackend": "nccl"},
        {
            "jobDataSource": "s3",
            "minioEndpoint": "minio.minio.svc:9000",
            "minioExistingSecret": "s3-keys",
            "createNamespace": False,
        },
    ],
)
def test_reserved_torchrun_env_is_only_ever_set_by_the_torch_plugin(values):
    rendering = _trainjob(values)
    trainer = one(rendering, "TrainJob")["spec"]["trainer"]
    assert not set(RESERVED_ENV) & set(_env_names(trainer))
    for rjob in one(rendering, "TrainingRuntime")["spec"]["template"]["spec"]["replicatedJobs"]:
        pod = rjob["template"]["spec"]["template"]["spec"]
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            assert not set(RESERVED_ENV) & set(_env_names(container)), container["name"]
    for pod in cluster_view(rendering.objects, rendering.settings).effective.pods:
        names = _env_names(pod.spec["containers"][0])
        assert [n for n in names if n in RESERVED_ENV] == list(RESERVED_ENV)  # once each, the plugin's


def test_resources_per_node_match_the_container_and_gpu_nodes_get_their_gpus():
    values = {"jobGpusPerNode": 2, "jobProcsPerNode": 2, "jobCpuLimit": "4", "jobBackend": "nccl"}
    rendering = _trainjob(values)
    trainer = one(rendering, "TrainJob")["spec"]["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (2, 2)
    expected = {
        "requests": {"cpu": "2", "memory": "2Gi", "nvidia.com/gpu": "2"},
        "limits": {"cpu": "4", "memory": "4Gi", "nvidia.com/gpu": "2"},
    }
    assert trainer["resourcesPerNode"] == expected
    runtime = one(rendering, "TrainingRuntime")
    (rjob,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    (container,) = rjob["template"]["spec"]["template"]["spec"]["containers"]
    assert container["resources"] == expected
    for pod in cluster_view(rendering.objects, rendering.settings).effective.pods:
        assert pod.spec["containers"][0]["resources"] == expected
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod.spec[
            "tolerations"
        ]


# --- how the config maps ------------------------------------------------------------------------


def test_runtime_is_ours_torch_policy_node_job_with_the_restricted_pod_template():
    runtime = one(_trainjob({"jobNodes": 3, "jobBatchSize": 255}), "TrainingRuntime")
    assert (runtime["apiVersion"], runtime["metadata"]["name"]) == (
        "trainer.kubeflow.org/v1alpha1",
        "mnist-r1",
    )
    assert runtime["metadata"]["namespace"] == "ddp-mnist"
    assert runtime["spec"]["mlPolicy"] == {"numNodes": 3, "torch": {}}
    (rjob,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    assert (rjob["name"], rjob["replicas"]) == ("node", 1)
    assert rjob["template"]["metadata"]["labels"] == {
        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"
    }
    job = rjob["template"]["spec"]
    assert (job["completionMode"], job["completions"], job["parallelism"]) == ("Indexed", 3, 3)
    pod = job["template"]["spec"]
    (container,) = pod["containers"]
    assert container["name"] == "node"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert (pod["restartPolicy"], pod["automountServiceAccountToken"]) == ("Never", False)
    assert job["template"]["metadata"]["labels"]["ddp-mnist.io/job"] == "mnist-r1"


def test_trainjob_references_the_runtime_with_nodes_processes_queue_and_deadline():
    values = {"jobActiveDeadlineSeconds": 7200, "jobQueueName": "team-a", "jobClusterQueue": "gpus"}
    trainjob = one(_trainjob(values), "TrainJob")
    assert trainjob["spec"]["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org",
        "kind": "TrainingRuntime",
        "name": "mnist-r1",
    }
    assert trainjob["spec"]["activeDeadlineSeconds"] == 7200
    assert trainjob["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert trainjob["metadata"]["annotations"] == {"pulumi.com/waitFor": "jsonpath={.metadata.uid}"}
    assert one(_trainjob(), "TrainJob")["spec"]["activeDeadlineSeconds"] == 86400  # the default: a day
    assert "activeDeadlineSeconds" not in one(_trainjob({"jobActiveDeadlineSeconds": 0}), "TrainJob")["spec"]


@pytest.mark.parametrize(("incidents", "ttl"), [(3, -1), (0, 600)])
def test_retries_and_ttl_map_to_jobset_failure_policy_and_ttl(incidents, ttl):
    values = {"jobBackoffLimit": incidents, "jobTtlSecondsAfterFinished": ttl}
    jobset = one(_trainjob(values), "TrainingRuntime")["spec"]["template"]["spec"]
    assert jobset["failurePolicy"] == {
        "maxRestarts": incidents,
        "restartStrategy": "Recreate",
        "rules": [
            {
                "name": "FailJobSetOnPermanentExit",
                "action": "FailJobSet",
                "onJobFailureReasons": ["PodFailurePolicy"],
            }
        ],
    }
    assert jobset.get("ttlSecondsAfterFinished") == (ttl if ttl >= 0 else None)
    job = jobset["replicatedJobs"][0]["template"]["spec"]
    assert job["backoffLimit"] == 0  # a lost rank fails the Job, the JobSet restarts every node
    ignore, stopped, fail = job["podFailurePolicy"]["rules"]
    assert stopped == {
        "action": "Ignore",
        "onExitCodes": {"containerName": "node", "operator": "In", "values": [201]},
    }
    assert fail == {
        "action": "FailJob",
        "onExitCodes": {"containerName": "node", "operator": "In", "values": list(range(1, 128))},
    }
    assert ignore == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}


def test_waiting_for_a_trainjob_ends_on_complete_or_failed_and_a_failure_fails_the_deployment():
    trainjob = one(_trainjob({"jobWait": True, "jobWaitTimeoutSeconds": 900}), "TrainJob")
    # The program waits (infra/program/job/runwatch.py), ending on these conditions.
    assert trainjob["metadata"]["annotations"] == {"pulumi.com/waitFor": "jsonpath={.metadata.uid}"}
    done = {"conditions": [{"type": "Complete", "status": "True"}]}
    logs = "kubectl -n ddp-mnist logs -l ddp-mnist.io/job=mnist-r1 --prefix --max-log-requests=3"
    assert job_outcome(done, "TrainJob", "mnist-r1", logs) == "Complete"
    failed = {
        "conditions": [
            {"type": "Failed", "status": "True", "reason": "ReachedMaxRestarts", "message": "jobset failed"}
        ]
    }
    with pytest.raises(pulumi.RunError) as raised:
        job_outcome(failed, "TrainJob", "mnist-r1", logs)
    assert (
        str(raised.value)
        == f"TrainJob mnist-r1 failed (ReachedMaxRestarts): jobset failed; its pods' logs: {logs}"
    )


def test_a_changed_runtime_replaces_the_trainjob_after_the_install_and_the_network_policy():
    rendering = _trainjob()
    regs = {r.name: r for r in rendering.registrations}
    runtime, job = regs["trainer-runtime"], regs["trainer-job"]
    assert (runtime.parent, job.parent) == ("trainer", "trainer")
    assert regs["trainer"].type == "ddp-mnist:training:TrainJob"
    for reg in (runtime, job):
        assert reg.replace_on_changes == ("spec",) and reg.delete_before_replace
        assert {"trainer-v2-manifests", "network-policy"} <= set(reg.dependencies)
    assert job.options.replace_with == ("trainer-runtime",)
    assert "trainer-runtime" in job.dependencies
    assert rendering.outputs["jobKind"] == "trainjob"
    assert rendering.outputs["statusCommand"] == "kubectl -n ddp-mnist get trainjob mnist-r1 -o wide"


def test_the_default_master_port_stands_for_the_plugins_29500():
    rendering = _trainjob({"jobNetworkPolicyPeerPorts": "rendezvous-and-ephemeral"})
    assert rendering.settings.job_master_port == 29500
    policy = next(o for o in team_policies(rendering) if "ingress" in o["spec"])
    assert {"protocol": "TCP", "port": 29500} in policy["spec"]["ingress"][0]["ports"]
    assert render_config({"jobKind": "indexed-job"}).settings.job_master_port == 23456


# --- installing Trainer v2 ----------------------------------------------------------------------


def _install(rendering):
    (install,) = [r for r in rendering.external if r.parent == "trainer-v2"]
    return install


def _deployment(name: str, image: str) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "kubeflow-system"},
        "spec": {"template": {"spec": {"containers": [{"name": "manager", "image": image}]}}},
    }


def _apply(transform, type_: str, props: dict):
    args = pulumi.ResourceTransformArgs(
        custom=True, type_=type_, name="trainer-v2-manifests:x", props=props, opts=pulumi.ResourceOptions()
    )
    return transform(args)


def test_trainer_v2_is_installed_from_its_vendored_manager_overlay_and_keeps_its_crds():
    install = _install(_trainjob())
    assert install.inputs["directory"] == str(MANIFESTS / "kubeflow-trainer")
    (transform,) = install.transforms
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "x"},
    }
    result = _apply(transform, "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition", crd)
    assert result.props == crd and result.opts.retain_on_delete is True
    upstream = _deployment(
        "kubeflow-trainer-controller-manager", "ghcr.io/kubeflow/trainer/trainer-controller-manager:v2.3.0"
    )
    assert _apply(transform, "kubernetes:apps/v1:Deployment", upstream) is None  # no mirror: untouched


def test_kubeflow_system_enforces_restricted_which_both_vendored_controllers_meet():
    """The overlay's namespace is labelled to enforce Pod Security "restricted", and the two Deployments
    of the vendored overlay, as upstream writes them, meet it (the offline model of the API server's
    checks); a controller pod that did not would be refused."""

    from infra.review.admission import podsecurity

    (transform,) = _install(_trainjob()).transforms
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubeflow-system"}}
    labelled = _apply(transform, "kubernetes:core/v1:Namespace", namespace).props
    assert labelled["metadata"]["labels"] == {
        f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn", "audit")
    }
    documents = yamlio.load_all((MANIFESTS / "kubeflow-trainer" / "manifests.yaml").read_text())
    workloads = {
        d["metadata"]["name"]: d for d in documents if d and d["kind"] in ("Deployment", "DaemonSet")
    }
    assert set(workloads) == {"kubeflow-trainer-controller-manager", "jobset-controller-manager"}
    for workload in workloads.values():
        assert workload["metadata"]["namespace"] == "kubeflow-system"
        assert podsecurity.violations(workload["spec"]["template"], "restricted") == []
    escalating = copy.deepcopy(workloads["jobset-controller-manager"]["spec"]["template"])
    escalating["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    assert podsecurity.violations(escalating, "restricted") != []


def test_the_mirror_keys_cover_both_images_the_overlay_pulls():
    mirror = {
        "trainerImage": "registry.internal/kubeflow/trainer-controller-manager:v2.3.0",
        "trainerJobSetImage": "registry.internal/jobset/jobset:v0.12.0",
        "trainerSource": "registry.internal/mirror/trainer//manifests/overlays/manager?ref=v2.3.0",
    }
    install = _install(_trainjob(mirror))
    assert install.inputs["directory"] == mirror["trainerSource"]
    (transform,) = install.transforms
    for name, key in (
        ("kubeflow-trainer-controller-manager", "trainerImage"),
        ("jobset-controller-manager", "trainerJobSetImage"),
    ):
        upstream = _deployment(name, "upstream/image:v1")
        result = _apply(transform, "kubernetes:apps/v1:Deployment", upstream)
        assert result.props["spec"]["template"]["spec"]["containers"][0]["image"] == mirror[key]
        assert upstream["spec"]["template"]["spec"]["containers"][0]["image"] == "upstream/image:v1"
    other = _deployment("something-else", "upstream/image:v1")
    assert _apply(transform, "kubernetes:apps/v1:Deployment", other) is None


def test_a_platform_stack_may_install_trainer_v2_alone_and_a_job_stack_assumes_it():
    platform = render_config({"stackRole": "platform", "operatorInstall": False, "trainerInstall": True})
    assert [r.parent for r in platform.external] == ["trainer-v2"]
    # Besides the Pod Security label guard every platform stack has by default (podSecurityLabelGuard),
    # only the two controllers' ingress policies.
    assert sorted(
        o["metadata"]["name"]
        for o in platform.objects
        if o["kind"] != "ValidatingAdmissionPolicy"
        and not o["metadata"]["name"].startswith("ddp-mnist-pod-security")
    ) == [
        "ddp-mnist-jobset-controller-manager-ingress",
        "ddp-mnist-kubeflow-trainer-controller-manager-ingress",
    ]
    assert platform.outputs["trainerSource"] == str(MANIFESTS / "kubeflow-trainer")
    job = shipped("gke-trainjob")
    assert job.external == []
    assert {o["kind"] for o in job.objects} >= {"TrainJob", "TrainingRuntime"}


# --- config it refuses -------------------------------------------------------------------------

BAD_TRAINJOB_CONFIGS = [
    (
        {"jobKind": "trainjob", "operatorInstall": False},
        "config ddp-mnist:trainerPresent=false is invalid: must be true when jobKind is trainjob and "
        "trainerInstall is false: declare that Kubeflow Trainer v2 (with JobSet) is in the cluster, e.g. "
        "from the platform stack, or set trainerInstall true",
    ),
    (
        {"jobKind": "trainjob", "stackRole": "job", "operatorInstall": False},
        "config ddp-mnist:trainerPresent=false is invalid: must be true when jobKind is trainjob and "
        "trainerInstall is false: declare that Kubeflow Trainer v2 (with JobSet) is in the cluster, e.g. "
        "from the platform stack, or set trainerInstall true",
    ),
    (
        {"jobKind": "trainjob", "trainerInstall": True},
        "config ddp-mnist:allowBothOperators=false is invalid: must be true to install both the training "
        "operator v1 (operatorInstall) and Kubeflow Trainer v2 (trainerInstall) in one stack; or set "
        "operatorInstall false (jobKind trainjob needs only Trainer v2)",
    ),
    (
        {"stackRole": "platform", "trainerInstall": True},
        "config ddp-mnist:allowBothOperators=false is invalid: must be true to install both the training "
        "operator v1 (operatorInstall) and Kubeflow Trainer v2 (trainerInstall) in one stack; or set "
        "operatorInstall false (jobKind trainjob needs only Trainer v2)",
    ),
    (
        {"stackRole": "job", "operatorInstall": False, "trainerInstall": True, "jobKind": "trainjob"},
        "config ddp-mnist:trainerInstall=true is invalid: must be false when stackRole is job: the "
        "cluster's platform stack installs Kubeflow Trainer v2 and owns its CRDs (set trainerPresent true "
        "here; stackRole all installs both in one stack)",
    ),
    (
        {**TRAINJOB, "jobMasterPort": 23457},
        "config ddp-mnist:jobMasterPort=23457 is invalid: must be 29500 (or unset) with jobKind trainjob: "
        "Kubeflow Trainer's torch plugin fixes the rendezvous port (PET_MASTER_PORT) at 29500",
    ),
    (
        {**TRAINJOB, "jobRestartPolicy": "OnFailure"},
        "config ddp-mnist:jobRestartPolicy=OnFailure is invalid: must be unset with jobKind trainjob: a "
        "TrainJob has no replica restart policy; its rule is the default's, ExitCode (codes 1-127 fail it "
        "at once, a failed node otherwise fails its Job and JobSet restarts every node, up to "
        "jobBackoffLimit times)",
    ),
    (
        {**TRAINJOB, "jobCleanPodPolicy": "All"},
        "config ddp-mnist:jobCleanPodPolicy=All is invalid: must be unset with jobKind trainjob: a TrainJob "
        "keeps its pods until jobTtlSecondsAfterFinished deletes its JobSet",
    ),
    (
        {
            **TRAINJOB,
            "trainerSource": "https://github.com/kubeflow/trainer.git//manifests/overlays/manager?ref=master",
        },
        "config ddp-mnist:trainerSource=https://github.com/kubeflow/trainer.git//manifests/overlays/manager"
        "?ref=master is invalid: must be a local path (/..., ./..., ../...), or a git URL pinned with "
        "?ref=<release tag vX.Y.Z or 40-hex commit> (never a branch)",
    ),
    (
        {**TRAINJOB, "trainerVersion": "2.3.0"},
        "config ddp-mnist:trainerVersion=2.3.0 is invalid: must be a release tag vMAJOR.MINOR.PATCH such as "
        "v1.9.4",
    ),
    (
        {**TRAINJOB, "trainerJobSetImage": "registry.k8s.io/jobset/jobset:latest"},
        "config ddp-mnist:trainerJobSetImage=registry.k8s.io/jobset/jobset:latest is invalid: must be a "
        "pinned image: ':latest' moves; use a version tag or an @sha256 digest",
    ),
]


def _fails_before_registering(config):
    mocks = RecordingMocks()
    with pytest.raises(ConfigError) as raised:
        run_program(config, mocks)
    assert mocks.registrations == [], "resources were registered before the config was rejected"
    return str(raised.value)


@pytest.mark.parametrize(
    ("values", "message"),
    BAD_TRAINJOB_CONFIGS,
    ids=[f"{i}-{m.split('=')[0][17:]}" for i, (_, m) in enumerate(BAD_TRAINJOB_CONFIGS)],
)
def test_bad_trainjob_config_is_one_line_before_anything_is_registered(values, message):
    assert _fails_before_registering(stack_config({**BASE, **values})) == message


def test_the_explicit_keys_make_those_combinations_valid():
    both = render_config({"jobKind": "trainjob", "trainerInstall": True, "allowBothOperators": True})
    assert sorted(r.parent for r in both.external) == ["trainer-v2", "training-operator"]
    present = render_config({"jobKind": "trainjob", "operatorInstall": False, "trainerPresent": True})
    assert present.external == [] and one(present, "TrainJob")["metadata"]["name"] == "mnist-r1"
    assert render_config({**TRAINJOB, "jobMasterPort": 29500}).settings.job_master_port == 29500


@pytest.mark.parametrize("name", ["kubeflow-trainer-webhook-cert", "jobset-webhook-server-cert"])
def test_the_webhook_certificates_data_is_left_to_the_controllers_that_write_it(name):
    """The manifests create them empty and the controllers' certificate managers fill them; with their
    data in the diff, an `up` replaced the Secret (deleting the certificates the webhook serves with:
    found by the local tier, scenario 23)."""
    (transform,) = _install(_trainjob()).transforms
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "kubeflow-system"},
    }
    result = _apply(transform, "kubernetes:core/v1:Secret", secret)
    assert result.props == secret
    assert result.opts.ignore_changes == ["data"]
    other = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "some-secret"}}
    assert _apply(transform, "kubernetes:core/v1:Secret", other) is None
