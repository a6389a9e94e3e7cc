"""A TrainJob's pods and Services: Kubeflow Trainer v2.3.0 makes a JobSet, JobSet v0.12.0 its Jobs and
headless Service, the Job controller the pods (`infra.review.effective.job`).

Upstream, kubeflow/trainer tag v2.3.0:
- `pkg/runtime/core/trainingruntime.go` (`newRuntimeInfo`): the runtime is the namespaced TrainingRuntime
  `spec.runtimeRef.name` (the TrainJob's namespace; `runtimeRef.kind` defaults to ClusterTrainingRuntime);
  the trainer replicatedJob (label `trainer.kubeflow.org/trainjob-ancestor-step: trainer`) runs
  `mlPolicy.numNodes` pods; `spec.trainer.resourcesPerNode` is merged into its `node` container;
- `pkg/runtime/framework/plugins/torch/torch.go` (`EnforceMLPolicy`): the count becomes
  `spec.trainer.numNodes`; into the `node` container it upserts `spec.trainer.env`, then `PET_NNODES`,
  `PET_NPROC_PER_NODE` (`numProcPerNode`, else "auto" with GPUs, else the CPU request rounded up),
  `PET_NODE_RANK` (fieldRef to the `batch.kubernetes.io/job-completion-index` annotation),
  `PET_MASTER_ADDR=<trainjob>-node-0-0.<trainjob>`, `PET_MASTER_PORT=29500`, and the container port
  29500 (`apply.UpsertPort`: it replaces a port with the same number or name);
- `pkg/runtime/framework/plugins/jobset/jobset.go` (`SyncParallelCount`, `Build`) and `builder.go`
  (`Trainer`): the JobSet is named after the TrainJob, labelled and annotated as the runtime template's
  metadata; the trainer replicatedJob gets `replicas: 1`, parallelism = completions = the count, and
  the TrainJob's image, command and args when set.
Upstream, kubernetes-sigs/jobset tag v0.12.0:
- `pkg/webhooks/jobset_webhook.go` (`Default`): completionMode Indexed, pod restartPolicy OnFailure when
  unset, DNS hostnames on, not-ready addresses published;
- `pkg/controllers/jobset_controller.go` (`constructJob`, `labelAndAnnotateObject`,
  `createHeadlessSvcIfNecessary`) and `pkg/util/placement/placement.go` (`GenJobName`): Job
  `<jobset>-<replicatedJob>-<index>` with the `jobset.sigs.k8s.io/*` labels and annotations on the Job
  and its pod template, pod subdomain `<subdomain or jobset>`, and the headless Service of that name
  selecting `jobset.sigs.k8s.io/jobset-name`.
Not modelled: the runtime snapshot ConfigMap, initializer jobs, runtimePatches, gang-scheduling plugins,
JobSet exclusive placement and its pod webhook's `jobset.sigs.k8s.io/priority` label.
"""

from __future__ import annotations

import copy
import hashlib
import math
from collections.abc import Sequence
from typing import Any

from infra.review.effective import job as job_controller
from infra.review.effective.base import Controllers, Effective, EffectivePod, Obj, deriver

GROUP = "trainer.kubeflow.org"
ANCESTOR_LABEL = f"{GROUP}/trainjob-ancestor-step"
ANCESTOR_TRAINER = "trainer"
NODE = "node"
TRAINER_PORT = 29500  # constants.ContainerTrainerPort
COMPLETION_INDEX_FIELD = f"metadata.annotations['{job_controller.INDEX_KEY}']"
JOBSET = "jobset.sigs.k8s.io/"
RUNTIME_KINDS = ("TrainingRuntime", "ClusterTrainingRuntime")


def runtime_of(trainjob: Obj, objects: Sequence[Obj]) -> Obj:
    """The (Cluster)TrainingRuntime a TrainJob references, from the rendered objects."""
    ref = trainjob["spec"]["runtimeRef"]
    kind = ref.get("kind", "ClusterTrainingRuntime")
    namespace = trainjob["metadata"].get("namespace", "")
    for obj in objects:
        meta = obj.get("metadata", {})
        if obj.get("kind") != kind or meta.get("name") != ref["name"]:
            continue
        if kind == "ClusterTrainingRuntime" or meta.get("namespace", "") == namespace:
            return obj
    raise LookupError(
        f"TrainJob {trainjob['metadata']['name']}: {kind} {ref['name']} is not among the rendered objects "
        "(the Trainer's webhook refuses a TrainJob whose runtime does not exist)"
    )


