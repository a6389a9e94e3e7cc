"""What a platform stack holds in each team namespace on the platform's behalf, and the guard that keeps it
the platform's: a default-deny NetworkPolicy, the namespace's budget, and the PriorityClasses its pods
may not name.

- **`ddp-mnist-platform-default-deny`**: every pod of the namespace isolated both ways unless a policy
  allows it. A job stack writes its own default-deny and allow rules beside it
  (`infra/program/common/isolation.py`); NetworkPolicies add up, so the platform's stays whatever the team's
  say.
- **`ddp-mnist-team-quota`** (`teamQuota`): a ResourceQuota of the given hard limits. The deployer Role
  reads quotas and LimitRanges and writes neither (`infra/program/platform/tenancy.py`).
- **`ddp-mnist-team-priority`**: a ResourceQuota allowing no pod (`pods: 0`) whose PriorityClass is one
  of the system classes or, per `teamPriorityClasses`, one of the stack's classes valued above the
  namespace's. The quota admission plugin counts a pod against a quota whose PriorityClass scope (operator
  `In`) lists its `priorityClassName`, and refuses it when the count would pass the hard limit: the
  standard way to keep a namespace from a class (kubernetes v1.33.13
  `pkg/quota/v1/evaluator/core/pods.go`, `podMatchesScopeFunc`; the Kubernetes docs' "Limit Priority
  Class consumption by default").
- **The platform objects' guard** (`ddp-mnist-platform-objects`): a ValidatingAdmissionPolicy on
  NetworkPolicies, ResourceQuotas and LimitRanges in the team namespaces. An object labelled
  `ddp-mnist.io/owner: platform` (before or after the request) may be created, changed or deleted only by
  an identity the authorizer allows `update` on `platformobjects.ddp-mnist.io` in that namespace (no such
  resource exists: the check is a permission only; cluster-admin's `*` holds it). The deployer Role may
  write NetworkPolicies (a job stack's own), so without the guard it could delete the platform's.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.program.common.guards import deny_policy
from infra.program.common.meta import labels
from infra.program.common.platform_facts import (
    refused_priority_classes,
)
from infra.program.settings import PROJECT, Settings
from infra.program.settings.tenancy import parse_quota

PLATFORM_DEFAULT_DENY = f"{PROJECT}-platform-default-deny"
TEAM_QUOTA = f"{PROJECT}-team-quota"
PRIORITY_QUOTA = f"{PROJECT}-team-priority"
OBJECTS_GUARD = f"{PROJECT}-platform-objects"
OWNER_LABEL = f"{PROJECT}.io/owner"
# The permission the guard asks the authorizer for: a resource of a group nothing serves.
OBJECTS_PERMISSION = ("ddp-mnist.io", "platformobjects", "update")


def owned(settings: Settings, component: str) -> dict[str, str]:
    """The labels of an object the platform holds in a team namespace."""
    return {**labels(settings, component), OWNER_LABEL: "platform"}


def objects_guard_validation() -> dict[str, str]:
    group, resource, verb = OBJECTS_PERMISSION
    return {
        "expression": (
            f"!variables.owned || authorizer.group('{group}').resource('{resource}')"
            f".namespace(request.namespace).check('{verb}').allowed()"
        ),
        "messageExpression": (
            "request.resource.resource + ' ' + request.namespace + '/' + request.name + ': ' + "
            "request.userInfo.username + ' may not create, change or delete an object the platform owns "
            f"(label {OWNER_LABEL}=platform): that takes {verb} on {resource}.{group}, a platform right "
            f"({OBJECTS_GUARD})'"
        ),
        "reason": "Forbidden",
    }


def objects_guard_variables() -> list[dict[str, str]]:
    """`owned`: the object carries the owner label before the request (UPDATE, DELETE) or after it
    (CREATE, UPDATE); `object` is null on DELETE, `oldObject` on CREATE."""

    def labelled(name: str) -> str:
        return (
            f"({name} != null && has({name}.metadata.labels) && '{OWNER_LABEL}' in {name}.metadata.labels "
            f"&& {name}.metadata.labels['{OWNER_LABEL}'] == 'platform')"
        )

    return [{"name": "owned", "expression": f"{labelled('oldObject')} || {labelled('object')}"}]


def objects_guard_rules() -> list[dict[str, Any]]:
    operations = ["CREATE", "UPDATE", "DELETE"]
    return [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": operations,
            "resources": ["resourcequotas", "limitranges"],
        },
        {
            "apiGroups": ["networking.k8s.io"],
            "apiVersions": ["v1"],
            "operations": operations,
            "resources": ["networkpolicies"],
        },
    ]


def team_objects(resource: str, namespace: str, settings: Settings, opts: pulumi.ResourceOptions) -> None:
    """The default-deny and the quotas of one team namespace."""
    k8s.networking.v1.NetworkPolicy(
        f"{resource}-platform-default-deny",
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=PLATFORM_DEFAULT_DENY, namespace=namespace, labels=owned(settings, "tenancy")
        ),
        spec=k8s.networking.v1.NetworkPolicySpecArgs(
            pod_selector=k8s.meta.v1.LabelSelectorArgs(), policy_types=["Ingress", "Egress"]
        ),
        opts=opts,
    )
    if settings.team_quota:
        k8s.core.v1.ResourceQuota(
            f"{resource}-quota",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=TEAM_QUOTA, namespace=namespace, labels=owned(settings, "tenancy")
            ),
            spec=k8s.core.v1.ResourceQuotaSpecArgs(hard=dict(map(parse_quota, settings.team_quota))),
            opts=opts,
        )
    refused = k8s.core.v1.ScopedResourceSelectorRequirementArgs(
        scope_name="PriorityClass", operator="In", values=refused_priority_classes(settings, namespace)
    )
    k8s.core.v1.ResourceQuota(
        f"{resource}-priority",
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=PRIORITY_QUOTA, namespace=namespace, labels=owned(settings, "tenancy")
        ),
        spec=k8s.core.v1.ResourceQuotaSpecArgs(
            hard={"pods": "0"},
            scope_selector=k8s.core.v1.ScopeSelectorArgs(match_expressions=[refused]),
        ),
        opts=opts,
    )


def objects_guard(name: str, settings: Settings, opts: pulumi.ResourceOptions) -> None:
    """The platform objects' guard over the team namespaces."""
    deny_policy(
        f"{name}-platform-objects",
        OBJECTS_GUARD,
        settings,
        "",
        [objects_guard_validation()],
        opts,
        variables=objects_guard_variables(),
        namespaces=list(settings.team_namespace_levels),
        rules=objects_guard_rules(),
    )
