"""The prerequisites stack, the platform stack and a job stack (the dev stack's twin, serving on),
against the real engine, API server, controllers and training operator, in this order:

0. the prerequisites stack (dev-prereqs) comes up on the empty cluster: the NFS server in its
   privileged namespace, csi-driver-nfs from its pinned chart, MinIO, the Job that fills its bucket
   (its pod runs no process under KWOK: the engine's ordering and waits are proven here, the fill by
   `make e2e`); each address the dev stack names is a Service of that name and port whose
   EndpointSlice lists its server's pod;
1. the platform stack comes up on an empty cluster, its smoke PyTorchJob ends `Succeeded`, the NVIDIA
   device plugin's DaemonSet (gpuDevicePlugin: install) is rolled out on every node, and the GPU smoke
   pod (gpuSmokeNodeSelector) is scheduled on a GPU node and completes (a KWOK stage completes it);
2. the job stack comes up from empty volumes: the seed Job completes before the PyTorchJob exists,
   the job succeeds, the model server's Deployment is available, the outputs are set; no pod refused,
   every pod admitted under the namespace's ResourceQuota, which counts what the pods left running
   request;
3. a second `up` changes nothing, and neither does a preview after `refresh`, on both stacks;
4. an edit of the job: the preview replaces the PyTorchJob and nothing else; a new `jobRunId`: the
   preview updates the model server, never replaces it;
5. the pods the real operator and Job controller created, as the API server admitted them, equal the
   offline model's (infra/review/effective) field by field for what it covers;
6. destroy keeps the checkpoint claim and its namespace and deletes the data claim; the checkpoint
   volume stays Bound to its claim; the data claim's volume is then deleted by the tier's provisioner
   stand-in (supervisor.py, in csi-driver-nfs's external-provisioner's place: a check of the stand-in,
   not of the cluster); up with `reattachRetained` imports the claim and its namespace;
18. a job stack whose declaration its platform stack contradicts (`platformStack`) is refused by the
    preview and by `up`, with one line naming both stacks, and registers nothing; one naming a
    platform stack that was never brought up fails the engine's read of it, naming it in one line.

The job stack names the platform stack (`platformStack`) and declares nothing it takes from it: the
restricted Worker init container it relies on comes from the platform's live `platform` output.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from pulumi import automation as auto

from infra.localcluster import fleet
from infra.program.settings.base import parse_quantity
from infra.stackconfig import load_stack
from tests.e2e import judge, live
from tests.e2e.model import modelled, modelled_pod
from tests.e2e.project import Backend, set_config
from tests.e2e.stacks import JOB_NAMESPACE, job_config
from tests.e2e_local import scenario
from tests.e2e_local.conftest import KEEP

pytestmark = pytest.mark.e2e_local

JOB = "mnist-r1"
SEED = "ddp-mnist-seed"
CLAIM = "ddp-mnist-checkpoints"
DATA = "ddp-mnist-data"
QUOTA_CPU, QUOTA_MEMORY = "8", "12Gi"
# What the quota counts once `up` returned: the requests of the pods still running, the model server
# (serveCpuRequest 500m, serveMemoryRequest 512Mi, one replica) and TensorBoard (100m, 256Mi); the
# seed's and the job's pods have ended, and a ResourceQuota counts no pod in a terminal phase.
QUOTA_USED = {"requests.cpu": "600m", "requests.memory": "768Mi"}
PLATFORM_STACK = "local-platform"  # the session's platform stack (conftest.py)
NFS_PORT = 2049  # the NFS server's Service port (infra/program/prerequisites/install.py, NFS_PORTS)
SERVER_KINDS = (
    "kubernetes:apps/v1:Deployment",
    "kubernetes:core/v1:Service",
    "kubernetes:serving.kserve.io/v1beta1:InferenceService",
)


@pytest.fixture(scope="module")
def job(backend: Backend, platform: dict) -> Iterator[dict]:
    # Serving on, and a ResourceQuota the job must fit (the real ResourceQuota admission judges it).
    config = job_config(
        scenario.IMAGE,
        *scenario.KEYS,
        serveKind="deployment",
        namespaceCpuQuota=QUOTA_CPU,
        namespaceMemoryQuota=QUOTA_MEMORY,
        platformStack=PLATFORM_STACK,
        jobPriorityClassName=scenario.PRIORITY_CLASS,  # the platform stack creates it
    )
    # Taken from the platform stack's facts, never declared here.
    config.pop("ddp-mnist:operatorInitContainerRestricted")
    stack = scenario.stack(backend, "local-job", config)
    state: dict = {"stack": stack, "config": config}
    yield state
    if not KEEP:
        stack.destroy(on_output=print)
        live.kubectl("delete", "namespace", JOB_NAMESPACE, "--ignore-not-found", "--wait=false")


def _ready_endpoints(service: str, namespace: str) -> list[str]:
    """The addresses of the ready endpoints the EndpointSlice controller lists for `service`."""
    slices = live.items("endpointslice", namespace, f"kubernetes.io/service-name={service}")
    return [
        address
        for piece in slices
        for endpoint in piece.get("endpoints") or []
        if (endpoint.get("conditions") or {}).get("ready")
        for address in endpoint["addresses"]
    ]


def _quota_used_once_settled(name: str, timeout_s: float = 60) -> dict[str, str]:
    """The quota's `status.used` once it equals QUOTA_USED, or as it is when `timeout_s` has passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        used: dict[str, str] = live.get("resourcequota", name, JOB_NAMESPACE)["status"].get("used", {})
        settled = all(parse_quantity(used.get(k, "0")) == parse_quantity(v) for k, v in QUOTA_USED.items())
        if settled or time.monotonic() > deadline:
            return used
        time.sleep(2)


