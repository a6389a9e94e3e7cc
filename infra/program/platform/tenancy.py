"""What a platform stack gives the teams that deploy job stacks: namespaces, least-privilege deployer
rights, StorageClasses, and a guard on the namespaces' Pod Security labels.

- **Team namespaces** (`teamNamespaces`): each labelled to enforce (and warn and audit) its Pod Security
  level, kept in the cluster when the platform stack is destroyed (it holds the teams' retained
  checkpoint claims).
- **The Role `ddp-mnist-job-deployer`** in each: what a job stack creates there (`JOB_DEPLOYER_RULES`)
  and what the program's waits read, bound by a RoleBinding to that namespace's `teamDeployers`. A job
  identity holds no right outside its namespaces but `get` on StorageClasses (the wait names a claim's
  class and provisioner): the ClusterRole `ddp-mnist-job-reader`. No namespace, no ResourceQuota or
  LimitRange (the namespace's budget is not the team's to raise), no role or binding.
- **StorageClasses** (`platformStorageClasses`): `storageClassName` and its `-data` class, from this
  stack's storage keys, as a job stack would create them (`infra/program/common/storage.py`).
- **The platform's objects in each** (`infra/program/platform/team_boundary.py`): a default-deny
NetworkPolicy, the
  namespace's ResourceQuota (`teamQuota`) and a quota keeping its pods from the PriorityClasses above
  its own (`teamPriorityClasses`), guarded by a ValidatingAdmissionPolicy the deployer cannot pass.
- **The Service guard** (`infra/program/platform/service_guard.py`): in the team namespaces, Services of type
  ClusterIP only, unless the platform grants more.
- **The label guard** (`podSecurityLabelGuard`): a ValidatingAdmissionPolicy on namespaces. Only an
  identity the authorizer allows `update` on `podsecuritylabels.ddp-mnist.io` (no such resource exists:
  the check is a permission only; cluster-admin's `*` holds it, and the ClusterRole
  `ddp-mnist-pod-security-admin` grants it to `podSecurityAdmins`) may set, change or remove a
  `pod-security.kubernetes.io/` label; and no namespace but those `podSecurityPrivilegedNamespaces`
  names may be made to enforce `privileged`, whoever asks. The CEL `authorizer` variable and
  ValidatingAdmissionPolicy v1 are GA from Kubernetes 1.30 (kubernetes v1.33.13
  `staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating/`).
"""

from __future__ import annotations

import json

import pulumi
import pulumi_kubernetes as k8s

from infra.program.common.guards import deny_policy
from infra.program.common.meta import labels
from infra.program.common.storage import storage_class_args
from infra.program.platform.service_guard import ServiceGuard
from infra.program.platform.team_boundary import objects_guard, team_objects
from infra.program.settings import PROJECT, Settings
from infra.program.settings.tenancy import parse_deployer

DEPLOYER_ROLE = f"{PROJECT}-job-deployer"
READER_ROLE = f"{PROJECT}-job-reader"
POD_SECURITY_ADMIN_ROLE = f"{PROJECT}-pod-security-admin"
LABEL_GUARD = f"{PROJECT}-pod-security-labels"
# The permission the label guard asks the authorizer for: a resource of a group nothing serves.
LABEL_PERMISSION = ("ddp-mnist.io", "podsecuritylabels", "update")
POD_SECURITY_PREFIX = "pod-security.kubernetes.io/"

WRITE = ["get", "list", "watch", "create", "update", "patch", "delete"]
READ = ["get", "list", "watch"]
# (API group, resources, verbs): every namespaced kind a job stack creates, and what the program's waits
# and the provider's await logic read (pods and events for the seed's and the job's wait; Endpoints
# for a Service's, ReplicaSets for a Deployment's rollout: pulumi-kubernetes v4.25 `pkg/await/service.go`,
# `deployment.go`, each through an informer of the object's namespace; the namespace's budget).
JOB_DEPLOYER_RULES: tuple[tuple[str, tuple[str, ...], list[str]], ...] = (
    ("", ("persistentvolumeclaims", "serviceaccounts", "secrets", "configmaps", "services"), WRITE),
    ("", ("pods", "events", "endpoints", "resourcequotas", "limitranges"), READ),
    ("networking.k8s.io", ("networkpolicies",), WRITE),
    ("batch", ("jobs",), WRITE),
    ("kubeflow.org", ("pytorchjobs",), WRITE),
    ("trainer.kubeflow.org", ("trainjobs", "trainingruntimes"), WRITE),
    ("kueue.x-k8s.io", ("localqueues",), WRITE),
    ("apps", ("deployments",), WRITE),
    ("apps", ("replicasets",), READ),
    ("policy", ("poddisruptionbudgets",), WRITE),
    ("serving.kserve.io", ("inferenceservices",), WRITE),
)
JOB_READER_RULES: tuple[tuple[str, tuple[str, ...], list[str]], ...] = (
    ("storage.k8s.io", ("storageclasses",), ["get"]),
)


