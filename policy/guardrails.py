"""Platform guardrails as plain functions over Kubernetes objects (dicts as the API server sees them).

Each rule takes one object (or, for `shared_claims_read_write_many`, all of a stack's objects) and
returns its violations as one-line messages; an empty list means compliant. Nothing here imports
Pulumi: `crossguard.py` wraps the rules as CrossGuard policies, and the tests call them directly on
the objects the program renders.

Workloads understood: kubeflow.org PyTorchJob (templates under spec.pytorchReplicaSpecs.*, processes
per pod from spec.nprocPerNode), batch/v1 Job (processes per pod from a literal PET_NPROC_PER_NODE
env var) and CronJob, apps/v1 Deployment/StatefulSet/ReplicaSet/DaemonSet, v1 Pod and PodTemplate,
trainer.kubeflow.org (Cluster)TrainingRuntime (templates under its JobSet template's replicatedJobs)
and TrainJob (its nodes, and GPUs and processes per node, from spec.trainer), serving.kserve.io
InferenceService (its predictor's pod as KServe makes it, `infra.offline.effective.serving`: a storage
URI brings KServe's storage-initializer init container; minReplicas pods).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from infra.offline.admission import podsecurity

Obj = Mapping[str, Any]
GPU = "nvidia.com/gpu"
TRAINER_API = "trainer.kubeflow.org/"
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"


@dataclass(frozen=True)
class PodTemplate:
    """One pod template of a workload: where it is, its metadata and spec, how many pods it makes."""

    where: str
    namespace: str
    metadata: Obj
    spec: Obj
    pods: int
    procs_per_pod: int | None


def _int(value: Any) -> int | None:
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


def _quantity(value: Any) -> int | str:
    """A count as a number when it is one ("2", 2 and 2.0 alike), else its text."""
    number = _int(value)
    return str(value) if number is None else number


def _count(value: Any, default: int = 1) -> int:
    number = _int(value)
    return default if number is None else number


def _name(obj: Obj) -> str:
    return f"{obj.get('kind', '?')} {obj.get('metadata', {}).get('name', '?')}"


def containers(spec: Obj, ephemeral: bool = True) -> Iterator[Obj]:
    """Every container of a pod spec: init containers, containers and (optionally) ephemeral ones."""
    fields = ["initContainers", "containers"] + (["ephemeralContainers"] if ephemeral else [])
    for field in fields:
        yield from spec.get(field) or []


def _env_procs(spec: Obj) -> int | None:
    for container in containers(spec, ephemeral=False):
        for env in container.get("env") or []:
            if env.get("name") == "PET_NPROC_PER_NODE" and "value" in env:
                return _int(env["value"])
    return None


def pod_templates(obj: Obj) -> list[PodTemplate]:
    """The pod templates of a workload object (empty for anything that makes no pods)."""
    kind, api = obj.get("kind"), str(obj.get("apiVersion", ""))
    spec = obj.get("spec") or {}
    namespace = (obj.get("metadata") or {}).get("namespace", "")
    where = _name(obj)

    def template(t: Obj, label: str, pods: int, procs: int | None) -> PodTemplate:
        return PodTemplate(label, namespace, t.get("metadata") or {}, t.get("spec") or {}, pods, procs)

    if kind == "PyTorchJob" and api.startswith("kubeflow.org/"):
        procs = _int(spec.get("nprocPerNode"))
        return [
            template(
                replica.get("template") or {}, f"{where} {rtype}", _count(replica.get("replicas")), procs
            )
            for rtype, replica in sorted((spec.get("pytorchReplicaSpecs") or {}).items())
        ]
    if kind == "Job" and api.startswith("batch/"):
        t = spec.get("template") or {}
        parallelism = _count(spec.get("parallelism"))
        pods = min(parallelism, _count(spec.get("completions"), parallelism))
        return [template(t, where, pods, _env_procs(t.get("spec") or {}))]
    if kind == "CronJob" and api.startswith("batch/"):
        job = (spec.get("jobTemplate") or {}).get("spec") or {}
        return [template(job.get("template") or {}, where, _count(job.get("parallelism")), None)]
    if kind in {"Deployment", "StatefulSet", "ReplicaSet", "DaemonSet"} and api.startswith("apps/"):
        return [template(spec.get("template") or {}, where, _count(spec.get("replicas")), None)]
    if kind == "InferenceService" and api.startswith("serving.kserve.io/"):
        from infra.offline.effective.serving import predictor_template

        _, predictor = predictor_template(dict(obj))
        replicas = _count((spec.get("predictor") or {}).get("minReplicas"))
        return [template(predictor, f"{where} predictor", replicas, None)]
    if kind == "PodTemplate" and api == "v1":
        return [template(obj.get("template") or {}, where, 1, None)]
    if kind == "Pod" and api == "v1":
        return [PodTemplate(where, namespace, obj.get("metadata") or {}, spec, 1, None)]
    if kind in ("TrainingRuntime", "ClusterTrainingRuntime") and api.startswith(TRAINER_API):
        # The trainer replicatedJob runs mlPolicy.numNodes pods (a TrainJob's numNodes overrides it);
        # processes per pod are the TrainJob's, so the GPU rule checks them there.
        nodes = _count((spec.get("mlPolicy") or {}).get("numNodes"))
        found = []
        for rjob in ((spec.get("template") or {}).get("spec") or {}).get("replicatedJobs") or []:
            job = rjob.get("template") or {}
            job_spec = job.get("spec") or {}
            trainer = ((job.get("metadata") or {}).get("labels") or {}).get(ANCESTOR_LABEL) == "trainer"
            pods = nodes if trainer else _count(rjob.get("replicas")) * _count(job_spec.get("parallelism"))
            found.append(template(job_spec.get("template") or {}, f"{where} {rjob.get('name')}", pods, None))
        return found
    return []


def _trainjob_node(obj: Obj) -> tuple[int, Obj, int | None] | None:
    """A TrainJob's (nodes, resources per node, processes per node); None for anything else."""
    if obj.get("kind") != "TrainJob" or not str(obj.get("apiVersion", "")).startswith(TRAINER_API):
        return None
    trainer = (obj.get("spec") or {}).get("trainer") or {}
    return (
        _count(trainer.get("numNodes")),
        trainer.get("resourcesPerNode") or {},
        _int(trainer.get("numProcPerNode")),
    )


