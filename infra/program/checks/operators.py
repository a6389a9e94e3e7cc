"""Cross-field rules of the training operator v1, the stack's role and the post-install smoke check."""

from __future__ import annotations

import re
from collections.abc import Iterator

from infra.program.checks.errors import ConfigError
from infra.program.common.vendored import TRAINING_OPERATOR, vendored
from infra.program.settings import SMOKE_NAMESPACE, Settings


def unpinned_source(key: str, source: str) -> list[ConfigError]:
    """A kustomize source must be a local checkout or a git URL pinned to a release tag or commit (a
    helper of the two source rules, not a rule itself: it returns the error rather than yielding it)."""
    if not source or (source.startswith(("/", "./", "../")) and "?ref=" not in source):
        return []  # upstream at the pinned version, or a local checkout
    ref = re.search(r"[?&]ref=([^&]+)", source)
    if ref and re.fullmatch(r"v\d+\.\d+\.\d+|[0-9a-f]{40}", ref.group(1)):
        return []
    return [
        ConfigError(
            key,
            source,
            "a local path (/..., ./..., ../...), or a git URL pinned with "
            "?ref=<release tag vX.Y.Z or 40-hex commit> (never a branch)",
        )
    ]


def unvendored_version(
    key: str, version: str, source_key: str, source: str, component: str
) -> list[ConfigError]:
    """Without a source of its own, a component installs the vendored manifests (infra/manifests), so
    its version key must name the version vendored there (a helper of the source rules)."""
    found = vendored(component)
    if source or version == found.version:
        return []
    return [
        ConfigError(
            key,
            version,
            f"{found.version}, the version vendored in {found.shown}, unless {source_key} names the "
            f"manifests of {version}; to upgrade, raise the pin and vendor it again (`make manifests`, "
            "infra/manifests/README.md)",
        )
    ]


def operator_source(s: Settings, _: bool) -> Iterator[ConfigError]:
    yield from unpinned_source("operatorSource", s.operator_source)
    if s.operator_install:
        yield from unvendored_version(
            "operatorVersion", s.operator_version, "operatorSource", s.operator_source, TRAINING_OPERATOR
        )


def operator_init_container(s: Settings, _: bool) -> Iterator[ConfigError]:
    """An operator this stack does not install adds an init container this stack cannot see to every
    PyTorchJob Worker pod; under 'restricted' the user must vouch for it, or no Worker pod is admitted."""
    workers = s.stack_role != "platform" and s.job_kind == "pytorchjob" and s.job_nodes > 1
    if (
        workers
        and not s.operator_install
        and not s.operator_patch_existing  # an 'all' stack that patches the operator itself
        and s.namespace_pod_security == "restricted"
        and not s.operator_init_container_restricted
    ):
        yield ConfigError(
            "operatorInitContainerRestricted",
            False,
            "true when operatorInstall is false and a multi-node PyTorchJob runs in a namespace enforcing "
            "Pod Security 'restricted' (the operator adds an init container to every Worker pod, upstream's "
            "without a securityContext, and the namespace refuses those pods): configure that operator's "
            "init container template to be restricted-compliant (as operatorInstall true does) and set this "
            "key, or set namespacePodSecurity to baseline",
        )


