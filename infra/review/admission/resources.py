"""LimitRange defaulting and limits, and ResourceQuota fit, as the API server applies them to pods.

Upstream (kubernetes/kubernetes, 1.33): `pkg/apis/core/v1/defaults.go` (a Pod's missing requests
default to its limits; `SetDefaults_LimitRangeItem`: default <- max, defaultRequest <- default, then
<- min), `plugin/pkg/admission/limitranger/admission.go` (mutating: fill every container's and init
container's missing requests/limits; validating: min/max per Container), and
`staging/.../admission/plugin/resourcequota/controller.go` with `pkg/quota/v1/evaluator/core/pods.go`
(usage = max(sum of containers, largest init container); extended resources count as `requests.<name>`;
cpu/memory quotas require every container to state them). Messages are upstream's format strings.
Not modelled: `type: Pod` and PVC LimitRange items, maxLimitRequestRatio, sidecar init containers,
pod overhead, quota scopes and the usage of pods already in the namespace (taken as none).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

Obj = dict[str, Any]
CPU_MEMORY_KEYS = {"cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"}
_SUFFIX = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9, "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}  # fmt: skip


def quantity(value: object) -> Decimal:
    """A Kubernetes quantity (`500m`, `2`, `10Gi`, `1e3`) as an exact number."""
    import re

    text = str(value)
    match = re.fullmatch(r"([+-]?(?:\d+\.?\d*|\.\d+))([eE][+-]?\d+|[a-zA-Z]*)", text)
    if not match:
        raise ValueError(f"not a quantity: {text!r}")
    number, suffix = Decimal(match.group(1)), match.group(2)
    if suffix[:1] in ("e", "E"):
        return number * Decimal(10) ** int(suffix[1:])
    return number * _SUFFIX[suffix]


def format_quantity(value: Decimal, binary: bool) -> str:
    """`Quantity.String()` for the values shown here: binary suffixes for byte amounts given in them,
    else a decimal number with `m` when it has a fraction of a unit."""
    if binary and value and value == value.to_integral_value():
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            scaled = value / _SUFFIX[suffix]
            if scaled == scaled.to_integral_value():
                return f"{int(scaled)}{suffix}"
    if value == value.to_integral_value():
        return str(int(value))
    return f"{int((value * 1000).to_integral_value())}m"


def _is_binary(texts: Iterable[object]) -> bool:
    return any(str(t).endswith("i") for t in texts)


def _containers(spec: Obj) -> list[Obj]:
    return [*spec.get("initContainers", []), *spec.get("containers", [])]


def default_requests_from_limits(pod: Obj) -> None:
    """Pod defaulting at decode time: a limit without a request sets the request (in place)."""
    for container in _containers(pod["spec"]):
        resources = container.get("resources") or {}
        limits = resources.get("limits") or {}
        if limits:
            requests = resources.setdefault("requests", {})
            for name, value in limits.items():
                requests.setdefault(name, value)
            container["resources"] = resources


def defaulted_item(item: Mapping[str, Any]) -> Obj:
    """A `type: Container` LimitRange item as the API server stores it."""
    stored: Obj = copy.deepcopy(dict(item))
    default = stored.setdefault("default", {})
    default_request = stored.setdefault("defaultRequest", {})
    for name, value in (stored.get("max") or {}).items():
        default.setdefault(name, value)
    for name, value in default.items():
        default_request.setdefault(name, value)
    for name, value in (stored.get("min") or {}).items():
        default_request.setdefault(name, value)
    return stored


def container_items(limit_ranges: Iterable[Obj]) -> list[Obj]:
    return [
        defaulted_item(item)
        for lr in limit_ranges
        for item in (lr.get("spec") or {}).get("limits", [])
        if item.get("type") == "Container"
    ]


def apply_limit_range_defaults(pod: Obj, items: list[Obj]) -> None:
    """LimitRanger's mutation (in place): fill each container's missing requests and limits."""
    for item in items:
        for container in _containers(pod["spec"]):
            resources = container.setdefault("resources", {})
            for field, source in (("requests", "defaultRequest"), ("limits", "default")):
                for name, value in (item.get(source) or {}).items():
                    if name not in (resources.get(field) or {}):
                        resources.setdefault(field, {})[name] = value


def _shown(text: object) -> str:
    """A quantity as the API server prints it (`Quantity.String()`, canonical: 1.5 -> 1500m)."""
    return format_quantity(quantity(text), _is_binary([text]))


def limit_range_errors(pod: Obj, items: list[Obj]) -> list[str]:
    """LimitRanger's validation: min/max per Container, in upstream's wording."""
    errors: list[str] = []
    for item in items:
        for container in _containers(pod["spec"]):
            resources = container.get("resources") or {}
            requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
            for name, enforced in sorted((item.get("min") or {}).items()):
                least = _shown(enforced)
                if name not in requests:
                    errors.append(f"minimum {name} usage per Container is {least}.  No request is specified")
                elif quantity(requests[name]) < quantity(enforced):
                    errors.append(
                        f"minimum {name} usage per Container is {least}, but request is {_shown(requests[name])}"
                    )
                elif name in limits and quantity(limits[name]) < quantity(enforced):
                    errors.append(
                        f"minimum {name} usage per Container is {least}, but limit is {_shown(limits[name])}"
                    )
            for name, enforced in sorted((item.get("max") or {}).items()):
                most = _shown(enforced)
                if name not in limits:
                    errors.append(f"maximum {name} usage per Container is {most}.  No limit is specified")
                elif quantity(limits[name]) > quantity(enforced):
                    errors.append(
                        f"maximum {name} usage per Container is {most}, but limit is {_shown(limits[name])}"
                    )
                elif name in requests and quantity(requests[name]) > quantity(enforced):
                    errors.append(
                        f"maximum {name} usage per Container is {most}, but request is {_shown(requests[name])}"
                    )
    unique = list(dict.fromkeys(errors))
    if len(unique) > 1:
        return [f"[{', '.join(unique)}]"]
    return unique


def _max_by_key(values: Iterable[Mapping[str, Any]]) -> dict[str, tuple[Decimal, bool]]:
    total: dict[str, tuple[Decimal, bool]] = {}
    for value in values:
        for name, text in value.items():
            amount = quantity(text)
            if name not in total or amount > total[name][0]:
                total[name] = (amount, _is_binary([text]))
    return total


def _sum_by_key(values: Iterable[Mapping[str, Any]]) -> dict[str, tuple[Decimal, bool]]:
    total: dict[str, tuple[Decimal, bool]] = {}
    for value in values:
        for name, text in value.items():
            amount, binary = total.get(name, (Decimal(0), False))
            total[name] = (amount + quantity(text), binary or _is_binary([text]))
    return total


def pod_usage(pod: Obj) -> dict[str, tuple[Decimal, bool]]:
    """What a pod charges against a ResourceQuota: quota key -> (amount, shown in binary units)."""
    usage: dict[str, tuple[Decimal, bool]] = {"pods": (Decimal(1), False), "count/pods": (Decimal(1), False)}
    spec = pod["spec"]
    for field in ("requests", "limits"):
        regular = _sum_by_key((c.get("resources") or {}).get(field) or {} for c in spec.get("containers", []))
        init = _max_by_key(
            (c.get("resources") or {}).get(field) or {} for c in spec.get("initContainers", [])
        )
        for name in {*regular, *init}:
            amount = max(regular.get(name, (Decimal(0), False)), init.get(name, (Decimal(0), False)))
            native = name in ("cpu", "memory", "ephemeral-storage")
            if native:
                usage[f"{field}.{name}"] = amount
                if field == "requests":
                    usage[name] = amount
            elif field == "requests" and "/" in name:
                usage[f"requests.{name}"] = amount
    return usage


def missing_quota_requests(pod: Obj, hard: Mapping[str, Any]) -> str | None:
    """The quota plugin's "must specify" rule for cpu/memory keys, or None when met."""
    required = sorted(set(hard) & CPU_MEMORY_KEYS)
    missing: dict[str, list[str]] = {}
    for container in _containers(pod["spec"]):
        resources = container.get("resources") or {}
        present = {
            *(resources.get("requests") or {}),
            *(f"requests.{n}" for n in resources.get("requests") or {}),
            *(f"limits.{n}" for n in resources.get("limits") or {}),
        }
        for key in required:
            if key not in present:
                missing.setdefault(key, []).append(container.get("name", ""))
    if not missing:
        return None
    return "must specify " + "; ".join(
        f"{key} for: {','.join(sorted(names))}" for key, names in sorted(missing.items())
    )


