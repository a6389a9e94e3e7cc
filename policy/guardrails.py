"""Platform guardrails as plain functions over Kubernetes objects (dicts as the API server sees them).

Each rule takes one object (or, for `shared_claims_read_write_many`, all of a stack's objects; for
`job_within_budget`, one object and the stack's objects its size depends on) and returns its violations
as one-line messages; an empty list means compliant. Nothing here imports Pulumi: `crossguard.py` wraps
the rules as CrossGuard policies (and decides which objects each skips), and the tests call them
directly on the objects the program renders.

The pack denies by default. `workloads.py` reads the pod templates of the kinds the pack understands
(PyTorchJob, Job, CronJob, the apps/v1 kinds, Pod, PodTemplate, ReplicationController, JobSet,
(Cluster)TrainingRuntime, InferenceService) and what a TrainJob sets on its runtime's containers; every
pod rule checks those. An object that carries a pod spec or a container anywhere else, of a known kind or
not, is refused by `workloads_understood` ("kind X is not understood by the policy pack"), as is a Helm
v3 Release, whose objects never reach the pack. A TrainJob's own spec.trainer image, command, args and
env and its initializers' env get the image and secret rules; its GPUs per node the GPU rule; its size,
with what it leaves to its runtime taken from that runtime, the budget (a runtime's own defaults are
budgeted too). What looks like a secret literal is `secretlike.py`'s: env values and command/args
entries, by name and by value.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from secretlike import secret_arguments, secret_env
from unread import unread
from workloads import (
    GPU,
    NODE,
    RUNTIME_KINDS,
    TRAINER_API,
    Obj,
    PodTemplate,
    as_int,
    container_views,
    containers,
    is_kind,
    is_trainjob,
    job_size,
    name_of,
    pod_templates,
    runtime_of,
    runtime_ref,
    trainjob_left_to_runtime,
    understood_kind,
)

from infra.review.admission import podsecurity


def _quantity(value: object) -> int | str:
    """A count as a number when it is one ("2", 2 and 2.0 alike), else its text."""
    number = as_int(value)
    return str(value) if number is None else number


# --- what the pack reads -----------------------------------------------------------------------


def workloads_understood(obj: Obj) -> list[str]:
    """Every pod spec and container in the object is one the pack reads: anything else would run
    unchecked, so it is refused (deny by default)."""
    name = name_of(obj)
    kind = f"{obj.get('apiVersion', '?')} {obj.get('kind', '?')}"
    if is_kind(obj, ["Release"], "helm.sh/"):
        return [
            f"{name}: kind {kind} is not understood by the policy pack: the objects its chart installs "
            "never reach the pack; install the chart with kubernetes.helm.v4.Chart, whose objects it "
            "checks one by one"
        ]
    fix = "run it as a kind the pack reads, or teach policy/workloads.py to read it"
    if understood_kind(obj):
        return [
            f"{name}: {path or 'the object'} is not understood by the policy pack: the {what} there would "
            f"run unchecked; {fix}"
            for path, what in unread(obj)
        ]
    return [
        f"{name}: kind {kind} is not understood by the policy pack: the {what} at {path or 'its top level'} "
        f"would run unchecked; {fix}"
        for path, what in unread(obj)
    ]


# --- GPUs --------------------------------------------------------------------------------------


def gpu_limits_match_processes(obj: Obj) -> list[str]:
    """GPU pods set nvidia.com/gpu limits (= requests), one GPU per training process of the pod."""
    violations = []
    templates = pod_templates(obj)
    if is_trainjob(obj):  # resourcesPerNode goes to every node's trainer container
        trainer = (obj.get("spec") or {}).get("trainer") or {}
        node = {"containers": [{"name": NODE, "resources": trainer.get("resourcesPerNode") or {}}]}
        nodes = as_int(trainer.get("numNodes"))
        templates = [
            PodTemplate(name_of(obj), "", {}, node, nodes or 1, as_int(trainer.get("numProcPerNode")))
        ]
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
            total += as_int(limit) or 0
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
    """No `:latest` and no untagged images: a version tag or an @sha256 digest (a TrainJob's
    spec.trainer.image too)."""
    violations = []
    for view in container_views(obj):
        if view.kind == "trainjob" and "image" not in view.container:
            continue
        image = view.container.get("image")
        problem = image_problem(str(image or ""))
        if problem:
            violations.append(
                f"{view.where}: {view.label} image {image} {problem}; pin a version tag or an @sha256 digest"
            )
    return violations


def images_by_digest(obj: Obj) -> list[str]:
    """The workload's own containers name their image by @sha256 digest (advisory).

    A version tag can be re-pushed: the same config would then run other code, and nodes that pulled
    the tag earlier keep the old one. Init containers are left out: those that the platform adds (the
    training operator's, KServe's storage-initializer) come from its own configuration.
    """
    violations = []
    for view in container_views(obj):
        if view.kind not in ("main", "trainjob") or (
            view.kind == "trainjob" and "image" not in view.container
        ):
            continue
        image = str(view.container.get("image", ""))
        if not _DIGEST.search(image):
            violations.append(
                f"{view.where}: {view.label} image {image} has no @sha256 digest, and a tag can be "
                "re-pushed; set the digest a release names (docs/RELEASE.md)"
            )
    return violations


def normalized_image(image: str) -> str:
    """An image reference with its registry spelled out, as a container runtime resolves it: `alpine:3`
    is `docker.io/library/alpine:3`, `acme/app` is `docker.io/acme/app`."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return image
    return f"docker.io/{image}" if rest else f"docker.io/library/{image}"


