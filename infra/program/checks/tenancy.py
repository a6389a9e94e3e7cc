"""Cross-field rules of the team namespaces, their deployers, the platform's StorageClasses and the Pod
Security label guard."""

from __future__ import annotations

from collections.abc import Iterator

from infra.program.checks.errors import ConfigError
from infra.program.settings import Settings
from infra.program.settings.tenancy import parse_deployer, parse_priority_ceiling

# The keys only a platform stack acts on, by field name.
PLATFORM_KEYS = (
    "team_namespaces",
    "team_namespaces_adopt",
    "team_deployers",
    "platform_storage_classes",
    "pod_security_admins",
    "pod_security_privileged_namespaces",
    "team_quota",
    "team_priority_classes",
)


def tenancy(s: Settings, _: bool) -> Iterator[ConfigError]:
    if s.stack_role != "platform":
        for name in PLATFORM_KEYS:
            if s.declares(name):
                field = Settings.model_fields[name]
                yield ConfigError(
                    str(field.alias),
                    getattr(s, name),
                    f"unset with stackRole {s.stack_role} (a platform stack's key)",
                )
        return
    levels = s.team_namespace_levels
    for entry in s.team_deployers:
        namespace = parse_deployer(entry)[0]
        if namespace not in levels:
            yield ConfigError(
                "teamDeployers",
                entry,
                f"an entry for a namespace teamNamespaces names ({', '.join(levels) or 'none'})",
            )
    for name in s.team_namespaces_adopt:
        if name not in levels:
            yield ConfigError(
                "teamNamespacesAdopt",
                s.team_namespaces_adopt,
                f"namespaces teamNamespaces names ({', '.join(levels) or 'none'}); {name} is not one",
            )
    classes = s.priority_class_values
    for entry in s.team_priority_classes:
        namespace, name = parse_priority_ceiling(entry)
        if namespace not in levels:
            yield ConfigError(
                "teamPriorityClasses",
                entry,
                f"an entry for a namespace teamNamespaces names ({', '.join(levels) or 'none'})",
            )
        elif name not in classes:
            yield ConfigError(
                "teamPriorityClasses",
                entry,
                f"an entry naming one of priorityClasses ({', '.join(classes) or 'none'})",
            )
    for name, level in levels.items():
        if level == "privileged" and name not in s.pod_security_privileged_namespaces:
            yield ConfigError(
                "teamNamespaces",
                f"{name}={level}",
                f"restricted or baseline, or privileged with {name} in podSecurityPrivilegedNamespaces "
                "(the label guard refuses privileged anywhere else)",
            )
    if s.pod_security_admins and not s.pod_security_label_guard:
        yield ConfigError(
            "podSecurityAdmins", s.pod_security_admins, "empty with podSecurityLabelGuard false"
        )
    if s.platform_storage_classes and s.storage_provider == "existing":
        yield ConfigError(
            "platformStorageClasses",
            True,
            "false with storageProvider existing (there is no preset to create classes from)",
        )


def data_storage_class(s: Settings, _: bool) -> Iterator[ConfigError]:
    if s.data_storage_class_name and s.storage_provider != "existing":
        yield ConfigError(
            "dataStorageClassName",
            s.data_storage_class_name,
            f"empty with storageProvider {s.storage_provider} (the stack creates "
            f"{s.storage_class_name}-data itself)",
        )