def _pretty(values: Mapping[str, tuple[Decimal, bool]]) -> str:
    return ",".join(f"{k}={format_quantity(*values[k])}" for k in sorted(values))


def quota_error(pod: Obj, quota: Obj, used: dict[str, tuple[Decimal, bool]]) -> str | None:
    """The ResourceQuota plugin's refusal of `pod` given what the job's earlier pods use (None: fits)."""
    name = quota["metadata"]["name"]
    hard = (quota.get("spec") or {}).get("hard") or {}
    missing = missing_quota_requests(pod, hard)
    if missing:
        return f"failed quota: {name}: {missing}"
    requested = {k: v for k, v in pod_usage(pod).items() if k in hard and v[0] != 0}
    exceeded = [
        k for k in requested if used.get(k, (Decimal(0), False))[0] + requested[k][0] > quantity(hard[k])
    ]
    if not exceeded:
        return None
    hard_values = {k: (quantity(hard[k]), _is_binary([hard[k]])) for k in exceeded}
    return (
        f"exceeded quota: {name}, requested: {_pretty({k: requested[k] for k in exceeded})}, "
        f"used: {_pretty({k: used.get(k, (Decimal(0), requested[k][1])) for k in exceeded})}, "
        f"limited: {_pretty(hard_values)}"
    )


def charge(used: dict[str, tuple[Decimal, bool]], pod: Obj) -> None:
    """Add an admitted pod's usage to the namespace's running total (in place)."""
    for key, (amount, binary) in pod_usage(pod).items():
        total, was_binary = used.get(key, (Decimal(0), False))
        used[key] = (total + amount, was_binary or binary)