def _upsert(items: list[Obj], item: Obj, same: Any) -> None:
    """`apply.UpsertEnvVars`/`UpsertPort`: replace the first matching entry in place, else append."""
    for i, existing in enumerate(items):
        if same(existing, item):
            items[i] = item
            return
    items.append(item)


def _same_name(a: Obj, b: Obj) -> bool:
    return a.get("name") == b.get("name")


def _same_port(a: Obj, b: Obj) -> bool:
    return a.get("containerPort") == b.get("containerPort") or (
        a.get("name") is not None and a.get("name") == b.get("name")
    )


def nproc_per_node(trainer: Obj, resources: Obj) -> str:
    """`PET_NPROC_PER_NODE`: numProcPerNode, else "auto" with GPUs, else the CPUs per node (at least 1)."""
    from infra.review.admission.resources import quantity

    if trainer.get("numProcPerNode") is not None:
        return str(int(trainer["numProcPerNode"]))
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    if any(k.endswith("/gpu") for k in (*requests, *limits)):
        return "auto"
    cpu = requests.get("cpu") or limits.get("cpu")
    return str(max(1, math.ceil(quantity(cpu)) if cpu else 0))


def torch_env(trainjob: Obj, nodes: int, nproc: str) -> list[Obj]:
    """The torch plugin's env for the `node` container, in its order."""
    name = trainjob["metadata"]["name"]
    return [
        {"name": "PET_NNODES", "value": str(nodes)},
        {"name": "PET_NPROC_PER_NODE", "value": nproc},
        {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX_FIELD}}},
        {"name": "PET_MASTER_ADDR", "value": f"{name}-{NODE}-0-0.{name}"},
        {"name": "PET_MASTER_PORT", "value": str(TRAINER_PORT)},
    ]


def _trainer_container(trainjob: Obj, container: Obj, nodes: int, torch: bool) -> None:
    """What the Trainer does to the `node` container of the trainer replicatedJob (in place)."""
    trainer = trainjob["spec"].get("trainer") or {}
    per_node = trainer.get("resourcesPerNode")
    if per_node:  # strategic merge: the TrainJob's quantities win, key by key
        resources = container.setdefault("resources", {})
        for part in ("requests", "limits"):
            if per_node.get(part):
                resources[part] = {**(resources.get(part) or {}), **per_node[part]}
    for field in ("image", "command", "args"):
        if trainer.get(field) is not None:
            container[field] = copy.deepcopy(trainer[field])
    env: list[Obj] = container.setdefault("env", [])
    for var in trainer.get("env", []):
        _upsert(env, copy.deepcopy(var), _same_name)
    if torch:
        for var in torch_env(trainjob, nodes, nproc_per_node(trainer, container.get("resources") or {})):
            _upsert(env, var, _same_name)
        _upsert(container.setdefault("ports", []), {"containerPort": TRAINER_PORT}, _same_port)


def jobset_for(trainjob: Obj, runtime: Obj) -> Obj:
    """The JobSet the Trainer applies for `trainjob` from `runtime`, as JobSet's webhook defaults it."""
    name, namespace = trainjob["metadata"]["name"], trainjob["metadata"].get("namespace", "")
    template = runtime["spec"].get("template") or {}
    policy = runtime["spec"].get("mlPolicy")
    trainer = trainjob["spec"].get("trainer") or {}
    spec = copy.deepcopy(template.get("spec") or {})
    for rjob in spec.get("replicatedJobs", []):
        job_template = rjob["template"]
        job_spec = job_template["spec"]
        ancestor = (job_template.get("metadata") or {}).get("labels", {}).get(ANCESTOR_LABEL)
        job_spec.setdefault("completionMode", "Indexed")
        pod_spec = job_spec["template"]["spec"]
        pod_spec["restartPolicy"] = pod_spec.get("restartPolicy") or "OnFailure"
        if ancestor != ANCESTOR_TRAINER:
            continue
        default = policy.get("numNodes", 1) if policy is not None else job_spec.get("parallelism", 1)
        nodes = int(trainer.get("numNodes", default))
        rjob["replicas"] = 1
        job_spec["parallelism"] = job_spec["completions"] = nodes
        for container in pod_spec["containers"]:
            if container["name"] == NODE:
                _trainer_container(trainjob, container, nodes, torch=bool(policy and "torch" in policy))
    network = spec.setdefault("network", {})
    network.setdefault("enableDNSHostnames", True)
    network.setdefault("publishNotReadyAddresses", True)
    meta = template.get("metadata") or {}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(meta.get("labels") or {}),
            "annotations": dict(meta.get("annotations") or {}),
        },
        "spec": spec,
    }


