"""Judgements on live objects, as plain functions of the objects read from the cluster.

Each takes what `kubectl get -o json` returns (or Pulumi's output) and says what is wrong, one line per
difference, so a cluster run fails only where the cluster disagrees with the offline model. They are
tested on recorded objects in tests/e2e_static.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

Obj = dict[str, Any]

# What the API server fills in on a container that the offline model leaves out (defaults, not choices).
_CONTAINER_DEFAULTS = {
    "terminationMessagePath": "/dev/termination-log",
    "terminationMessagePolicy": "File",
}
# The fields of an init container that the operator's template and our transform decide.
_INIT_FIELDS = ("image", "imagePullPolicy", "command", "args", "resources", "securityContext")


def _env_entry(entry: Mapping[str, Any]) -> Any:
    """An env entry's value as comparable data: the API server adds `apiVersion: v1` to a fieldRef."""
    if "valueFrom" not in entry:
        return entry.get("value", "")
    source = json.loads(json.dumps(entry["valueFrom"]))
    field = source.get("fieldRef")
    if isinstance(field, dict) and field.get("apiVersion") in (None, "v1"):
        field["apiVersion"] = "v1"
    return {"valueFrom": source}


def env_of(container: Mapping[str, Any]) -> dict[str, Any]:
    return {e["name"]: _env_entry(e) for e in container.get("env", [])}


def _container(pod: Mapping[str, Any], name: str) -> Obj | None:
    for container in pod.get("spec", {}).get("containers", []):
        if container.get("name") == name:
            return dict(container)
    return None


def _without_defaults(container: Mapping[str, Any]) -> Obj:
    return {k: v for k, v in container.items() if _CONTAINER_DEFAULTS.get(k) != v}


def pod_differences(live: Mapping[str, Any], modelled: Mapping[str, Any], container: str) -> list[str]:
    """Where a live pod differs from the modelled one: its init containers (names, order, and what the
    operator's template decides) and the env of the main container `container`."""
    name = live.get("metadata", {}).get("name", "?")
    problems: list[str] = []
    live_inits = [_without_defaults(c) for c in live.get("spec", {}).get("initContainers", [])]
    model_inits = [_without_defaults(c) for c in modelled.get("spec", {}).get("initContainers", [])]
    live_names = [c.get("name") for c in live_inits]
    model_names = [c.get("name") for c in model_inits]
    if live_names != model_names:
        problems.append(f"pod {name}: init containers {live_names}, modelled {model_names}")
    for live_init, model_init in zip(live_inits, model_inits, strict=False):
        if live_init.get("name") != model_init.get("name"):
            continue
        for key in _INIT_FIELDS:
            if live_init.get(key) != model_init.get(key):
                problems.append(
                    f"pod {name}: init container {live_init['name']} {key} is "
                    f"{json.dumps(live_init.get(key), sort_keys=True)}, modelled "
                    f"{json.dumps(model_init.get(key), sort_keys=True)}"
                )
    live_main, model_main = _container(live, container), _container(modelled, container)
    if live_main is None or model_main is None:
        problems.append(f"pod {name}: container {container} missing (live {live_main is not None}, modelled)")
        return problems
    live_env, model_env = env_of(live_main), env_of(model_main)
    for key in sorted(set(live_env) | set(model_env)):
        if key not in live_env:
            problems.append(f"pod {name}: env {key} modelled but not in the live pod")
        elif key not in model_env:
            problems.append(f"pod {name}: env {key} in the live pod but not modelled")
        elif live_env[key] != model_env[key]:
            problems.append(
                f"pod {name}: env {key} is {json.dumps(live_env[key], sort_keys=True)}, "
                f"modelled {json.dumps(model_env[key], sort_keys=True)}"
            )
    return problems


