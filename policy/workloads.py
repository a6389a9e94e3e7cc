"""How the policy pack reads workloads: the pod templates of each kind it understands, what a TrainJob
sets on its runtime's containers, a training job's size, and what an object carries that none of that
reads.

Kinds read (each pod template gets every pod rule):
- kubeflow.org PyTorchJob: spec.pytorchReplicaSpecs.*, processes per pod from spec.nprocPerNode;
- batch/v1 Job (processes per pod from a literal PET_NPROC_PER_NODE env var) and CronJob;
- apps/v1 Deployment, StatefulSet, ReplicaSet, DaemonSet; v1 Pod, PodTemplate, ReplicationController;
- jobset.x-k8s.io JobSet: spec.replicatedJobs[].template.spec.template;
- trainer.kubeflow.org (Cluster)TrainingRuntime: its JobSet template's replicatedJobs, the trainer job
  running mlPolicy.numNodes pods;
- serving.kserve.io InferenceService: its predictor's pod as KServe makes it
  (`infra.review.effective.serving`: a storage URI brings the storage-initializer; minReplicas pods).
A trainer.kubeflow.org TrainJob makes its pods from its runtime's templates; what it sets itself
(spec.trainer image, command, args and env; spec.initializer.dataset/model env) is read as containers of
its own (`trainjob_containers`), and its size comes from spec.trainer or, for what it leaves out, from
its runtime (`job_size`).

Anything else is `unread`: a pod spec (a mapping with a containers, initContainers or volumes list) or a
container (a mapping with an image string and a command, args, env, ...) outside the places above, in any
kind. The pack cannot tell what such an object runs, so it refuses it instead of passing it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Obj = Mapping[str, Any]
GPU = "nvidia.com/gpu"
TRAINER_API = "trainer.kubeflow.org/"
JOBSET_API = "jobset.x-k8s.io/"
RUNTIME_KINDS = ("TrainingRuntime", "ClusterTrainingRuntime")
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
NODE = "node"  # the trainer container a TrainJob's spec.trainer applies to
APPS_KINDS = ("Deployment", "StatefulSet", "ReplicaSet", "DaemonSet")
# The kinds `pod_templates` and `trainjob_containers` read: (kinds, API group or core version).
READ_KINDS = (
    (("PyTorchJob",), "kubeflow.org/"),
    (("Job", "CronJob"), "batch/"),
    (APPS_KINDS, "apps/"),
    (("Pod", "PodTemplate", "ReplicationController"), "v1"),
    (("JobSet",), JOBSET_API),
    (("InferenceService",), "serving.kserve.io/"),
    (("TrainJob", *RUNTIME_KINDS), TRAINER_API),
)
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


@dataclass(frozen=True)
class PodTemplate:
    """One pod template of a workload: where it is, its metadata and spec, how many pods it makes, and
    the path of its spec in the object."""

    where: str
    namespace: str
    metadata: Obj
    spec: Obj
    pods: int
    procs_per_pod: int | None
    path: str = ""


@dataclass(frozen=True)
class ContainerAt:
    """A container a rule checks: a pod template's (`label` "container NAME") or what a TrainJob sets on
    its runtime's (`label` the TrainJob's field). `kind`: init, main, ephemeral or trainjob."""

    where: str
    label: str
    container: Obj
    kind: str


def as_int(value: Any) -> int | None:
    """An integer from an int, an integral float (the engine sends every number as a double) or a
    decimal string ("4"); None for "auto", "gpu" and the like."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _count(value: Any, default: int = 1) -> int:
    number = as_int(value)
    return default if number is None else number


def name_of(obj: Obj) -> str:
    return f"{obj.get('kind', '?')} {(obj.get('metadata') or {}).get('name', '?')}"


def is_kind(obj: Obj, kinds: Sequence[str], api: str) -> bool:
    """`obj` is one of `kinds` in the API group of `api` ("apps/", or "v1" for the core group)."""
    version = str(obj.get("apiVersion", ""))
    return obj.get("kind") in kinds and (version == api if "/" not in api else version.startswith(api))


def containers(spec: Obj, ephemeral: bool = True) -> Iterator[Obj]:
    """Every container of a pod spec: init containers, containers and (optionally) ephemeral ones."""
    for field in CONTAINER_LISTS if ephemeral else CONTAINER_LISTS[:2]:
        yield from spec.get(field) or []


def _env_procs(spec: Obj) -> int | None:
    for container in containers(spec, ephemeral=False):
        for env in container.get("env") or []:
            if env.get("name") == "PET_NPROC_PER_NODE" and "value" in env:
                return as_int(env["value"])
    return None


def _job_pods(job_spec: Obj) -> int:
    """Pods a Job runs at once: its parallelism, at most its completions."""
    parallelism = _count(job_spec.get("parallelism"))
    return min(parallelism, _count(job_spec.get("completions"), parallelism))


