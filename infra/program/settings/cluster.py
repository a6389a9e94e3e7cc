"""Settings: the cluster, the namespace and the namespace's budget (ResourceQuota / LimitRange)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import field_validator

from infra.program.settings.base import K8S_VERSIONS, SettingsGroup, dns_label, key, optional_quantity

# A Pulumi stack reference: `stack`, or `org/project/stack` (the engine also reads `org/stack` on some
# backends, never needed here).
STACK_REFERENCE = re.compile(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)?")


class ClusterSettings(SettingsGroup):
    """What the stack owns, its namespace and the Kubernetes version it targets."""

    stack_role: Literal["all", "platform", "job", "prerequisites"] = key(
        "stackRole",
        "all",
        "What this stack owns: 'platform' the cluster-level parts (the training operator and its CRDs, "
        "one platform stack per cluster), 'job' one environment (namespace, storage, credentials, job; "
        "the operator comes from the platform stack), 'all' both (a cluster with a single environment), "
        "'prerequisites' what a bare dev cluster lacks (an NFS server and csi-driver-nfs, MinIO filled "
        "with MNIST; docs/PREREQUISITES.md).",
    )
    platform_stack: str = key(
        "platformStack",
        "",
        "With stackRole job: the cluster's platform stack, as a Pulumi stack reference (`stack` in this "
        "project, or `org/project/stack`). The job stack reads that stack's `platform` output (what it "
        "installed: the training operator and its init container, Kubeflow Trainer v2, KServe, and its "
        "kueuePyTorchJobIntegration) in place of operatorInitContainerRestricted, "
        "operatorInitContainerImage, trainerPresent, kservePresent and kueuePyTorchJobIntegration; a "
        "declaration set here that contradicts it, or a job needing what it did not install, stops the "
        "preview with one line naming both stacks. Empty: those declarations are trusted as written.",
    )
    namespace: str = key("namespace", "ddp-mnist", "Namespace of every namespaced object.")
    create_namespace: bool = key(
        "createNamespace",
        True,
        "Create the namespace, labelled to enforce (and warn and audit) the Pod Security level "
        "namespacePodSecurity; false uses an existing one.",
    )
    namespace_pod_security: Literal["restricted", "baseline", "privileged"] = key(
        "namespacePodSecurity",
        "restricted",
        "Pod Security level the namespace enforces: the created namespace is labelled with it; for an "
        "existing namespace (createNamespace false) declare the level it enforces. Every pod the job's "
        "controllers create is checked against it before deployment.",
    )
    kubernetes_version: Literal[K8S_VERSIONS] = key(  # type: ignore[valid-type]
        "kubernetesVersion",
        "1.33",
        "Target Kubernetes minor version; the offline render validates against it.",
    )

    @field_validator("platform_stack")
    @classmethod
    def _stack_reference(cls, value: str) -> str:
        if value and not STACK_REFERENCE.fullmatch(value):
            raise ValueError("a stack reference: `stack`, or `org/project/stack` (letters, digits, . _ -)")
        return value

    @field_validator("namespace")
    @classmethod
    def _namespace_dns_label(cls, value: str) -> str:
        return dns_label(value)


class NamespaceBudgetSettings(SettingsGroup):
    """ResourceQuota / LimitRange of the namespace; every key off by default."""

    namespace_gpu_quota: int = key(
        "namespaceGpuQuota",
        0,
        "ResourceQuota: nvidia.com/gpu requested by all pods of the namespace together; 0 sets none.",
        ge=0,
        le=4096,
    )
    namespace_cpu_quota: str = key(
        "namespaceCpuQuota",
        "",
        "ResourceQuota: CPU requested by all pods of the namespace together (a quantity); empty sets none.",
    )
    namespace_memory_quota: str = key(
        "namespaceMemoryQuota",
        "",
        "ResourceQuota: memory requested by all pods of the namespace together (a quantity); "
        "empty sets none.",
    )
    namespace_max_gpus_per_container: int = key(
        "namespaceMaxGpusPerContainer",
        0,
        "LimitRange: the most nvidia.com/gpu one container of the namespace may use (containers that set "
        "no GPU limit get 0); 0 sets none.",
        ge=0,
        le=16,
    )
    namespace_default_cpu_request: str = key(
        "namespaceDefaultCpuRequest",
        "",
        "LimitRange: CPU request given to containers that set none (a quantity; lets them in under "
        "namespaceCpuQuota); empty sets none.",
    )
    namespace_default_memory_request: str = key(
        "namespaceDefaultMemoryRequest",
        "",
        "LimitRange: memory request given to containers that set none (a quantity; lets them in under "
        "namespaceMemoryQuota); empty sets none.",
    )

    @field_validator(
        "namespace_cpu_quota",
        "namespace_memory_quota",
        "namespace_default_cpu_request",
        "namespace_default_memory_request",
    )
    @classmethod
    def _budget_optional_quantity(cls, value: str) -> str:
        return optional_quantity(value)
