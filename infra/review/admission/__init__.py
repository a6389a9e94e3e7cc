"""Admission: would the API server create each effective pod in the stack's namespace?

Applied in the API server's order for a Pod create (`pkg/kubeapiserver/options/plugins.go`):
defaulting (requests from limits), LimitRanger's mutation, then the validating plugins LimitRanger
(min/max), PodSecurity (`podsecurity`) and ResourceQuota, the first refusal ending that pod's create.
Pods are created in the order the controllers create them, each charged to the quota once admitted,
so a job whose pods can never all fit is refused at the first pod over the quota. Each refusal is one
line in the API server's wording, prefixed `pods "NAME" is forbidden: `.

Not modelled: admission webhooks other than the training operator's own validation (e.g. Kueue,
Gatekeeper, Kyverno, service meshes), ValidatingAdmissionPolicies, pods already running in the
namespace, node allocatable and scheduling (a pod the API server accepts may still stay Pending).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from infra.review.admission import podsecurity, resources
from infra.review.effective import EffectivePod

Obj = dict[str, Any]
ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"


@dataclass(frozen=True)
class Namespace:
    """What the API server enforces in a namespace: its Pod Security level, LimitRanges, quotas."""

    name: str
    level: str
    limit_ranges: tuple[Obj, ...] = ()
    quotas: tuple[Obj, ...] = ()


def namespace_of(objects: Sequence[Obj], name: str, declared_level: str) -> Namespace:
    """The namespace `name` as the stack leaves it: the level of the Namespace object the stack
    creates (else `declared_level`, what the existing namespace is declared to enforce), and the
    stack's own LimitRanges and ResourceQuotas in it."""
    level = declared_level
    for obj in objects:
        if obj.get("kind") == "Namespace" and obj["metadata"]["name"] == name:
            level = (obj["metadata"].get("labels") or {}).get(ENFORCE_LABEL, "privileged")
    here = [o for o in objects if (o.get("metadata") or {}).get("namespace") == name]
    return Namespace(
        name=name,
        level=level,
        limit_ranges=tuple(o for o in here if o.get("kind") == "LimitRange"),
        quotas=tuple(o for o in here if o.get("kind") == "ResourceQuota"),
    )


@dataclass
class Admission:
    """The pods as admitted (defaults applied) and one line per refusal."""

    pods: list[EffectivePod] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)

    @property
    def admitted(self) -> bool:
        return not self.refusals


def _refuse(pod: EffectivePod, message: str) -> str:
    return f'pods "{pod.name}" is forbidden: {message}'


def admit(pods: Sequence[EffectivePod], namespace: Namespace) -> Admission:
    """Every pod through the namespace's admission, in order; refused pods are not charged."""
    items = resources.container_items(namespace.limit_ranges)
    used: dict[str, tuple[Decimal, bool]] = {}
    result = Admission()
    for pod in pods:
        manifest = copy.deepcopy(pod.manifest)
        resources.default_requests_from_limits(manifest)
        resources.apply_limit_range_defaults(manifest, items)
        admitted = EffectivePod(pod.owner, pod.role, pod.index, pod.node_rank, manifest)
        result.pods.append(admitted)
        limit_errors = resources.limit_range_errors(manifest, items)
        if limit_errors:
            result.refusals += [_refuse(admitted, e) for e in limit_errors]
            continue
        security = podsecurity.violations(manifest, namespace.level)
        if security:
            result.refusals += [v.message(admitted.name, namespace.level) for v in security]
            continue
        quota = next(
            (e for q in namespace.quotas if (e := resources.quota_error(manifest, q, used)) is not None), None
        )
        if quota:
            result.refusals.append(_refuse(admitted, quota))
            continue
        resources.charge(used, manifest)
    return result