def test_0_the_prerequisites_stack_comes_up_first_with_what_the_dev_stack_names(prerequisites: dict) -> None:
    outputs = prerequisites["outputs"]
    assert outputs["bucketFillOutcome"] == "Complete"
    # The addresses the dev stack names, as the cluster serves them: a Service of that name, namespace
    # and port, whose EndpointSlice (the EndpointSlice controller's) lists its server's ready pod.
    dev = load_stack("dev").values
    minio_host, _, minio_port = dev["ddp-mnist:minioEndpoint"].rpartition(":")
    for host, port in ((dev["ddp-mnist:nfsServer"], NFS_PORT), (minio_host, int(minio_port))):
        name, namespace, cluster_domain = host.split(".", 2)
        assert cluster_domain == "svc.cluster.local", host
        service = live.get("service", name, namespace)
        assert port in {p["port"] for p in service["spec"]["ports"]}, (host, service["spec"]["ports"])
        assert _ready_endpoints(name, namespace), host
    assert live.exists("csidriver", "nfs.csi.k8s.io")
    nfs = live.get("namespace", "nfs-system")["metadata"]["labels"]
    assert nfs["pod-security.kubernetes.io/enforce"] == "privileged"
    for name, namespace in (
        ("nfs-server", "nfs-system"),
        ("minio", "minio"),
        ("csi-nfs-controller", "kube-system"),
    ):
        assert live.get("deployment", name, namespace)["status"].get("availableReplicas") == 1, name
    assert judge.job_condition(live.get("job", "minio-mnist", "minio")) == "Complete"
    assert judge.refused_pod_creations(live.events("minio")) == []


