"""The Service guard: in the platform's team namespaces a Service stays inside the cluster.

A job stack needs ClusterIP Services alone (the Indexed Job's headless one, the model server's); the
deployer Role may write Services, and RBAC cannot tell a ClusterIP from a LoadBalancer or a NodePort,
either of which would put the namespace's pods on the node's or the cloud's addresses. This
ValidatingAdmissionPolicy refuses a Service of any other type in a team namespace unless the authorizer
allows `create` on `externalservices.ddp-mnist.io` in that namespace (no such resource exists: the check
is a permission only; cluster-admin's `*` holds it, as would a Role the platform grants). Like the label
guard (`infra/program/platform/tenancy.py`), it leaves the control plane's own identities alone
(`infra/program/common/guards.py`).
"""

from __future__ import annotations

import pulumi

from infra.program.common.guards import deny_policy
from infra.program.settings import PROJECT, Settings

SERVICE_GUARD = f"{PROJECT}-team-services"
SERVICE_PERMISSION = ("ddp-mnist.io", "externalservices", "create")


def service_guard_validation() -> dict[str, str]:
    """ClusterIP (the default when no type is given), or the platform's permission."""
    group, resource, verb = SERVICE_PERMISSION
    return {
        "expression": (
            "!has(object.spec.type) || object.spec.type == 'ClusterIP' || "
            f"authorizer.group('{group}').resource('{resource}').namespace(object.metadata.namespace)"
            f".check('{verb}').allowed()"
        ),
        "messageExpression": (
            "'Service ' + object.metadata.namespace + '/' + object.metadata.name + ': type ' + "
            "object.spec.type + ' puts the namespace on addresses outside the cluster; ' + "
            f"request.userInfo.username + ' may create ClusterIP Services only: other types take {verb} on "
            f"{resource}.{group}, a platform right ({SERVICE_GUARD})'"
        ),
        "reason": "Forbidden",
    }


class ServiceGuard(pulumi.ComponentResource):
    """The policy and its binding, for the team namespaces."""

    def __init__(
        self,
        name: str,
        settings: Settings,
        namespaces: list[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{PROJECT}:tenancy:ServiceGuard", name, {}, opts)
        child = pulumi.ResourceOptions(parent=self)
        validations = [service_guard_validation()]
        deny_policy(name, SERVICE_GUARD, settings, "services", validations, child, namespaces=namespaces)
        self.register_outputs({})