# --- GPUs --------------------------------------------------------------------------------------


def gpu_limits_match_processes(obj: Obj) -> list[str]:
    """GPU pods set nvidia.com/gpu limits (= requests), one GPU per training process of the pod."""
    violations = []
    templates = pod_templates(obj)
    trainjob = _trainjob_node(obj)
    if trainjob is not None:  # resourcesPerNode goes to every node's trainer container
        _, resources, procs = trainjob
        node = {"containers": [{"name": "node", "resources": resources}]}
        templates = [PodTemplate(_name(obj), "", {}, node, trainjob[0], procs)]
    for t in templates:
        total = 0
        for c in containers(t.spec, ephemeral=False):
            resources = c.get("resources") or {}
            limit = (resources.get("limits") or {}).get(GPU)
            request = (resources.get("requests") or {}).get(GPU)
            if request is not None and limit is None:
                violations.append(f"{t.where}: container {c.get('name')} requests {GPU} without a limit")
            elif request is not None and _quantity(request) != _quantity(limit):
                violations.append(
                    f"{t.where}: container {c.get('name')} requests {request} {GPU} but its limit is {limit}"
                )
            total += _int(limit) or 0
        if total and t.procs_per_pod is not None and total != t.procs_per_pod:
            violations.append(
                f"{t.where}: {total} {GPU} per pod for {t.procs_per_pod} processes per node; "
                "set the GPU limit equal to the processes per node (one GPU per process)"
            )
    return violations


# --- images ------------------------------------------------------------------------------------

_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def image_problem(image: str) -> str | None:
    """Why an image reference is not pinned, or None when it has a version tag or a digest."""
    if _DIGEST.search(image):
        return None
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return "is untagged (that means :latest)"
    if last.rsplit(":", 1)[1] == "latest":
        return "uses :latest, which moves"
    return None


