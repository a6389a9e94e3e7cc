"""What KWOK plays: fake nodes shaped like the stacks' node pools, and the stages pods go through.

Nodes carry the labels, taints and `nvidia.com/gpu` capacity the shipped stacks select (stacks/*.yaml:
`jobNodeSelector`, `jobTolerations`, `jobGpusPerNode`), so the real scheduler places or refuses their
pods as a cloud's would. Stages: upstream's node and pod stages at the pinned KWOK (the module's
`kustomize/stage/`), and ours on top: the pods of every job kind (owned by a Job or a PyTorchJob) complete
with exit 0 after a short delay; a stand-in's pod (standins.py) stays Pending until its process
answers its readiness probe (`stand_in_hold_stage`); a scenario fails the pods it chooses with the exit
code it chooses by creating a `failure_stage` (weight 100, which KWOK's `Lifecycle.Match` always
prefers to the weight-0 stages, sigs.k8s.io/kwok v0.8.0 `pkg/utils/lifecycle/lifecycle.go`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infra.localcluster.kube import Obj
from infra.program.common import yamlio

FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"
STAGE_API = "kwok.x-k8s.io/v1alpha1"
JOB_POD_DELAY_MS = 2000


@dataclass(frozen=True)
class NodePool:
    name: str
    count: int
    cpu: str
    memory: str
    gpus: int = 0
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[tuple[str, str, str], ...] = ()  # key, value, effect


NODE_POOLS = (
    NodePool("cpu", 3, "8", "32Gi"),
    # GKE: g2-standard-8 with one L4; GKE taints GPU nodes nvidia.com/gpu=present:NoSchedule.
    NodePool(
        "gke-l4",
        4,
        "8",
        "32Gi",
        1,
        (("cloud.google.com/gke-accelerator", "nvidia-l4"),),
        (("nvidia.com/gpu", "present", "NoSchedule"),),
    ),
    # EKS: g5.12xlarge (48 vCPU, 192 GiB, 4 A10G), tainted nvidia.com/gpu:NoSchedule by the node group.
    NodePool(
        "eks-g5",
        2,
        "48",
        "192Gi",
        4,
        (("node.kubernetes.io/instance-type", "g5.12xlarge"),),
        (("nvidia.com/gpu", "", "NoSchedule"),),
    ),
    # AKS: a GPU node pool `gpunp` (Standard_NC24ads_A100_v4: 24 vCPU, 220 GiB, one A100), sku=gpu:NoSchedule.
    NodePool("aks-gpunp", 2, "24", "220Gi", 1, (("agentpool", "gpunp"),), (("sku", "gpu", "NoSchedule"),)),
)


def node(pool: NodePool, index: int) -> Obj:
    name = f"kwok-{pool.name}-{index}"
    capacity = {"cpu": pool.cpu, "memory": pool.memory, "pods": "110"}
    if pool.gpus:
        capacity["nvidia.com/gpu"] = str(pool.gpus)
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        "ddp-mnist.local/pool": pool.name,
        **dict(pool.labels),
    }
    taints = [{"key": k, "effect": e, **({"value": v} if v else {})} for k, v, e in pool.taints]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {FAKE_NODE_ANNOTATION: "fake"}},
        "spec": {"taints": taints} if taints else {},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def nodes() -> list[Obj]:
    return [node(pool, i) for pool in NODE_POOLS for i in range(pool.count)]


UPSTREAM_STAGES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-delete.yaml",
)


def _terminated(exit_code: int, reason: str, phase: str) -> str:
    return f"""\
{{{{ $now := Now }}}}
containerStatuses:
{{{{ range $index, $item := .spec.containers }}}}
- image: {{{{ $item.image | Quote }}}}
  name: {{{{ $item.name | Quote }}}}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: {exit_code}
      finishedAt: {{{{ $now | Quote }}}}
      reason: {reason}
      startedAt: {{{{ $now | Quote }}}}
{{{{ end }}}}
phase: {phase}
"""


def _running_pods_of(kinds: list[str], extra: list[Obj] | None = None) -> Obj:
    return {
        "matchExpressions": [
            {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
            {"key": ".status.phase", "operator": "In", "values": ["Running"]},
            {"key": ".metadata.ownerReferences.[].kind", "operator": "In", "values": kinds},
            *(extra or []),
        ]
    }


def job_pod_complete() -> Obj:
    """Pods of a Job (the seed, an Indexed Job, a JobSet's Jobs) or a PyTorchJob exit 0 after a delay."""
    return {
        "apiVersion": STAGE_API,
        "kind": "Stage",
        "metadata": {"name": "ddp-mnist-job-pod-complete"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": _running_pods_of(["Job", "PyTorchJob"]),
            "delay": {"durationMilliseconds": JOB_POD_DELAY_MS},
            "next": {"statusTemplate": _terminated(0, "Completed", "Succeeded")},
        },
    }


def _of(namespace: str, labels: dict[str, str]) -> list[Obj]:
    return [
        {"key": ".metadata.namespace", "operator": "In", "values": [namespace]},
        *(
            {"key": f'.metadata.labels["{key}"]', "operator": "In", "values": [value]}
            for key, value in labels.items()
        ),
    ]


def _job_pod_stage(name: str, selector: Obj, weight: int, delay_ms: int, status: str) -> Obj:
    return {
        "apiVersion": STAGE_API,
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": selector,
            "weight": weight,
            "delay": {"durationMilliseconds": delay_ms},
            "next": {"statusTemplate": status},
        },
    }