def policy_rules(
    rules: tuple[tuple[str, tuple[str, ...], list[str]], ...],
) -> list[k8s.rbac.v1.PolicyRuleArgs]:
    return [
        k8s.rbac.v1.PolicyRuleArgs(api_groups=[group], resources=list(resources), verbs=verbs)
        for group, resources, verbs in rules
    ]


def subject(kind: str, name: str) -> k8s.rbac.v1.SubjectArgs:
    """An RBAC subject from a config entry's kind and name ('ns/name' for a ServiceAccount)."""
    if kind == "ServiceAccount":
        namespace, _, account = name.partition("/")
        return k8s.rbac.v1.SubjectArgs(kind=kind, name=account, namespace=namespace)
    return k8s.rbac.v1.SubjectArgs(kind=kind, name=name, api_group="rbac.authorization.k8s.io")


def label_guard_validations(privileged: list[str]) -> list[dict[str, str]]:
    """The guard's two rules, as CEL over the namespace (`object`, `oldObject`: null on CREATE)."""
    group, resource, verb = LABEL_PERMISSION
    allowed = json.dumps(sorted(privileged))
    return [
        {
            "expression": (
                f"!variables.relabels || authorizer.group('{group}').resource('{resource}')"
                f".name(object.metadata.name).check('{verb}').allowed()"
            ),
            "messageExpression": (
                "'namespace ' + object.metadata.name + ': ' + request.userInfo.username + ' may not set, "
                f"change or remove {POD_SECURITY_PREFIX} labels: that takes {verb} on "
                f"{resource}.{group}, a platform right ({LABEL_GUARD})'"
            ),
            "reason": "Forbidden",
        },
        {
            "expression": (
                "variables.enforce != 'privileged' || variables.oldEnforce == 'privileged' || "
                f"object.metadata.name in {allowed}"
            ),
            "messageExpression": (
                "'namespace ' + object.metadata.name + ': enforcing Pod Security privileged is allowed "
                f"only in {', '.join(sorted(privileged)) or 'no namespace'} "
                f"(podSecurityPrivilegedNamespaces; {LABEL_GUARD})'"
            ),
            "reason": "Forbidden",
        },
    ]


def label_guard_variables() -> list[dict[str, str]]:
    enforce = f"'{POD_SECURITY_PREFIX}enforce'"
    return [
        {"name": "labels", "expression": "has(object.metadata.labels) ? object.metadata.labels : {}"},
        {
            "name": "oldLabels",
            "expression": (
                "oldObject != null && has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}"
            ),
        },
        {
            # A Pod Security label added, changed or removed.
            "name": "relabels",
            "expression": (
                f"variables.labels.exists(k, k.startsWith('{POD_SECURITY_PREFIX}') && "
                "(!(k in variables.oldLabels) || variables.oldLabels[k] != variables.labels[k])) || "
                f"variables.oldLabels.exists(k, k.startsWith('{POD_SECURITY_PREFIX}') && "
                "!(k in variables.labels))"
            ),
        },
        {
            "name": "enforce",
            "expression": f"{enforce} in variables.labels ? variables.labels[{enforce}] : ''",
        },
        {
            "name": "oldEnforce",
            "expression": f"{enforce} in variables.oldLabels ? variables.oldLabels[{enforce}] : ''",
        },
    ]


