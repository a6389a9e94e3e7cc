"""The guardrails as Pulumi CrossGuard policies: thin adapters from the engine's resources to `guardrails`.

Building the policies needs `pulumi_policy` but no engine; only `PolicyPack(...)` in `__main__.py`
serves them to one. The Pulumi CLI runs this directory as a program, so sibling modules are imported
by their plain names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import guardrails
from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

PACK_NAME = "ddp-mnist-guardrails"
# Every resource policy skips these namespaces: the Kubeflow training operator's (kubeflow), Kubeflow
# Trainer v2's and JobSet's (kubeflow-system), KServe's (kserve) and csi-driver-nfs's (kube-system, from
# its chart, a prerequisites stack's) own workloads come from their upstream manifests, which this
# platform does not author (set [] to check them too). KServe v0.20.0's release manifest alone has 7
# violations there (tags without digests, a DaemonSet that is not restricted, a container without
# limits, a literal under a secret-like env name).
EXCLUDE_NAMESPACES = {
    "excludeNamespaces": {
        "type": "array",
        "items": {"type": "string"},
        "default": ["kubeflow", "kubeflow-system", "kserve", "kube-system"],
        "description": "Namespaces whose objects this policy does not check.",
    }
}
# Policies that declare it skip the stacks it names (read from each resource's URN).
EXEMPT_STACKS = {
    "exemptStacks": {
        "type": "array",
        "items": {"type": "string"},
        "default": ["dev", "dev-prereqs"],
        "description": "Stacks this policy does not check (a local cluster runs images loaded by tag).",
    }
}
Rule = Callable[[guardrails.Obj, Mapping[str, Any]], list[str]]


def plain(value: Any) -> Any:
    """The engine's property proxies as plain dicts and lists.

    Reading an unknown value (a preview's not-yet-computed output) raises the SDK's UnknownValueError,
    which the SDK reports as "can't run policy during preview" instead of a violation.
    """
    if isinstance(value, Mapping):
        return {k: plain(value[k]) for k in value}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [plain(v) for v in value]
    return value


def k8s_object(resource_type: str, props: Mapping[str, Any]) -> dict[str, Any] | None:
    """A Kubernetes resource's properties as the object the API server receives; None for others.

    `kubernetes:batch/v1:Job` -> apiVersion batch/v1, kind Job (`core/v1` is plain `v1`), when the
    properties do not carry them already. A `*Patch` resource (a server-side apply of some fields of an
    object the stack does not own, e.g. operatorPatchExisting's) is no whole object: None.
    """
    parts = resource_type.split(":")
    if len(parts) != 3 or parts[0] != "kubernetes" or "/" not in parts[1] or parts[2].endswith("Patch"):
        return None
    obj: dict[str, Any] = plain(props)
    api_version = parts[1][len("core/") :] if parts[1].startswith("core/") else parts[1]
    obj.setdefault("apiVersion", api_version)
    obj.setdefault("kind", parts[2])
    return obj


def stack_of(urn: str) -> str:
    """The stack a resource belongs to: `urn:pulumi:<stack>::<project>::<type>::<name>`."""
    return urn.split("::", 1)[0].rsplit(":", 1)[-1]


def resource_policy(
    name: str,
    description: str,
    rule: Rule,
    properties: dict[str, dict[str, Any]] | None = None,
    enforcement_level: EnforcementLevel = EnforcementLevel.MANDATORY,
) -> ResourceValidationPolicy:
    """A policy (mandatory unless told) that reports each message `rule` returns for a Kubernetes resource.

    `properties` is the policy's config schema (JSON schema per key, with a default each); `rule`
    receives the config with the defaults filled in, whether or not the engine filled them. A policy
    whose schema has `exemptStacks` skips the resources of those stacks.
    """
    schema = {**EXCLUDE_NAMESPACES, **(properties or {})}
    defaults = {key: prop["default"] for key, prop in schema.items()}

    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        obj = k8s_object(args.resource_type, args.props)
        if obj is None:
            return
        config = {**defaults, **dict(args.get_config() or {})}
        if (obj.get("metadata") or {}).get("namespace") in config["excludeNamespaces"]:
            return
        if stack_of(args.urn) in config.get("exemptStacks", ()):
            return
        for message in rule(obj, config):
            report_violation(message, None)

    return ResourceValidationPolicy(
        name=name,
        description=description,
        validate=validate,
        enforcement_level=enforcement_level,
        config_schema=PolicyConfigSchema(properties=schema),
    )


def _shared_claims(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    found = [(r.urn, k8s_object(r.resource_type, r.props)) for r in args.resources]
    objects = [(urn, obj) for urn, obj in found if obj is not None]
    for claim, message in guardrails.shared_claims_read_write_many([obj for _, obj in objects]):
        urn = next(u for u, obj in objects if obj is claim)
        report_violation(message, urn)


def policies() -> list[Policy]:
    """Every guardrail: mandatory ones (lower one with the pack's config if needed), and advisory
    `images-by-digest`, which warns without stopping an update."""
    return [
        resource_policy(
            "gpu-limits-match-processes",
            "GPU pods set nvidia.com/gpu limits equal to their training processes per node.",
            lambda obj, _: guardrails.gpu_limits_match_processes(obj),
        ),
        resource_policy(
            "images-pinned",
            "Container images are pinned by a version tag or digest: no :latest, no untagged images.",
            lambda obj, _: guardrails.images_pinned(obj),
        ),
        resource_policy(
            "images-by-digest",
            "Workload containers name their image by @sha256 digest: a tag can be re-pushed (advisory; "
            "local stacks exempt).",
            lambda obj, _: guardrails.images_by_digest(obj),
            EXEMPT_STACKS,
            EnforcementLevel.ADVISORY,
        ),
        StackValidationPolicy(
            name="shared-claims-read-write-many",
            description="PersistentVolumeClaims mounted by more than one pod are ReadWriteMany.",
            validate=_shared_claims,
            enforcement_level=EnforcementLevel.MANDATORY,
        ),
        resource_policy(
            "pod-security-restricted",
            "Pods meet the Pod Security Standards 'restricted' profile.",
            lambda obj, config: guardrails.pod_security_restricted(obj, config["privilegedNamespaces"]),
            {
                "privilegedNamespaces": {
                    "type": "array",
                    "items": {"type": "string"},
                    "default": ["nfs-system"],
                    "description": "Namespaces whose pods this policy lets run privileged: nfs-system "
                    "holds a prerequisites stack's in-kernel NFS server, which must be (the namespace "
                    "enforces Pod Security 'privileged' and its annotation says why); the other "
                    "policies still check it.",
                }
            },
        ),
        resource_policy(
            "no-secret-literals-in-env",
            "Secret material reaches containers through Secrets, never as a literal env value.",
            lambda obj, _: guardrails.no_secret_literals_in_env(obj),
        ),
        resource_policy(
            "requests-and-limits-set",
            "Containers request CPU and memory and set a memory limit.",
            lambda obj, config: guardrails.requests_and_limits_set(obj, bool(config["requireCpuLimit"])),
            {
                "requireCpuLimit": {
                    "type": "boolean",
                    "default": False,
                    "description": "Also require a CPU limit on every container.",
                }
            },
        ),
        resource_policy(
            "job-size-within-budget",
            "A training job uses at most the configured number of nodes and GPUs.",
            lambda obj, config: guardrails.job_within_budget(
                obj, int(config["maxNodes"]), int(config["maxGpus"])
            ),
            {
                "maxNodes": {
                    "type": "integer",
                    "minimum": 1,
                    "default": 16,
                    "description": "Most pods (nodes) one training job may run.",
                },
                "maxGpus": {
                    "type": "integer",
                    "minimum": 0,
                    "default": 64,
                    "description": "Most GPUs one training job may use, all its pods together.",
                },
            },
        ),
    ]