# The reason a controller's event gives when the API server refused a pod it created: the Job controller
# (kubernetes pkg/controller/controller_utils.go) says FailedCreate, the training operator v1.9.4
# (kubeflow/trainer pkg/controller.v1/control/pod_control.go) FailedCreatePod.
FAILED_CREATE_REASONS = ("FailedCreate", "FailedCreatePod")


def refused_pod_creations(events: Iterable[Mapping[str, Any]]) -> list[str]:
    """Events of a controller whose pod creation the API server refused (Pod Security among others)."""
    return [
        f"{e.get('involvedObject', {}).get('kind')}/{e.get('involvedObject', {}).get('name')}: "
        f"{' '.join(str(e.get('message', '')).split())}"
        for e in events
        if e.get("reason") in FAILED_CREATE_REASONS
    ]


def final_accuracy(metrics_json: str) -> float:
    """The run's final test accuracy as `metrics.json` records it (a fraction)."""
    value = json.loads(metrics_json).get("final_test_accuracy")
    if not isinstance(value, int | float):
        raise ValueError(f"metrics.json has no final_test_accuracy (got {value!r})")
    return float(value)


def sha256sums_problems(files: Mapping[str, bytes], sums: str) -> list[str]:
    """What does not verify in an export: every file SHA256SUMS lists must be there with that digest,
    and it must list `model.pt`."""
    listed: dict[str, str] = {}
    for line in sums.splitlines():
        match = re.fullmatch(r"([0-9a-f]{64}) [ *](.+)", line.strip())
        if match:
            listed[match[2]] = match[1]
    problems = [] if "model.pt" in listed else ["SHA256SUMS does not list model.pt"]
    for name, digest in sorted(listed.items()):
        if name not in files:
            problems.append(f"{name}: listed in SHA256SUMS but not exported")
        elif hashlib.sha256(files[name]).hexdigest() != digest:
            problems.append(f"{name}: sha256 differs from SHA256SUMS")
    return problems


def messages(text: str, pattern: str) -> list[str]:
    """The distinct messages in `pulumi up`'s output that start with `pattern` (a regular expression),
    each to the end of its line: the engine prints an error both under its resource and among the
    diagnostics, with different prefixes."""
    found = (m.group(0).strip() for line in text.splitlines() if (m := re.search(f"(?:{pattern}).*", line)))
    return list(dict.fromkeys(found))


def restarts_recorded(metrics_json: str) -> int:
    """How many times the run was started again after its first start (`restarts` in metrics.json)."""
    restarts = json.loads(metrics_json).get("restarts") or []
    return len(restarts) if isinstance(restarts, list) else int(restarts)


def job_condition(obj: Mapping[str, Any]) -> str | None:
    """The terminal condition of a PyTorchJob (Succeeded/Failed) or Job (Complete/Failed) that is True."""
    for condition in obj.get("status", {}).get("conditions", []) or []:
        if condition.get("status") == "True" and condition.get("type") in ("Succeeded", "Complete", "Failed"):
            return str(condition["type"])
    return None


def v2_predictions(response: Mapping[str, Any]) -> list[int]:
    """The class indices of an Open Inference Protocol (V2) response: its first output's data, either
    class indices or per-class scores (argmax)."""
    outputs = response.get("outputs") or []
    if not outputs:
        raise ValueError("V2 response has no outputs")
    output = outputs[0]
    data = list(output.get("data", []))
    shape = list(output.get("shape", [len(data)]))
    if len(shape) == 2 and shape[1] > 1:
        width = int(shape[1])
        rows = [data[i : i + width] for i in range(0, len(data), width)]
        return [max(range(width), key=row.__getitem__) for row in rows]
    return [int(x) for x in data]


def planned_steps(event: Any) -> list[tuple[str, str]]:
    """(operation, resource type) of a preview's engine event that announces a step, else nothing."""
    pre = getattr(event, "resource_pre_event", None)
    if pre is None:
        return []
    return [(str(getattr(pre.metadata.op, "value", pre.metadata.op)), pre.metadata.type)]