def images_pinned(obj: Obj) -> list[str]:
    """No `:latest` and no untagged images: a version tag or an @sha256 digest."""
    violations = []
    for t in pod_templates(obj):
        for c in containers(t.spec):
            problem = image_problem(str(c.get("image", "")))
            if problem:
                violations.append(
                    f"{t.where}: container {c.get('name')} image {c.get('image')} {problem}; "
                    "pin a version tag or an @sha256 digest"
                )
    return violations


def images_by_digest(obj: Obj) -> list[str]:
    """The workload's own containers name their image by @sha256 digest (advisory).

    A version tag can be re-pushed: the same config would then run other code, and nodes that pulled
    the tag earlier keep the old one. Init containers are left out: those that the platform adds (the
    training operator's, KServe's storage-initializer) come from its own configuration.
    """
    violations = []
    for t in pod_templates(obj):
        for c in t.spec.get("containers") or []:
            image = str(c.get("image", ""))
            if not _DIGEST.search(image):
                violations.append(
                    f"{t.where}: container {c.get('name')} image {image} has no @sha256 digest, and a tag "
                    "can be re-pushed; set the digest a release names (docs/RELEASE.md)"
                )
    return violations


# --- shared claims (stack-wide) ----------------------------------------------------------------


@dataclass
class _ClaimUse:
    pods: int = 0
    writers: int = 0


def _claim_uses(objects: Sequence[Obj]) -> dict[tuple[str, str], _ClaimUse]:
    uses: dict[tuple[str, str], _ClaimUse] = {}
    for obj in objects:
        for t in pod_templates(obj):
            mounts = [m for c in containers(t.spec) for m in c.get("volumeMounts") or []]
            for volume in t.spec.get("volumes") or []:
                claim = volume.get("persistentVolumeClaim")
                if not claim:
                    continue
                mounted = [m for m in mounts if m.get("name") == volume.get("name")]
                read_only = claim.get("readOnly") or all(m.get("readOnly") for m in mounted)
                use = uses.setdefault((t.namespace, claim.get("claimName", "")), _ClaimUse())
                use.pods += t.pods
                use.writers += 0 if read_only else t.pods
    return uses


def shared_claims_read_write_many(objects: Sequence[Obj]) -> list[tuple[Obj, str]]:
    """PVCs that more than one pod mounts are ReadWriteMany (ReadOnlyMany will do if nobody writes).

    Returns (claim object, message) pairs. Claims the stack does not define cannot be checked.
    """
    uses = _claim_uses(objects)
    violations = []
    for obj in objects:
        if obj.get("kind") != "PersistentVolumeClaim":
            continue
        meta = obj.get("metadata") or {}
        use = uses.get((meta.get("namespace", ""), meta.get("name", "")))
        if use is None or use.pods < 2:
            continue
        modes = list((obj.get("spec") or {}).get("accessModes") or [])
        allowed = {"ReadWriteMany"} if use.writers else {"ReadWriteMany", "ReadOnlyMany"}
        if not allowed & set(modes):
            need = "ReadWriteMany" if use.writers else "ReadWriteMany or ReadOnlyMany"
            violations.append(
                (
                    obj,
                    f"{_name(obj)} is mounted by {use.pods} pods ({use.writers} writing) but its "
                    f"accessModes are {modes}; a shared claim must be {need}",
                )
            )
    return violations


# --- Pod Security Standards, "restricted" profile ----------------------------------------------
# The checks are the API server's own (k8s.io/pod-security-admission v0.33, "restricted:latest"), shared
# with the offline admission model so the pack and `render --validate` cannot disagree.

RESTRICTED_CHECKS = podsecurity.checks("restricted")