class TeamTenancy(pulumi.ComponentResource):
    """The team namespaces with their deployer Roles and bindings, the StorageClasses, the label guard."""

    namespaces: list[pulumi.Output[str]]
    storage_classes: list[pulumi.Output[str]]

    def __init__(self, name: str, settings: Settings, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{PROJECT}:tenancy:TeamTenancy", name, {}, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.namespaces = [
            self._team(f"{name}-{namespace}", namespace, level, settings, child)
            for namespace, level in settings.team_namespace_levels.items()
        ]
        subjects = [subject(kind, who) for _, kind, who in map(parse_deployer, settings.team_deployers)]
        if subjects:
            reader = k8s.rbac.v1.ClusterRole(
                f"{name}-reader",
                metadata=k8s.meta.v1.ObjectMetaArgs(name=READER_ROLE, labels=labels(settings, "tenancy")),
                rules=policy_rules(JOB_READER_RULES),
                opts=child,
            )
            k8s.rbac.v1.ClusterRoleBinding(
                f"{name}-reader-binding",
                metadata=k8s.meta.v1.ObjectMetaArgs(name=READER_ROLE, labels=labels(settings, "tenancy")),
                role_ref=k8s.rbac.v1.RoleRefArgs(
                    api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=reader.metadata.name
                ),
                subjects=subjects,
                opts=child,
            )
        self.storage_classes = []
        if settings.platform_storage_classes:
            for suffix, data in (("class", False), ("data-class", True)):
                args = storage_class_args(settings, data=data)
                assert args is not None  # a preset: the checks refuse storageProvider existing here
                created = k8s.storage.v1.StorageClass(f"{name}-{suffix}", **args, opts=child)
                self.storage_classes.append(created.metadata.name)
        if settings.pod_security_label_guard:
            self._label_guard(name, settings, child)
        if settings.team_namespace_levels:
            ServiceGuard(f"{name}-services", settings, list(settings.team_namespace_levels), child)
            objects_guard(name, settings, child)
        self.register_outputs({"namespaces": self.namespaces, "storage_classes": self.storage_classes})

    @staticmethod
    def _team(
        resource: str, namespace: str, level: str, settings: Settings, opts: pulumi.ResourceOptions
    ) -> pulumi.Output[str]:
        enforce = {f"{POD_SECURITY_PREFIX}{mode}": level for mode in ("enforce", "warn", "audit")}
        created = k8s.core.v1.Namespace(
            resource,
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=namespace, labels={**labels(settings, "tenancy"), **enforce}
            ),
            # It holds the team's jobs and retained checkpoint claims: a platform destroy leaves it.
            opts=pulumi.ResourceOptions.merge(
                opts,
                pulumi.ResourceOptions(
                    retain_on_delete=True,
                    import_=namespace if namespace in settings.team_namespaces_adopt else None,
                ),
            ),
        )
        scoped = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[created]))
        team_objects(resource, namespace, settings, scoped)
        role = k8s.rbac.v1.Role(
            f"{resource}-deployer",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=DEPLOYER_ROLE, namespace=namespace, labels=labels(settings, "tenancy")
            ),
            rules=policy_rules(JOB_DEPLOYER_RULES),
            opts=scoped,
        )
        subjects = [
            subject(kind, who)
            for team, kind, who in map(parse_deployer, settings.team_deployers)
            if team == namespace
        ]
        if subjects:
            k8s.rbac.v1.RoleBinding(
                f"{resource}-deployer-binding",
                metadata=k8s.meta.v1.ObjectMetaArgs(
                    name=DEPLOYER_ROLE, namespace=namespace, labels=labels(settings, "tenancy")
                ),
                role_ref=k8s.rbac.v1.RoleRefArgs(
                    api_group="rbac.authorization.k8s.io", kind="Role", name=role.metadata.name
                ),
                subjects=subjects,
                opts=scoped,
            )
        return created.metadata.name

    @staticmethod
    def _label_guard(name: str, settings: Settings, opts: pulumi.ResourceOptions) -> None:
        group, resource, verb = LABEL_PERMISSION
        admin = k8s.rbac.v1.ClusterRole(
            f"{name}-pod-security-admin",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=POD_SECURITY_ADMIN_ROLE, labels=labels(settings, "tenancy")
            ),
            rules=[k8s.rbac.v1.PolicyRuleArgs(api_groups=[group], resources=[resource], verbs=[verb])],
            opts=opts,
        )
        if settings.pod_security_admins:
            k8s.rbac.v1.ClusterRoleBinding(
                f"{name}-pod-security-admin-binding",
                metadata=k8s.meta.v1.ObjectMetaArgs(
                    name=POD_SECURITY_ADMIN_ROLE, labels=labels(settings, "tenancy")
                ),
                role_ref=k8s.rbac.v1.RoleRefArgs(
                    api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=admin.metadata.name
                ),
                subjects=[subject(*entry.partition(":")[::2]) for entry in settings.pod_security_admins],
                opts=opts,
            )
        deny_policy(
            f"{name}-label-guard",
            LABEL_GUARD,
            settings,
            "namespaces",
            label_guard_validations(settings.pod_security_privileged_namespaces),
            opts,
            variables=label_guard_variables(),
        )
