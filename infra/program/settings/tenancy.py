"""Settings: the team namespaces a platform stack owns for its job stacks, who may deploy into them, the
StorageClasses it creates for them, and the guard on Pod Security labels."""

from __future__ import annotations

import re

from pydantic import field_validator

from infra.program.settings.base import QUANTITY, SettingsGroup, dns_label, key

POD_SECURITY_LEVELS = ("restricted", "baseline", "privileged")
SUBJECT_KINDS = ("User", "Group", "ServiceAccount")
_SERVICE_ACCOUNT = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
# A ResourceQuota's resource name: requests.cpu, pods, count/jobs.batch, requests.nvidia.com/gpu,
# <class>.storageclass.storage.k8s.io/requests.storage.
_QUOTA_RESOURCE = re.compile(r"[a-z0-9]([-a-z0-9./]*[a-z0-9])?")


def parse_team_namespace(entry: str) -> tuple[str, str]:
    """A teamNamespaces entry, 'name' or 'name=level', as (name, level)."""
    name, _, level = entry.partition("=")
    return name, level or "restricted"


def parse_quota(entry: str) -> tuple[str, str]:
    """A teamQuota entry, 'resource=quantity', as (resource, quantity)."""
    resource, _, amount = entry.partition("=")
    return resource, amount


def parse_priority_ceiling(entry: str) -> tuple[str, str]:
    """A teamPriorityClasses entry, 'namespace=class', as (namespace, class)."""
    namespace, _, name = entry.partition("=")
    return namespace, name


def parse_deployer(entry: str) -> tuple[str, str, str]:
    """A teamDeployers entry, 'namespace=Kind:name', as (namespace, kind, name)."""
    namespace, _, subject = entry.partition("=")
    kind, _, name = subject.partition(":")
    return namespace, kind, name