def registry_allowed(image: str, allowed: Sequence[str]) -> bool:
    """Whether the image comes from an allowed place: an entry ending in `/` allows everything under it
    (`ghcr.io/acme/`), any other entry one repository (`docker.io/library/alpine`)."""
    name = normalized_image(image)
    repository = re.split(r"[@]", name, maxsplit=1)[0]
    head, _, last = repository.rpartition("/")
    repository = f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]
    return any(name.startswith(e) if e.endswith("/") else repository == e for e in allowed)


def images_from_allowed_registries(obj: Obj, allowed: Sequence[str]) -> list[str]:
    """Every container's image (init, main and ephemeral, and a TrainJob's spec.trainer.image) comes from
    `allowed` (the pack's allowedRegistries)."""
    violations = []
    for view in container_views(obj):
        image = view.container.get("image")
        if image is None or registry_allowed(str(image), allowed):
            continue
        registry = normalized_image(str(image)).split("/", 1)[0]
        violations.append(
            f"{view.where}: {view.label} image {image} is from {registry}, outside allowedRegistries "
            f"({', '.join(allowed) or 'none'}); mirror it there or add its registry"
        )
    return violations


# --- service-account tokens --------------------------------------------------------------------


def no_automounted_token(obj: Obj, token_namespaces: Sequence[str] = ()) -> list[str]:
    """Every pod template sets automountServiceAccountToken: false, except in `token_namespaces`: a pod
    that never calls the API server holds no credential for it (a ServiceAccount's own false is not
    visible to the pack, so the pod must say it)."""
    return [
        f"{t.where}: the pod mounts a service-account token (automountServiceAccountToken is "
        f"{str(t.spec.get('automountServiceAccountToken', 'unset')).lower()}); set it false, or list "
        f"namespace {t.namespace or '(none)'} in tokenNamespaces if its pods call the API server"
        for t in pod_templates(obj)
        if t.namespace not in token_namespaces and t.spec.get("automountServiceAccountToken") is not False
    ]


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
                    f"{name_of(obj)} is mounted by {use.pods} pods ({use.writers} writing) but its "
                    f"accessModes are {modes}; a shared claim must be {need}",
                )
            )
    return violations


