"""A ValidatingAdmissionPolicy that denies, with its binding: the shape the platform's guards share (the
Pod Security label guard, `infra/program/platform/tenancy.py`; the Service guard,
`infra/program/platform/service_guard.py`; the platform objects' guard,
`infra/program/platform/team_boundary.py`).

The control plane's own identities are never judged: its components (users `system:...` other than
service accounts) and kube-system's service accounts.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.program.common.meta import labels
from infra.program.settings import Settings

NOT_THE_CONTROL_PLANE = (
    "!(request.userInfo.username.startsWith('system:') && "
    "!request.userInfo.username.startsWith('system:serviceaccount:')) && "
    "!request.userInfo.username.startsWith('system:serviceaccount:kube-system:')"
)


def deny_policy(
    resource: str,
    guard: str,
    settings: Settings,
    kind: str,
    validations: list[dict[str, str]],
    opts: pulumi.ResourceOptions,
    variables: list[dict[str, str]] | None = None,
    namespaces: list[str] | None = None,
    rules: list[dict[str, Any]] | None = None,
) -> None:
    """The policy `guard` on CREATE and UPDATE of core/v1 `kind` (a plural resource), or on `rules` (the
    policy's resourceRules) when given, in `namespaces` when given, and its Deny binding
    (`<resource>-binding`)."""
    core = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": [kind]}
    constraints: dict[str, Any] = {"resourceRules": rules or [core]}
    if namespaces is not None:
        selected = {"key": "kubernetes.io/metadata.name", "operator": "In", "values": sorted(namespaces)}
        constraints["namespaceSelector"] = {"matchExpressions": [selected]}
    meta = k8s.meta.v1.ObjectMetaArgs(name=guard, labels=labels(settings, "tenancy"))
    policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
        resource,
        metadata=meta,
        spec={
            "failurePolicy": "Fail",
            "matchConstraints": constraints,
            "matchConditions": [{"name": "not-the-control-plane", "expression": NOT_THE_CONTROL_PLANE}],
            **({"variables": variables} if variables else {}),
            "validations": validations,
        },
        opts=opts,
    )
    k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
        f"{resource}-binding",
        metadata=meta,
        spec={"policyName": policy.metadata.name, "validationActions": ["Deny"]},
        opts=opts,
    )