def test_1_the_platform_stack_comes_up_on_an_empty_cluster(platform: dict) -> None:
    outputs = platform["outputs"]
    facts = outputs["platform"]
    assert facts["operator"]["initContainerRestricted"] is True
    assert facts["operator"]["version"] == "v1.9.4"
    assert facts["priorityClasses"] == [scenario.PRIORITY_CLASS]
    assert live.get("priorityclass", scenario.PRIORITY_CLASS)["value"] == scenario.PRIORITY
    # `up` awaited the smoke PyTorchJob (infra/program/platform/smoke.py; a failed one fails `up` itself). Its
    # pods run no script here: `Succeeded` shows that the operator's Master and Worker (with the restricted
    # init container) were admitted in the restricted namespace and that the operator ended the job once a
    # KWOK stage completed the Master. No Trainer v2 in this shape, so no TrainJob check.
    assert outputs["operatorSmokeCheck"] == "Succeeded"
    assert "trainerSmokeCheck" not in outputs
    assert live.exists("crd", "pytorchjobs.kubeflow.org")
    deployment = live.get("deployment", "training-operator", "kubeflow")
    assert deployment["status"].get("availableReplicas") == 1
    # Its pod left KWOK's hold stage (Pending) by the label the supervisor adds once the operator's own
    # process answers its readiness probe (infra/localcluster/standins.py): Ready as a kubelet makes it,
    # not as soon as it was scheduled.
    (operator_pod,) = live.items("pod", "kubeflow", "control-plane=kubeflow-training-operator")
    assert operator_pod["metadata"]["labels"].get(fleet.PROCESS_READY) == "true"
    conditions = {c["type"]: c["status"] for c in operator_pod["status"].get("conditions", [])}
    assert conditions.get("Ready") == "True", operator_pod["status"]
    # From upstream's overlay (operatorSource), a source the program does not read: no ingress policy
    # (scenario 23b's move to the vendored manifests adds it).
    assert not live.exists("networkpolicy", "ddp-mnist-training-operator-ingress", "kubeflow")
    # The NVIDIA device plugin on the nodes no other installer manages (its pods run no process under
    # KWOK): the real DaemonSet controller placed one on the CPU, EKS and AKS nodes, the tainted GPU pools
    # included, and none on GKE's GPU nodes (GKE's own plugin); `up` awaited the rollout.
    plugin = live.get("daemonset", "nvidia-device-plugin-daemonset", "kube-system")["status"]
    pools = [n["metadata"]["labels"].get("ddp-mnist.local/pool") for n in live.items("node", "default")]
    expected = sum(pool in ("cpu", "eks-g5", "aks-gpunp") for pool in pools)
    assert plugin["numberReady"] == plugin["desiredNumberScheduled"] == expected == len(pools) - 4
    plugin_pods = live.items("pod", "kube-system", "name=nvidia-device-plugin-ds")
    placed = {p["spec"]["nodeName"].rsplit("-", 1)[0] for p in plugin_pods}
    assert placed == {"kwok-cpu", "kwok-eks-g5", "kwok-aks-gpunp"}, placed
    assert outputs["gpuDevicePlugin"] == "nvidia-device-plugin-daemonset"
    # The GPU smoke pod was scheduled on an eks-g5 node (it asked for a GPU; the real scheduler placed it).
    assert outputs["gpuSmokeCheck"] == "Complete"
    # The real API server admits the NetworkPolicy check (Indexed, podFailurePolicy, subdomain) and the
    # real Job controller completes it once KWOK's stage ends its pods: the wait and the outcome work
    # here; whether policies are enforced only the real node shows (tests/e2e_node/test_trainjob.py).
    assert outputs["networkPolicySmokeCheck"] == "Complete"
    network = live.get("job", "network-smoke", "ddp-mnist-smoke")
    assert network["spec"]["completionMode"] == "Indexed"
    assert network["status"]["succeeded"] == 2
    (gpu_pod,) = live.items("pod", "ddp-mnist-smoke", "job-name=gpu-smoke")
    node = live.get("node", gpu_pod["spec"]["nodeName"], "default")
    assert node["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "g5.12xlarge"


def test_2_a_job_stack_seeds_before_it_trains_and_serves(job: dict) -> None:
    started = time.monotonic()
    outputs = scenario.outputs(job["stack"].up(on_output=print, show_secrets=False))
    job["up_seconds"] = time.monotonic() - started
    assert outputs["seedOutcome"] == "Complete"
    assert outputs["jobOutcome"] == "Succeeded"
    seed = live.get("job", SEED, JOB_NAMESPACE)
    pytorchjob = live.get("pytorchjob", JOB, JOB_NAMESPACE)
    assert judge.job_condition(seed) == "Complete"
    assert judge.job_condition(pytorchjob) == "Succeeded"
    assert seed["status"]["completionTime"] <= pytorchjob["metadata"]["creationTimestamp"]
    servers = live.items("deployment", JOB_NAMESPACE)
    assert servers and all(d["status"].get("availableReplicas", 0) >= 1 for d in servers), servers
    assert judge.refused_pod_creations(live.events(JOB_NAMESPACE)) == []
    # Priority admission resolved the platform's PriorityClass into each training pod's priority.
    training = [p for p in live.items("pod", JOB_NAMESPACE) if p["metadata"]["name"].startswith(f"{JOB}-")]
    assert training and {p["spec"]["priority"] for p in training} == {scenario.PRIORITY}
    (quota,) = live.items("resourcequota", JOB_NAMESPACE)
    assert quota["status"]["hard"]["requests.cpu"] == QUOTA_CPU
    # The quota controller recounts once the ended pods are seen ended: wait for it, then compare.
    used = _quota_used_once_settled(quota["metadata"]["name"])
    assert {key: parse_quantity(used.get(key, "0")) for key in QUOTA_USED} == {
        key: parse_quantity(value) for key, value in QUOTA_USED.items()
    }, used
    job["outputs"] = outputs
    job["claim_uid"] = live.get("pvc", CLAIM, JOB_NAMESPACE)["metadata"]["uid"]


@pytest.mark.parametrize("which", ["platform", "job"])
def test_3_a_second_up_and_a_preview_after_refresh_change_nothing(
    which: str, platform: dict, job: dict
) -> None:
    stack: auto.Stack = platform["stack"] if which == "platform" else job["stack"]
    again = stack.up(on_output=print, show_secrets=False)
    assert scenario.changes(again.summary.resource_changes) == {}
    scenario.preview_after_refresh(stack)


def test_4_an_edited_job_is_replaced_alone_and_a_new_run_updates_the_server(job: dict) -> None:
    stack: auto.Stack = job["stack"]
    set_config(stack, {**job["config"], "ddp-mnist:jobCpuLimit": "3"})
    steps: list[tuple[str, str]] = []
    stack.preview(on_output=print, on_event=lambda event: steps.extend(judge.planned_steps(event)))
    replaced = {kind for op, kind in steps if op in ("replace", "create-replacement", "delete-replaced")}
    assert replaced == {"kubernetes:kubeflow.org/v1:PyTorchJob"}, steps

    set_config(stack, {**job["config"], "ddp-mnist:jobRunId": "r2"})
    steps.clear()
    stack.preview(on_output=print, on_event=lambda event: steps.extend(judge.planned_steps(event)))
    server_steps = {op for op, kind in steps if kind in SERVER_KINDS}
    assert "replace" not in server_steps and "create-replacement" not in server_steps, steps
    assert "update" in server_steps, steps
    set_config(stack, job["config"])


def test_5_admitted_pods_equal_the_offline_model(platform: dict, job: dict) -> None:
    view = modelled("local-job", scenario.as_declared(job["config"], platform["outputs"]["platform"]))
    assert view.admission.refusals == []
    for role in ("Master", "Worker"):
        model = modelled_pod(view, role)
        pod = live.get("pod", model["metadata"]["name"], JOB_NAMESPACE)
        assert judge.pod_differences(pod, model, container="pytorch") == []
        # Field by field, everything the model sets (docs/ADMISSION.md lists what the API server adds).
        assert scenario.covered_differences(pod["spec"], model["spec"], ".spec") == []
        assert scenario.covered_differences(pod["metadata"], model["metadata"], ".metadata") == []
        print(
            f"{role}: added by the API server and controllers:",
            scenario.added_fields(pod["spec"], model["spec"], ".spec"),
        )


def test_6_destroy_keeps_the_claim_and_reattaching_imports_it(job: dict) -> None:
    stack: auto.Stack = job["stack"]
    volumes = {name: live.get("pvc", name, JOB_NAMESPACE)["spec"]["volumeName"] for name in (CLAIM, DATA)}
    stack.destroy(on_output=print)
    assert live.exists("namespace", JOB_NAMESPACE)
    assert live.get("pvc", CLAIM, JOB_NAMESPACE)["metadata"]["uid"] == job["claim_uid"]
    assert not live.exists("pytorchjob", JOB, JOB_NAMESPACE)
    # The cluster's part: the engine deleted the data claim and awaited it gone, and the PV controller
    # keeps the checkpoint volume bound to the kept claim.
    assert not live.exists("pvc", DATA, JOB_NAMESPACE)
    checkpoint_volume = live.get("pv", volumes[CLAIM])
    assert checkpoint_volume["status"]["phase"] == "Bound"
    assert checkpoint_volume["spec"]["claimRef"]["uid"] == job["claim_uid"]
    # A check of the tier's stand-in, not of the cluster: once the PV controller released the data
    # volume, the provisioner stand-in (supervisor.py, playing csi-driver-nfs's external-provisioner)
    # deletes it, as its class's reclaimPolicy Delete (dataReclaimPolicy) asks.
    deadline = time.monotonic() + 60
    while live.exists("pv", volumes[DATA]) and time.monotonic() < deadline:
        time.sleep(1)
    assert not live.exists("pv", volumes[DATA])

    job["config"] = {**job["config"], "ddp-mnist:reattachRetained": "true"}
    set_config(stack, job["config"])
    outputs = scenario.outputs(stack.up(on_output=print, show_secrets=False))
    assert outputs["jobOutcome"] == "Succeeded"
    assert live.get("pvc", CLAIM, JOB_NAMESPACE)["metadata"]["uid"] == job["claim_uid"]


def test_18_a_job_stack_its_platform_contradicts_is_refused_with_one_line(
    backend: Backend, platform: dict
) -> None:
    config = job_config(
        scenario.IMAGE,
        *scenario.KEYS,
        namespace="ddp-mnist-mismatch",
        storageClassName="ddp-mnist-nfs-mismatch",
        platformStack=PLATFORM_STACK,
        kservePresent="true",
        serveKind="kserve",
    )
    stack = scenario.stack(backend, "local-mismatch", config)
    line = (
        "stack local-mismatch declares kservePresent=true, but its platform stack local-platform says "
        "false (remove kservePresent from stack local-mismatch: it comes from the platform stack)"
    )
    try:
        for operation in (stack.preview, stack.up):
            with pytest.raises(auto.CommandError) as refused:
                operation(on_output=print)
            said = str(refused.value)
            assert line in said, said[-3000:]
            assert "Traceback" not in said and "unhandled exception" not in said, said[-3000:]
        registered = [r["type"] for r in stack.export_stack().deployment.get("resources", [])]
        assert not [t for t in registered if t.startswith("kubernetes:")], registered
        assert not live.exists("namespace", "ddp-mnist-mismatch")
        # A platform stack that was never brought up: the engine's read step names it, qualified with
        # this stack's organization and project, in one line.
        set_config(
            stack, {**config, "ddp-mnist:platformStack": "nowhere", "ddp-mnist:kservePresent": "false"}
        )
        with pytest.raises(auto.CommandError) as unread:
            stack.preview(on_output=print)
        said = str(unread.value)
        assert 'error: Preview failed: unknown stack "organization/ddp-mnist/nowhere"' in said, said[-3000:]
    finally:
        if not KEEP:
            stack.workspace.remove_stack("local-mismatch", force=True)