# --- Pod Security Standards, "restricted" profile ----------------------------------------------
# The checks are the API server's own (k8s.io/pod-security-admission v0.33, "restricted:latest"), shared
# with the offline admission model so the pack and `render --validate` cannot disagree.

RESTRICTED_CHECKS = podsecurity.checks("restricted")


def pod_security_restricted(obj: Obj, privileged: Sequence[str] = (), stack: str = "") -> list[str]:
    """Every pod template meets Pod Security 'restricted' (every check, in the API server's wording),
    except the pods of a `stack/namespace` entry of `privileged` for this stack (a prerequisites stack's
    in-kernel NFS server): a namespace of that name in any other stack is checked as anywhere."""
    return [
        f"{t.where}: {v.reason} ({v.detail}) (restricted: {v.check})"
        for t in pod_templates(obj)
        if f"{stack}/{t.namespace}" not in privileged
        for v in podsecurity.violations({"metadata": t.metadata, "spec": t.spec}, "restricted")
    ]


# --- secrets ----------------------------------------------------------------------------------


def no_secret_literals_in_env(obj: Obj) -> list[str]:
    """Secret material comes from a Secret (valueFrom/envFrom), never as a literal env value or a
    literal in command or args (`secretlike.py` says what looks secret).

    Messages name the variable or the entry, never its value.
    """
    violations = []
    for view in container_views(obj):
        for env in view.container.get("env") or []:
            name = str(env.get("name", ""))
            if secret_env(name, env.get("value")):
                violations.append(
                    f"{view.where}: {view.label} env {name} has a literal value that looks secret; "
                    "use valueFrom.secretKeyRef"
                )
        for field in ("command", "args"):
            for i in secret_arguments(view.container.get(field) or []):
                violations.append(
                    f"{view.where}: {view.label} {field}[{i}] has a literal value that looks secret; put it "
                    f"in a Secret, pass it as an env var (valueFrom.secretKeyRef) and write $(VAR) in {field}"
                )
    return violations


# --- resources ---------------------------------------------------------------------------------


def requests_and_limits_set(obj: Obj, require_cpu_limit: bool = False) -> list[str]:
    """Every container requests CPU and memory and has a memory limit (a CPU limit when required).

    CPU limits are optional by default: CFS throttling slows data loading and collective progress
    threads, while the memory limit is what protects the node. A TrainJob's resourcesPerNode is merged
    key by key over its runtime's `node` container, which this rule checks where the runtime is.
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


def job_within_budget(obj: Obj, max_nodes: int, max_gpus: int, objects: Sequence[Obj] = ()) -> list[str]:
    """A training job uses at most `max_nodes` pods and `max_gpus` GPUs (from the policy's config).

    A (Cluster)TrainingRuntime's defaults count as a job: a TrainJob that keeps them gets them. A
    TrainJob's size takes what it leaves out (numNodes, the GPU limit per node) from its runtime among
    `objects`; when that runtime is not there, the TrainJob must set both itself, or it is refused.
    """
    name = name_of(obj)
    missing = trainjob_left_to_runtime(obj) if is_trainjob(obj) else []
    if missing and runtime_of(obj, objects) is None:
        kind, runtime = runtime_ref(obj)
        return [
            f"{name} leaves {' and '.join(missing)} to {kind} {runtime}, which is not among this stack's "
            "objects, so its size cannot be counted; set them on the TrainJob (a GPU limit of 0 for none)"
        ]
    size = job_size(obj, objects)
    if size is None:
        return []
    nodes, gpus = size
    if is_kind(obj, RUNTIME_KINDS, TRAINER_API):
        name = f"{name} (what a TrainJob that keeps its defaults gets)"
    violations = []
    if nodes > max_nodes:
        violations.append(f"{name} runs {nodes} nodes; this platform allows at most {max_nodes} per job")
    if gpus > max_gpus:
        violations.append(f"{name} uses {gpus} GPUs; this platform allows at most {max_gpus} per job")
    return violations