def pod_security_restricted(obj: Obj, privileged_namespaces: Sequence[str] = ()) -> list[str]:
    """Every pod template meets Pod Security 'restricted' (every check, in the API server's wording),
    except in `privileged_namespaces`, whose pods may run privileged (an in-kernel NFS server's)."""
    return [
        f"{t.where}: {v.reason} ({v.detail}) (restricted: {v.check})"
        for t in pod_templates(obj)
        if t.namespace not in privileged_namespaces
        for v in podsecurity.violations({"metadata": t.metadata, "spec": t.spec}, "restricted")
    ]


# --- secrets in env ----------------------------------------------------------------------------

SECRET_ENV_NAME = re.compile(r"SECRET|PASSWORD|PASSWD|TOKEN|ACCESS_KEY|API_KEY|PRIVATE_KEY|CREDENTIAL", re.I)
# Names of locations rather than values (AWS_WEB_IDENTITY_TOKEN_FILE, ..._PATH) hold no secret.
LOCATION_SUFFIX = re.compile(r"_(FILE|PATH|DIR)$", re.I)
SECRET_VALUE = re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b|-----BEGIN [A-Z ]*PRIVATE KEY-----")


def no_secret_literals_in_env(obj: Obj) -> list[str]:
    """Secret material comes from a Secret (valueFrom/envFrom), never as a literal env value.

    Messages name the variable, never its value.
    """
    violations = []
    for t in pod_templates(obj):
        for c in containers(t.spec):
            for env in c.get("env") or []:
                name, value = str(env.get("name", "")), env.get("value")
                if not value:
                    continue
                by_name = SECRET_ENV_NAME.search(name) and not LOCATION_SUFFIX.search(name)
                if by_name or SECRET_VALUE.search(str(value)):
                    violations.append(
                        f"{t.where}: container {c.get('name')} env {name} has a literal value that looks "
                        "secret; use valueFrom.secretKeyRef"
                    )
    return violations


# --- resources ---------------------------------------------------------------------------------


def requests_and_limits_set(obj: Obj, require_cpu_limit: bool = False) -> list[str]:
    """Every container requests CPU and memory and has a memory limit (a CPU limit when required).

    CPU limits are optional by default: CFS throttling slows data loading and collective progress
    threads, while the memory limit is what protects the node.
    """
    needed = [("requests", "cpu"), ("requests", "memory"), ("limits", "memory")]
    if require_cpu_limit:
        needed.append(("limits", "cpu"))
    violations = []
    for t in pod_templates(obj):
        for c in containers(t.spec, ephemeral=False):
            resources = c.get("resources") or {}
            missing = [f"{a}.{r}" for a, r in needed if r not in (resources.get(a) or {})]
            if missing:
                violations.append(f"{t.where}: container {c.get('name')} sets no {', '.join(missing)}")
    return violations


# --- job size ----------------------------------------------------------------------------------


def job_size(obj: Obj) -> tuple[int, int] | None:
    """(nodes, GPUs) a training job runs at once; None for objects that are not training jobs."""
    trainjob = _trainjob_node(obj)
    if trainjob is not None:
        nodes, resources, _ = trainjob
        return nodes, nodes * (_int((resources.get("limits") or {}).get(GPU)) or 0)
    if obj.get("kind") not in ("PyTorchJob", "Job"):
        return None
    templates = pod_templates(obj)
    if not templates:
        return None
    nodes = sum(t.pods for t in templates)
    gpus = 0
    for t in templates:
        per_pod = sum(
            _int(((c.get("resources") or {}).get("limits") or {}).get(GPU)) or 0
            for c in containers(t.spec, ephemeral=False)
        )
        gpus += per_pod * t.pods
    return nodes, gpus


def job_within_budget(obj: Obj, max_nodes: int, max_gpus: int) -> list[str]:
    """A training job uses at most `max_nodes` pods and `max_gpus` GPUs (from the policy's config)."""
    size = job_size(obj)
    if size is None:
        return []
    nodes, gpus = size
    violations = []
    if nodes > max_nodes:
        violations.append(
            f"{_name(obj)} runs {nodes} nodes; this platform allows at most {max_nodes} per job"
        )
    if gpus > max_gpus:
        violations.append(f"{_name(obj)} uses {gpus} GPUs; this platform allows at most {max_gpus} per job")
    return violations