def _is_trainer(rjob: Obj) -> bool:
    labels = ((rjob.get("template") or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(ANCESTOR_LABEL) == "trainer"


def pod_templates(obj: Obj) -> list[PodTemplate]:
    """The pod templates of a workload object (empty for anything that makes no pods, or is not read).

    One branch per workload kind the pack reads, with its two helpers: a flat table, clearer whole than
    split."""
    spec = obj.get("spec") or {}
    namespace = (obj.get("metadata") or {}).get("namespace", "")
    where = name_of(obj)

    def template(t: Obj, label: str, pods: int, procs: int | None, path: str) -> PodTemplate:
        meta, pod = t.get("metadata") or {}, t.get("spec") or {}
        return PodTemplate(label, namespace, meta, pod, pods, procs, f"{path}.spec")

    def replicated(rjobs: Sequence[Obj], path: str, trainer_pods: int | None) -> list[PodTemplate]:
        found = []
        for i, rjob in enumerate(rjobs):
            job_spec = (rjob.get("template") or {}).get("spec") or {}
            if trainer_pods is not None and _is_trainer(rjob):
                pods = trainer_pods
            else:
                pods = _count(rjob.get("replicas")) * _job_pods(job_spec)
            label, at = f"{where} {rjob.get('name')}", f"{path}[{i}].template.spec.template"
            found.append(template(job_spec.get("template") or {}, label, pods, None, at))
        return found

    if is_kind(obj, ["PyTorchJob"], "kubeflow.org/"):
        procs = as_int(spec.get("nprocPerNode"))
        return [
            template(
                replica.get("template") or {},
                f"{where} {rtype}",
                _count(replica.get("replicas")),
                procs,
                f"spec.pytorchReplicaSpecs.{rtype}.template",
            )
            for rtype, replica in sorted((spec.get("pytorchReplicaSpecs") or {}).items())
        ]
    if is_kind(obj, ["Job"], "batch/"):
        t = spec.get("template") or {}
        return [template(t, where, _job_pods(spec), _env_procs(t.get("spec") or {}), "spec.template")]
    if is_kind(obj, ["CronJob"], "batch/"):
        job = (spec.get("jobTemplate") or {}).get("spec") or {}
        path = "spec.jobTemplate.spec.template"
        return [template(job.get("template") or {}, where, _count(job.get("parallelism")), None, path)]
    if is_kind(obj, APPS_KINDS, "apps/") or is_kind(obj, ["ReplicationController"], "v1"):
        return [
            template(spec.get("template") or {}, where, _count(spec.get("replicas")), None, "spec.template")
        ]
    if is_kind(obj, ["InferenceService"], "serving.kserve.io/"):
        from infra.review.effective.serving import predictor_template

        _, predictor = predictor_template(dict(obj))
        replicas = _count((spec.get("predictor") or {}).get("minReplicas"))
        return [
            PodTemplate(
                f"{where} predictor",
                namespace,
                predictor["metadata"],
                predictor["spec"],
                replicas,
                None,
                "spec.predictor",
            )
        ]
    if is_kind(obj, ["PodTemplate"], "v1"):
        return [template(obj.get("template") or {}, where, 1, None, "template")]
    if is_kind(obj, ["Pod"], "v1"):
        return [PodTemplate(where, namespace, obj.get("metadata") or {}, spec, 1, None, "spec")]
    if is_kind(obj, ["JobSet"], JOBSET_API):
        return replicated(spec.get("replicatedJobs") or [], "spec.replicatedJobs", None)
    if is_kind(obj, RUNTIME_KINDS, TRAINER_API):
        # Processes per pod are the TrainJob's, so the GPU rule checks them there.
        nodes = _count((spec.get("mlPolicy") or {}).get("numNodes"))
        rjobs = ((spec.get("template") or {}).get("spec") or {}).get("replicatedJobs") or []
        return replicated(rjobs, "spec.template.spec.replicatedJobs", nodes)
    return []


# --- TrainJob ----------------------------------------------------------------------------------


def is_trainjob(obj: Obj) -> bool:
    return is_kind(obj, ["TrainJob"], TRAINER_API)


def trainjob_containers(obj: Obj) -> list[ContainerAt]:
    """What a TrainJob sets on its runtime's containers, as containers: spec.trainer's image, command,
    args and env (the trainer's `node` container) and the initializers' env."""
    if not is_trainjob(obj):
        return []
    spec = obj.get("spec") or {}
    trainer = spec.get("trainer") or {}
    found = [
        ContainerAt(
            name_of(obj), "spec.trainer", _fields(trainer, "image", "command", "args", "env"), "trainjob"
        )
    ]
    for part, init in sorted((spec.get("initializer") or {}).items()):
        if isinstance(init, Mapping):
            found.append(
                ContainerAt(name_of(obj), f"spec.initializer.{part}", _fields(init, "env"), "trainjob")
            )
    return found


def container_views(obj: Obj) -> list[ContainerAt]:
    """Every container a rule may check: each pod template's (init, main and ephemeral, in that order),
    then what a TrainJob sets."""
    kinds = dict(zip(CONTAINER_LISTS, ("init", "main", "ephemeral"), strict=True))
    return [
        ContainerAt(t.where, f"container {c.get('name')}", c, kind)
        for t in pod_templates(obj)
        for field, kind in kinds.items()
        for c in t.spec.get(field) or []
    ] + trainjob_containers(obj)


def _fields(source: Obj, *names: str) -> dict[str, Any]:
    return {name: source[name] for name in names if source.get(name) is not None}


def runtime_ref(trainjob: Obj) -> tuple[str, str]:
    """(kind, name) of the runtime a TrainJob names; the kind defaults to ClusterTrainingRuntime."""
    ref = (trainjob.get("spec") or {}).get("runtimeRef") or {}
    return str(ref.get("kind") or "ClusterTrainingRuntime"), str(ref.get("name", ""))


def runtime_of(trainjob: Obj, objects: Sequence[Obj]) -> Obj | None:
    """The (Cluster)TrainingRuntime a TrainJob names, when it is among `objects` (a TrainingRuntime in
    the TrainJob's namespace, a ClusterTrainingRuntime anywhere)."""
    kind, name = runtime_ref(trainjob)
    namespace = (trainjob.get("metadata") or {}).get("namespace", "")
    for obj in objects:
        meta = obj.get("metadata") or {}
        if not is_kind(obj, [kind], TRAINER_API) or kind not in RUNTIME_KINDS or meta.get("name") != name:
            continue
        if kind == "ClusterTrainingRuntime" or meta.get("namespace", "") == namespace:
            return obj
    return None


def trainjob_left_to_runtime(trainjob: Obj) -> list[str]:
    """The size fields a TrainJob leaves to its runtime: numNodes, the GPU limit per node, or both."""
    trainer = (trainjob.get("spec") or {}).get("trainer") or {}
    limits = (trainer.get("resourcesPerNode") or {}).get("limits") or {}
    missing = [] if as_int(trainer.get("numNodes")) is not None else ["spec.trainer.numNodes"]
    if GPU not in limits:
        missing.append(f"spec.trainer.resourcesPerNode.limits.{GPU}")
    return missing


# --- size --------------------------------------------------------------------------------------


def _gpus(spec: Obj) -> int:
    return sum(
        as_int(((c.get("resources") or {}).get("limits") or {}).get(GPU)) or 0
        for c in containers(spec, ephemeral=False)
    )


def _trainjob_size(trainjob: Obj, runtime: Obj | None) -> tuple[int, int]:
    """A TrainJob's (nodes, GPUs): its runtime's pods with the TrainJob's numNodes and GPU limit per node
    in place of the runtime's (the Trainer merges resourcesPerNode into the `node` container); without the
    runtime, its trainer nodes alone (only for a TrainJob that sets both)."""
    trainer = (trainjob.get("spec") or {}).get("trainer") or {}
    node_gpus = as_int(((trainer.get("resourcesPerNode") or {}).get("limits") or {}).get(GPU))
    if runtime is None:
        nodes = _count(trainer.get("numNodes"))
        return nodes, nodes * (node_gpus or 0)
    total_nodes = total_gpus = 0
    rjobs = (((runtime.get("spec") or {}).get("template") or {}).get("spec") or {}).get(
        "replicatedJobs"
    ) or []
    for rjob, t in zip(rjobs, pod_templates(runtime), strict=False):
        pods, gpus = t.pods, _gpus(t.spec)
        if _is_trainer(rjob):
            pods = _count(trainer.get("numNodes"), t.pods)
            if GPU in ((trainer.get("resourcesPerNode") or {}).get("limits") or {}):
                others = [c for c in containers(t.spec, ephemeral=False) if c.get("name") != NODE]
                gpus = (node_gpus or 0) + _gpus({"containers": others})
        total_nodes += pods
        total_gpus += pods * gpus
    return total_nodes, total_gpus


def job_size(obj: Obj, objects: Sequence[Obj] = ()) -> tuple[int, int] | None:
    """(nodes, GPUs) a training job runs at once, all its pods together; a (Cluster)TrainingRuntime's are
    what a TrainJob that sets neither numNodes nor resourcesPerNode gets. None for objects that are not
    training jobs, and for a TrainJob whose size needs a runtime that is not among `objects`."""
    if is_trainjob(obj):
        runtime = runtime_of(obj, objects)
        if runtime is None and trainjob_left_to_runtime(obj):
            return None
        return _trainjob_size(obj, runtime)
    budgeted = (
        is_kind(obj, ["PyTorchJob"], "kubeflow.org/")
        or is_kind(obj, ["Job"], "batch/")
        or is_kind(obj, ["JobSet"], JOBSET_API)
        or is_kind(obj, RUNTIME_KINDS, TRAINER_API)
    )
    templates = pod_templates(obj) if budgeted else []
    if not templates:
        return None
    return sum(t.pods for t in templates), sum(t.pods * _gpus(t.spec) for t in templates)


def understood_kind(obj: Obj) -> bool:
    """A kind whose pod templates (or, for a TrainJob, fields) the pack reads."""
    return any(is_kind(obj, kinds, api) for kinds, api in READ_KINDS)