def subdomain(jobset: Obj) -> str | None:
    network = jobset["spec"].get("network") or {}
    if not network.get("enableDNSHostnames"):
        return None
    return network.get("subdomain") or jobset["metadata"]["name"]


def jobset_keys(jobset: Obj, rjob: Obj, index: int) -> dict[str, str]:
    """The labels (and, the same, annotations) JobSet puts on a child Job and its pod template, at
    restart attempt 0 (`labelAndAnnotateObject`; the RestartJob feature gate is off by default)."""
    name, namespace = jobset["metadata"]["name"], jobset["metadata"].get("namespace", "")
    rjobs = jobset["spec"]["replicatedJobs"]
    group = rjob.get("groupName", "default")
    before = sum(int(r.get("replicas", 1)) for r in rjobs[: rjobs.index(rjob)])
    group_rjobs = [r for r in rjobs if r.get("groupName", "default") == group]
    group_before = sum(int(r.get("replicas", 1)) for r in group_rjobs[: group_rjobs.index(rjob)])
    job_name = f"{name}-{rjob['name']}-{index}"
    return {
        f"{JOBSET}jobset-name": name,
        f"{JOBSET}jobset-uid": "<uid>",
        f"{JOBSET}replicatedjob-name": rjob["name"],
        f"{JOBSET}restart-attempt": "0",
        f"{JOBSET}replicatedjob-replicas": str(int(rjob.get("replicas", 1))),
        f"{JOBSET}global-replicas": str(sum(int(r.get("replicas", 1)) for r in rjobs)),
        f"{JOBSET}job-index": str(index),
        f"{JOBSET}job-key": hashlib.sha1(f"{namespace}/{job_name}".encode()).hexdigest(),
        f"{JOBSET}job-global-index": str(before + index),
        f"{JOBSET}group-name": group,
        f"{JOBSET}group-replicas": str(sum(int(r.get("replicas", 1)) for r in group_rjobs)),
        f"{JOBSET}job-group-index": str(group_before + index),
    }


def _labelled(meta: Obj, keys: dict[str, str]) -> Obj:
    meta = copy.deepcopy(meta or {})
    meta["labels"] = {**(meta.get("labels") or {}), **keys}
    meta["annotations"] = {**(meta.get("annotations") or {}), **keys}
    return meta


def jobs_of(jobset: Obj) -> list[tuple[Obj, Obj]]:
    """(replicatedJob, child Job) for every Job the JobSet controller creates, in order."""
    found = []
    for rjob in jobset["spec"].get("replicatedJobs", []):
        for index in range(int(rjob.get("replicas", 1))):
            keys = jobset_keys(jobset, rjob, index)
            spec = copy.deepcopy(rjob["template"]["spec"])
            spec["template"]["metadata"] = _labelled(spec["template"].get("metadata") or {}, keys)
            if subdomain(jobset):
                spec["template"]["spec"]["subdomain"] = subdomain(jobset)
            spec["suspend"] = bool(jobset["spec"].get("suspend", False))
            meta = _labelled(rjob["template"].get("metadata") or {}, keys)
            meta.update(name=f"{jobset['metadata']['name']}-{rjob['name']}-{index}")
            meta["namespace"] = jobset["metadata"].get("namespace", "")
            found.append((rjob, {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}))
    return found


def headless_service(jobset: Obj) -> Obj | None:
    """The Service that makes `<pod hostname>.<subdomain>` resolve (created only with DNS hostnames)."""
    name = subdomain(jobset)
    if name is None:
        return None
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": jobset["metadata"].get("namespace", "")},
        "spec": {
            "clusterIP": "None",
            "selector": {f"{JOBSET}jobset-name": jobset["metadata"]["name"]},
            "publishNotReadyAddresses": bool(jobset["spec"]["network"].get("publishNotReadyAddresses", True)),
        },
    }


@deriver(GROUP, "TrainJob")
def derive(trainjob: Obj, controllers: Controllers) -> Effective:
    jobset = jobset_for(trainjob, runtime_of(trainjob, controllers.rendered))
    owner = f"TrainJob/{trainjob['metadata']['name']}"
    effective = Effective()
    service = headless_service(jobset)
    if service is not None:
        effective.services.append(service)
    for rjob, job in jobs_of(jobset):
        for pod in job_controller.derive(job, controllers).pods:
            effective.pods.append(EffectivePod(owner, rjob["name"], pod.index, pod.index, pod.manifest))
    return effective
