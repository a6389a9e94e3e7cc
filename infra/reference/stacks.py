"""docs/reference/stacks.md: what each shipped stack creates, from its rendering (`infra.review.render`).

Per stack in stacks/: its role; the workloads with their pods, image and per-pod requests; the claims with
their size and class; the upstream manifests it installs; and a count of every other object by kind.
Read from the same rendering `make render` writes, so the page changes when a stack file or the program
does (tests/docs/test_reference.py keeps it current).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from infra.program.settings import PROJECT_ROOT
from infra.reference.markdown import code, table
from infra.reference.page import header
from infra.reference.reads import shipped
from infra.review.manifest import Rendering

INTRO = """\
# What each stack creates

Each shipped stack (`stacks/Pulumi.<stack>.yaml`) as `pulumi up` would create it, read from its
rendering (`make render STACK=<stack>`, which writes every object to `build/rendered/`). Requests are
per pod; a GPU is `nvidia.com/gpu`. Upstream manifests are applied as their vendored files hold them
(`infra/manifests/`), so their objects are not counted here. Images are named as the stack names them;
their sizes are not listed: the default trainer image's base is not measured here (see the tutorial's
prerequisites).
"""

WORKLOADS = ("Deployment", "DaemonSet", "Job", "PyTorchJob", "TrainJob", "InferenceService")


def _pods(obj: Mapping[str, Any]) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    """(which pods, how many, pod spec) of a workload, as its controller runs it."""
    spec = obj.get("spec") or {}
    kind = obj["kind"]
    if kind == "PyTorchJob":
        for role, replica in (spec.get("pytorchReplicaSpecs") or {}).items():
            yield role, str(replica.get("replicas", 1)), replica["template"]["spec"]
    elif kind == "Job":
        yield "", str(spec.get("parallelism", 1)), spec["template"]["spec"]
    elif kind == "Deployment":
        yield "", str(spec.get("replicas", 1)), spec["template"]["spec"]
    elif kind == "DaemonSet":
        yield "", "one per node", spec["template"]["spec"]
    elif kind == "InferenceService":
        predictor = spec.get("predictor") or {}
        yield "predictor", str(predictor.get("minReplicas", 1)), predictor
    elif kind == "TrainJob":
        trainer = spec.get("trainer") or {}
        container = {"image": trainer.get("image"), "resources": trainer.get("resourcesPerNode") or {}}
        yield "node", str(trainer.get("numNodes", 1)), {"containers": [container]}


def _requests(pod: Mapping[str, Any]) -> str:
    """The main containers' requests summed, as `cpu 1, memory 1Gi, gpu 1` (one container: its own)."""
    containers = pod.get("containers") or []
    if len(containers) != 1:
        return "; ".join(_requests({"containers": [c]}) for c in containers)
    requests = (containers[0].get("resources") or {}).get("requests") or {}
    names = {"cpu": "cpu", "memory": "memory", "nvidia.com/gpu": "gpu"}
    return ", ".join(f"{names[k]} {requests[k]}" for k in names if k in requests) or "none"


def _images(pod: Mapping[str, Any]) -> str:
    """The containers' images; a TrainJob that names none runs its TrainingRuntime's."""
    images = [code(c["image"]) for c in pod.get("containers") or [] if c.get("image")]
    return ", ".join(images) or "its TrainingRuntime's"


def _section(name: str, rendering: Rendering) -> str:
    objects = rendering.objects
    role = rendering.settings.stack_role
    lines = [f"## `{name}`\n", f"Role: `{role}`.\n"]
    rows = []
    for obj in objects:
        if obj["kind"] not in WORKLOADS:
            continue
        where = f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"
        for which, count, pod in _pods(obj):
            label = f"{obj['kind']} {code(where)}" + (f" ({which})" if which else "")
            rows.append((label, count, _images(pod), _requests(pod)))
    if rows:
        lines.append(table(("Workload", "Pods", "Images", "Requests per pod"), rows))
    claims = [
        (
            code(f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}"),
            o["spec"]["resources"]["requests"]["storage"],
            code(o["spec"].get("storageClassName", "the default")),
            ", ".join(o["spec"].get("accessModes") or []),
        )
        for o in objects
        if o["kind"] == "PersistentVolumeClaim"
    ]
    if claims:
        lines.append(table(("Claim", "Size", "Class", "Access"), claims))
    installs = sorted(
        {f"{i.vendored.title} {i.vendored.version}" for i in rendering.upstream}
        | {
            f"the Helm chart {code(str(r.inputs.get('chart', r.name)).removeprefix(f'{PROJECT_ROOT}/'))}"
            for r in rendering.external
            if "helm" in r.type
        }
    )
    if installs:
        lines.append("Upstream manifests applied: " + ", ".join(installs) + ".\n")
    others = Counter(o["kind"] for o in objects if o["kind"] not in (*WORKLOADS, "PersistentVolumeClaim"))
    if others:
        counted = ", ".join(f"{kind} × {n}" if n > 1 else kind for kind, n in sorted(others.items()))
        lines.append(f"Other objects: {counted}.\n")
    return "\n".join(lines)


def page() -> str:
    sections = [_section(run.stack, rendering) for run, rendering in shipped()]
    return (
        header("stacks/ and infra/program/ (each stack's rendering)")
        + "\n"
        + INTRO
        + "\n"
        + "\n".join(sections)
    )