class TenancySettings(SettingsGroup):
    """What a platform stack gives each team: a namespace, a namespaced deployer Role, storage classes."""

    team_namespaces: list[str] = key(
        "teamNamespaces",
        [],
        "With stackRole platform: the namespaces the platform creates for job stacks, each 'name' or "
        "'name=level' (the Pod Security level it enforces: restricted, the default, or baseline; "
        "privileged only for a namespace podSecurityPrivilegedNamespaces names). Each gets the Role "
        "ddp-mnist-job-deployer, bound to its teamDeployers; a job stack deploying there sets "
        "createNamespace false.",
    )
    team_namespaces_adopt: list[str] = key(
        "teamNamespacesAdopt",
        [],
        "Team namespaces that exist already (a job stack created them, then set createNamespace false and "
        "left them in the cluster): the platform stack adopts each (a Pulumi import) instead of creating "
        "it. Remove an entry after the `up` that adopted it.",
    )
    team_deployers: list[str] = key(
        "teamDeployers",
        [],
        "With teamNamespaces: who may deploy a job stack into which team namespace, each "
        "'namespace=User:name', 'namespace=Group:name' or 'namespace=ServiceAccount:ns/name' (the "
        "identity the job stack's `pulumi up` runs as).",
    )
    platform_storage_classes: bool = key(
        "platformStorageClasses",
        False,
        "With stackRole platform: create the StorageClasses storageClassName and <storageClassName>-data "
        "from this stack's storage keys (storageProvider and its preset's keys), for job stacks that use "
        "them with storageProvider existing (and dataStorageClassName).",
    )
    pod_security_label_guard: bool = key(
        "podSecurityLabelGuard",
        True,
        "With stackRole platform: install the ValidatingAdmissionPolicy ddp-mnist-pod-security-labels: only "
        "an identity allowed to update podsecuritylabels.ddp-mnist.io (cluster-admin, or "
        "podSecurityAdmins) may set, change or remove a namespace's pod-security.kubernetes.io labels, "
        "and no namespace but those podSecurityPrivilegedNamespaces names may be made to enforce "
        "privileged.",
    )
    pod_security_admins: list[str] = key(
        "podSecurityAdmins",
        [],
        "With podSecurityLabelGuard: identities besides cluster-admin that may change Pod Security labels, "
        "each 'User:name', 'Group:name' or 'ServiceAccount:ns/name' (bound to the ClusterRole "
        "ddp-mnist-pod-security-admin).",
    )
    pod_security_privileged_namespaces: list[str] = key(
        "podSecurityPrivilegedNamespaces",
        [],
        "Namespaces the platform allows to enforce Pod Security privileged (e.g. nfs-system, the "
        "prerequisites stack's NFS server): the label guard refuses privileged anywhere else.",
    )

    team_quota: list[str] = key(
        "teamQuota",
        [],
        "With teamNamespaces: the ResourceQuota ddp-mnist-team-quota the platform sets in every team "
        "namespace, each 'resource=quantity' (requests.cpu=64, requests.memory=256Gi, "
        "requests.nvidia.com/gpu=8, requests.storage=2Ti, persistentvolumeclaims=20, pods=100); empty "
        "sets none. The deployer Role may read it, never change it. A quota on requests.cpu or "
        "requests.memory makes the API server refuse a pod that requests none (the bundle's pods all "
        "request both).",
    )
    team_priority_classes: list[str] = key(
        "teamPriorityClasses",
        [],
        "With teamNamespaces: the highest of this stack's priorityClasses each team namespace may name, "
        "each 'namespace=class'. In every team namespace the ResourceQuota ddp-mnist-team-priority allows "
        "no pod (pods: 0) of system-cluster-critical, system-node-critical or, per this key, of a "
        "priorityClasses entry valued above the namespace's class (a namespace without an entry may name "
        "every priorityClasses entry).",
    )

    @field_validator("team_namespaces")
    @classmethod
    def _team_namespaces(cls, values: list[str]) -> list[str]:
        names = []
        for entry in values:
            name, level = parse_team_namespace(entry)
            dns_label(name)
            if level not in POD_SECURITY_LEVELS:
                raise ValueError("'name' or 'name=level' entries, level restricted, baseline or privileged")
            names.append(name)
        if len(set(names)) != len(names):
            raise ValueError("entries with distinct namespace names")
        return values

    @field_validator("team_deployers")
    @classmethod
    def _team_deployers(cls, values: list[str]) -> list[str]:
        for entry in values:
            namespace, kind, name = parse_deployer(entry)
            dns_label(namespace)
            _subject(kind, name)
        return values

    @field_validator("team_quota")
    @classmethod
    def _team_quota(cls, values: list[str]) -> list[str]:
        resources = []
        for entry in values:
            resource, amount = parse_quota(entry)
            if not _QUOTA_RESOURCE.fullmatch(resource) or not QUANTITY.match(amount) or amount[0] in "+-":
                raise ValueError(
                    "'resource=quantity' entries (requests.cpu=64, requests.nvidia.com/gpu=8, pods=100)"
                )
            resources.append(resource)
        if len(set(resources)) != len(resources):
            raise ValueError("entries with distinct resource names")
        return values

    @field_validator("team_priority_classes")
    @classmethod
    def _team_priority_classes(cls, values: list[str]) -> list[str]:
        namespaces = []
        for entry in values:
            namespace, name = parse_priority_ceiling(entry)
            if not name:
                raise ValueError("'namespace=class' entries")
            dns_label(namespace)
            namespaces.append(namespace)
        if len(set(namespaces)) != len(namespaces):
            raise ValueError("one entry per namespace")
        return values

    @field_validator("pod_security_admins")
    @classmethod
    def _admins(cls, values: list[str]) -> list[str]:
        for entry in values:
            _subject(*entry.partition(":")[::2])
        return values

    @field_validator("pod_security_privileged_namespaces", "team_namespaces_adopt")
    @classmethod
    def _privileged(cls, values: list[str]) -> list[str]:
        for name in values:
            dns_label(name)
        return values

    @property
    def team_namespace_levels(self) -> dict[str, str]:
        """teamNamespaces as name -> the Pod Security level it enforces."""
        return dict(parse_team_namespace(entry) for entry in self.team_namespaces)


def _subject(kind: str, name: str) -> None:
    if kind not in SUBJECT_KINDS or not name:
        raise ValueError("subjects written 'User:name', 'Group:name' or 'ServiceAccount:namespace/name'")
    if kind == "ServiceAccount" and not _SERVICE_ACCOUNT.fullmatch(name):
        raise ValueError("a ServiceAccount subject written 'ServiceAccount:namespace/name'")