def failure_stage(name: str, namespace: str, labels: dict[str, str], exit_code: int) -> Obj:
    """Running job pods of `namespace` with `labels` end with `exit_code` (a scenario's failure)."""
    selector = _running_pods_of(["Job", "PyTorchJob"], _of(namespace, labels))
    return _job_pod_stage(name, selector, 100, JOB_POD_DELAY_MS, _terminated(exit_code, "Error", "Failed"))


def long_run_stage(
    name: str, namespace: str, labels: dict[str, str], seconds: int, unless_labels: tuple[str, ...] = ()
) -> Obj:
    """Running job pods of `namespace` with `labels` exit 0 only after `seconds` (a training that long),
    so that a scenario can act on them while they run; a pod that carries one of `unless_labels` is left
    to another stage (a scenario's, or `job_pod_complete`'s exit 0 after JOB_POD_DELAY_MS). KWOK picks
    among the stages that match a pod at random, by weight (sigs.k8s.io/kwok v0.8.0
    `pkg/utils/lifecycle/lifecycle.go`, Match): only a weight of 0 never wins over a positive one, so
    two scenario stages must not match the same pod. A label added while the pod waits out `seconds`
    moves it to the stage that matches it then, as a label change is a pod update KWOK matches again."""
    unless = [{"key": f'.metadata.labels["{label}"]', "operator": "DoesNotExist"} for label in unless_labels]
    selector = _running_pods_of(["Job", "PyTorchJob"], _of(namespace, labels) + unless)
    return _job_pod_stage(name, selector, 100, seconds * 1000, _terminated(0, "Completed", "Succeeded"))


def sigterm_stage(name: str, namespace: str, exit_code: int) -> Obj:
    """A running job pod of `namespace` that is being deleted (the API's eviction, a drain, a spot
    node's shutdown) is written as the kubelet would end it: no process runs and no signal is sent;
    the stage sets the container terminated with `exit_code` (what the trainer exits with after its
    checkpoint on SIGTERM, 143) and the pod, whose restartPolicy is Never, Failed before it is removed
    (kubernetes v1.33.13 `pkg/kubelet/status/status_manager.go`, canBeDeleted: "Delay deletion of
    pods until the phase is terminal"). Without it KWOK's `pod-delete` removes the pod while Running,
    which a Job with a podFailurePolicy never counts as failed (`pkg/controller/job/job_controller.go`,
    isPodFailed), so its tracking finalizer would hold the pod forever."""
    selector = {
        "matchExpressions": [
            {"key": ".metadata.deletionTimestamp", "operator": "Exists"},
            {"key": ".status.phase", "operator": "In", "values": ["Running"]},
            {"key": ".metadata.ownerReferences.[].kind", "operator": "In", "values": ["Job", "PyTorchJob"]},
            *_of(namespace, {}),
        ]
    }
    return _job_pod_stage(name, selector, 100, JOB_POD_DELAY_MS, _terminated(exit_code, "Error", "Failed"))


def _ready_after(kwok_module: Path, name: str, expressions: list[Obj], delay_s: int) -> Obj:
    """Upstream's pod-ready stage for the pods `expressions` also select, preferred and delayed."""
    stage: Obj = yamlio.load(
        (kwok_module / "kustomize" / "stage" / "pod" / "fast" / "pod-ready.yaml").read_text()
    )
    stage["metadata"] = {"name": name}
    stage["spec"]["selector"]["matchExpressions"] += expressions
    stage["spec"]["weight"] = 100
    stage["spec"]["delay"] = {"durationMilliseconds": delay_s * 1000}
    return stage


def slow_ready_stage(
    kwok_module: Path, name: str, namespace: str, labels: dict[str, str], delay_s: int
) -> Obj:
    """New pods of `namespace` with `labels` become Ready only `delay_s` after they were scheduled
    (upstream's pod-ready stage, delayed and preferred): a server whose model takes that long to load."""
    return _ready_after(kwok_module, name, _of(namespace, labels), delay_s)


# What the supervisor puts on a stand-in's pod once its process answers its readiness probe
# (standins.py, LocalPods.release).
PROCESS_READY = "ddp-mnist.local/process-ready"
HOLD_S = 86400


def stand_in_hold_stage(kwok_module: Path, namespaces: list[str]) -> Obj:
    """A new pod of a ReplicaSet in `namespaces` (where the stand-ins' Deployments live) stays Pending
    until it carries PROCESS_READY: on a cluster a controller's pod is Ready only once its readiness
    probe answers, which for the webhooks' controllers means their webhook server is listening
    (kubeflow/trainer v2.3.0 `cmd/trainer-controller-manager/main.go`, setupProbeEndpoints); KWOK alone
    would make it Ready at once, whatever its process does. The label moves the pod to upstream's
    pod-ready stage, as a label change is a pod update KWOK matches again (long_run_stage)."""
    expressions: list[Obj] = [
        {"key": ".metadata.namespace", "operator": "In", "values": sorted(namespaces)},
        {"key": ".metadata.ownerReferences.[].kind", "operator": "In", "values": ["ReplicaSet"]},
        {"key": f'.metadata.labels["{PROCESS_READY}"]', "operator": "DoesNotExist"},
    ]
    return _ready_after(kwok_module, "ddp-mnist-stand-in-hold", expressions, HOLD_S)


def stages(kwok_module: Path, stand_in_namespaces: list[str]) -> list[Obj]:
    upstream = [yamlio.load((kwok_module / "kustomize" / "stage" / p).read_text()) for p in UPSTREAM_STAGES]
    return [*upstream, job_pod_complete(), stand_in_hold_stage(kwok_module, stand_in_namespaces)]


def stage_crd(kwok_module: Path) -> Obj:
    loaded: Obj = yamlio.load(
        (kwok_module / "kustomize" / "crd" / "bases" / "kwok.x-k8s.io_stages.yaml").read_text()
    )
    return loaded