def stack_role(s: Settings, _: bool) -> Iterator[ConfigError]:
    installs = s.operator_install or s.operator_patch_existing or s.trainer_install or s.kserve_install
    installs = installs or s.gpu_device_plugin == "install" or bool(s.gpu_smoke_node_selector)
    installs = installs or bool(s.team_namespaces) or s.platform_storage_classes
    if s.stack_role == "platform" and not (installs or s.priority_classes):
        yield ConfigError(
            "operatorInstall",
            False,
            "true when stackRole is platform (the platform stack installs the operator)",
        )
    if s.stack_role == "job" and s.operator_install:
        yield ConfigError(
            "operatorInstall",
            True,
            "false when stackRole is job: the cluster's platform stack installs the operator and owns its "
            "CRDs (stackRole all installs both in one stack)",
        )
    if s.priority_classes and s.stack_role not in ("platform", "all"):
        yield ConfigError(
            "priorityClasses",
            s.priority_classes,
            f"empty when stackRole is {s.stack_role}: PriorityClasses are cluster-wide, the platform "
            "stack's to create",
        )
    if s.gpu_smoke_node_selector and s.stack_role not in ("platform", "all"):
        yield ConfigError(
            "gpuSmokeNodeSelector",
            s.gpu_smoke_node_selector,
            f"empty when stackRole is {s.stack_role}: the GPU smoke check is the platform stack's",
        )
    if s.gpu_node_tolerations and s.stack_role not in ("platform", "all"):
        yield ConfigError(
            "gpuNodeTolerations",
            s.gpu_node_tolerations,
            f"empty when stackRole is {s.stack_role}: the device plugin and the GPU smoke check are the "
            "platform stack's (a job's pods tolerate jobTolerations)",
        )
    if s.gpu_device_plugin == "install" and s.stack_role not in ("platform", "all"):
        yield ConfigError(
            "gpuDevicePlugin",
            s.gpu_device_plugin,
            f"present when stackRole is {s.stack_role}: the device plugin is a node agent of the whole "
            "cluster, the platform stack's to install",
        )
    if s.platform_stack and s.stack_role != "job":
        yield ConfigError(
            "platformStack",
            s.platform_stack,
            f"empty when stackRole is {s.stack_role}: only a job stack reads a platform stack's facts",
        )
    if s.reattach_retained and not s.checkpoint_volume_retain:
        yield ConfigError(
            "reattachRetained", True, "false unless checkpointVolumeRetain is true (nothing was retained)"
        )
    for adopt, flag, installs, install_flag in (
        (s.operator_adopt_crds, "operatorAdoptCrds", s.operator_install, "operatorInstall"),
        (s.trainer_adopt_crds, "trainerAdoptCrds", s.trainer_install, "trainerInstall"),
    ):
        if adopt and not installs:
            yield ConfigError(flag, True, f"false unless {install_flag} is true (nothing is installed)")


def operator_patch(s: Settings, _: bool) -> Iterator[ConfigError]:
    """Patching the cluster's operator (operator_patch.py) is the platform's business, and only for an
    operator this stack does not install; the keys naming it are read in that mode alone."""
    if s.operator_patch_existing and s.operator_install:
        yield ConfigError(
            "operatorPatchExisting",
            True,
            "false when operatorInstall is true (the stack's own install already carries the restricted "
            "template); set operatorInstall false to patch an operator installed otherwise (e.g. Kubeflow's)",
        )
    if s.operator_patch_existing and s.stack_role == "job":
        yield ConfigError(
            "operatorPatchExisting",
            True,
            "false when stackRole is job: the cluster's platform stack patches the operator; a job stack "
            "declares it with operatorInitContainerRestricted true",
        )
    for field, alias in (
        ("operator_existing_namespace", "operatorExistingNamespace"),
        ("operator_existing_name", "operatorExistingName"),
    ):
        value = getattr(s, field)
        if not s.operator_patch_existing and s.declares(field):
            yield ConfigError(
                alias, value, "left unset unless operatorPatchExisting is true (only read then)"
            )


def smoke_namespace(s: Settings, _: bool) -> Iterator[ConfigError]:
    """The post-install smoke check's namespace belongs to the smoke check: its job runs, and is deleted,
    there (infra/program/platform/smoke.py)."""
    keys = [
        k
        for k, on in (
            ("operatorSmokeCheck", any(s.smoke_checks)),
            ("networkPolicySmokeCheck", s.network_check),
        )
        if on
    ]
    if s.stack_role != "platform" and s.namespace == SMOKE_NAMESPACE and keys:
        yield ConfigError(
            "namespace",
            s.namespace,
            f"another namespace than {SMOKE_NAMESPACE}, which the post-install smoke check creates and "
            f"owns (or set {' and '.join(keys)} false)",
        )
