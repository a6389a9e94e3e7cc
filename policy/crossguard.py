"""The guardrails as Pulumi CrossGuard policies: thin adapters from the engine's resources to `guardrails`.

Building the policies needs `pulumi_policy` but no engine; only `PolicyPack(...)` in `__main__.py`
serves them to one. The Pulumi CLI runs this directory as a program, so sibling modules are imported
by their plain names.

What is not checked. `excludeNamespaces` lets through only what the platform itself installs there: a
resource in one of those namespaces is skipped when its URN names one of `platformComponents` among its
parents, i.e. it comes from an upstream manifest the stack applies (a kustomize Directory, a YAML
ConfigFile or ConfigGroup, a Helm Chart: the training operator's, Trainer v2's and JobSet's, KServe's,
csi-driver-nfs's) or is the NVIDIA device plugin this bundle's platform stack runs in kube-system. A
stack's own workloads are checked wherever they are: a stack whose namespace is `kubeflow` gets every
rule, as in any other namespace. (The URN is the program's to choose, so this keeps honest stacks in
the checks; it cannot stop a program written to evade them.) Those components themselves are no
Kubernetes objects and get no rule. Stacks in `exemptStacks` skip the policies that declare it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import guardrails
from conversions import LastResult
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
# Components whose children are whole Kubernetes objects from manifests this platform does not author;
# the components themselves are no objects.
MANIFEST_COMPONENTS = (
    "kubernetes:helm.sh/v3:Chart",
    "kubernetes:helm.sh/v4:Chart",
    "kubernetes:kustomize:Directory",
    "kubernetes:kustomize/v2:Directory",
    "kubernetes:yaml:ConfigFile",
    "kubernetes:yaml:ConfigGroup",
    "kubernetes:yaml/v2:ConfigFile",
    "kubernetes:yaml/v2:ConfigGroup",
)
DEVICE_PLUGIN = "ddp-mnist:platform:NvidiaDevicePlugin"  # infra/program/platform/device_plugin.py
# Every policy but shared-claims-read-write-many skips what the platform installs in these namespaces:
# the Kubeflow training operator's (kubeflow), Kubeflow Trainer v2's and JobSet's (kubeflow-system),
# KServe's (kserve) and csi-driver-nfs's (kube-system, from its chart, a prerequisites stack's) own
# workloads come from their upstream manifests, which this platform does not author (set [] to check them
# too). KServe v0.20.0's release manifest (infra/manifests/kserve) alone has 3 violations there (a
# DaemonSet that is not restricted, a container without requests and limits, a ClusterStorageContainer
# whose container the pack does not read), Trainer v2's overlay 1 more (its controller sets no requests
# and limits; the training operator's Deployment is brought to "restricted" with requests and a limit by
# the platform's transform); the goldens of the platform stacks show those objects.
# The device plugin needs a hostPath and root (Pod Security "restricted" forbids both; kube-system is
# exempt from it on managed clusters).
EXCLUSIONS: dict[str, dict[str, Any]] = {
    "excludeNamespaces": {
        "type": "array",
        "items": {"type": "string"},
        "default": ["kubeflow", "kubeflow-system", "kserve", "kube-system"],
        "description": "Namespaces whose platform-installed objects (see platformComponents) this policy "
        "does not check; anything else in them is checked as anywhere.",
    },
    "platformComponents": {
        "type": "array",
        "items": {"type": "string"},
        "default": [*MANIFEST_COMPONENTS, DEVICE_PLUGIN],
        "description": "Component types (type tokens) whose resources, when in excludeNamespaces, are the "
        "platform's own installs and not checked: upstream manifests and the NVIDIA device plugin.",
    },
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
# Where the shipped stacks' images come from: the trainer's releases, the device plugin's, MinIO's, the
# smoke checks' Alpine, and the prerequisites' NFS server image (one repository, not its whole owner).
ALLOWED_REGISTRIES = [
    "ghcr.io/ddp-mnist/",
    "nvcr.io/nvidia/",
    "quay.io/minio/",
    "docker.io/library/alpine",
    "docker.io/itsthenetwork/nfs-server-alpine",
]


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


# The pack's analyzer hands every policy of one request the same properties object
# (conversions.share_conversions), so the plain copy is made once per request, not once per policy. The
# rules read the object and never write to it (tests/policy/test_conversions.py checks a job's copy is
# unchanged after every policy has read it).
plain_once = LastResult(plain)


def k8s_object(resource_type: str, props: Mapping[str, Any]) -> dict[str, Any] | None:
    """A Kubernetes resource's properties as the object the API server receives; None for others.

    `kubernetes:batch/v1:Job` -> apiVersion batch/v1, kind Job (`core/v1` is plain `v1`), when the
    properties do not carry them already. A `*Patch` resource (a server-side apply of some fields of an
    object the stack does not own, e.g. operatorPatchExisting's) is no whole object, and a component
    that applies manifests (`MANIFEST_COMPONENTS`) no object at all: None.
    """
    parts = resource_type.split(":")
    if len(parts) != 3 or parts[0] != "kubernetes" or "/" not in parts[1] or parts[2].endswith("Patch"):
        return None
    if resource_type in MANIFEST_COMPONENTS:
        return None
    obj: dict[str, Any] = plain_once(props)
    api_version = parts[1][len("core/") :] if parts[1].startswith("core/") else parts[1]
    obj.setdefault("apiVersion", api_version)
    obj.setdefault("kind", parts[2])
    return obj


def stack_of(urn: str) -> str:
    """The stack a resource belongs to: `urn:pulumi:<stack>::<project>::<type>::<name>`."""
    return urn.split("::", 1)[0].rsplit(":", 1)[-1]


def parent_types(urn: str) -> list[str]:
    """The types of a resource's parents, outermost first: the URN's qualified type is
    `<parent type>$...$<type>`."""
    parts = urn.split("::")
    return parts[2].split("$")[:-1] if len(parts) >= 4 else []


def skipped(obj: guardrails.Obj, urn: str, config: Mapping[str, Any]) -> bool:
    """Whether the policy with this config leaves the object alone: the platform's own install in an
    excluded namespace, or a resource of an exempt stack."""
    namespace = (obj.get("metadata") or {}).get("namespace")
    platform = set(config["platformComponents"]) & set(parent_types(urn))
    if namespace in config["excludeNamespaces"] and platform:
        return True
    return stack_of(urn) in config.get("exemptStacks", ())


def resource_policy(
    name: str,
    description: str,
    rule: Rule,
    properties: dict[str, dict[str, Any]] | None = None,
    enforcement_level: EnforcementLevel = EnforcementLevel.MANDATORY,
) -> ResourceValidationPolicy:
    """A policy (mandatory unless told) that reports each message `rule` returns for a Kubernetes resource.

    `properties` is the policy's config schema (JSON schema per key, with a default each); `rule`
    receives the config with the defaults filled in, whether or not the engine filled them. It skips
    the platform's own installs in `excludeNamespaces`, and, when its schema has `exemptStacks`, the
    resources of those stacks.
    """
    schema = {**EXCLUSIONS, **(properties or {})}
    defaults = {key: prop["default"] for key, prop in schema.items()}

    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        obj = k8s_object(args.resource_type, args.props)
        if obj is None:
            return
        # The stack the resource belongs to, for the rules whose settings name stacks.
        config = {**defaults, **dict(args.get_config() or {}), "stack": stack_of(args.urn)}
        if skipped(obj, args.urn, config):
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


BUDGET: dict[str, dict[str, Any]] = {
    **EXCLUSIONS,
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
}
# The kinds whose size the budget counts (converting only these keeps a preview's unknown values in
# other resources from stopping the policy).
BUDGETED_KINDS = ("PyTorchJob", "Job", "JobSet", "TrainJob", "TrainingRuntime", "ClusterTrainingRuntime")


def _job_budget(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """Every training job of the stack within the budget; a TrainJob counted with its runtime when the
    stack has it (a stack policy: the runtime is another resource)."""
    config = {**{key: prop["default"] for key, prop in BUDGET.items()}, **dict(args.get_config() or {})}
    found = [
        (r.urn, k8s_object(r.resource_type, r.props))
        for r in args.resources
        if r.resource_type.rsplit(":", 1)[-1] in BUDGETED_KINDS
    ]
    objects = [(urn, obj) for urn, obj in found if obj is not None]
    stack = [obj for _, obj in objects]
    for urn, obj in objects:
        if skipped(obj, urn, config):
            continue
        for message in guardrails.job_within_budget(
            obj, int(config["maxNodes"]), int(config["maxGpus"]), stack
        ):
            report_violation(message, urn)


def policies() -> list[Policy]:
    """Every guardrail: mandatory ones (lower one with the pack's config if needed), and advisory
    `images-by-digest`, which warns without stopping an update.

    One entry per policy, in the pack's order: a flat list, clearer whole than split."""
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
            lambda obj, config: guardrails.pod_security_restricted(
                obj, config["privilegedNamespaces"], config["stack"]
            ),
            {
                "privilegedNamespaces": {
                    "type": "array",
                    "items": {"type": "string", "pattern": "^[^/]+/[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
                    "default": ["dev-prereqs/nfs-system"],
                    "description": "The stack/namespace pairs whose pods this policy lets run privileged: "
                    "dev-prereqs/nfs-system holds that prerequisites stack's in-kernel NFS server, which "
                    "must be (the namespace enforces Pod Security 'privileged' and its annotation says "
                    "why); a namespace of that name in another stack is checked as anywhere, and the "
                    "other policies still check it.",
                }
            },
        ),
        resource_policy(
            "no-automounted-token",
            "Pods set automountServiceAccountToken: false: a pod that never calls the API server holds "
            "no credential for it.",
            lambda obj, config: guardrails.no_automounted_token(obj, config["tokenNamespaces"]),
            {
                "tokenNamespaces": {
                    "type": "array",
                    "items": {"type": "string"},
                    "default": [],
                    "description": "Namespaces whose pods may mount a service-account token (pods that "
                    "call the API server).",
                }
            },
        ),
        resource_policy(
            "images-from-allowed-registries",
            "Container images come from allowedRegistries: an entry ending in / allows what is under it, "
            "any other one repository (local stacks exempt).",
            lambda obj, config: guardrails.images_from_allowed_registries(obj, config["allowedRegistries"]),
            {
                **EXEMPT_STACKS,
                "allowedRegistries": {
                    "type": "array",
                    "items": {"type": "string"},
                    "default": ALLOWED_REGISTRIES,
                    "description": "Where images may come from, registry host included (docker.io for "
                    "Docker Hub, whose official images are docker.io/library/): the bundle's own by "
                    "default; a platform with a mirror lists the mirror alone.",
                },
            },
        ),
        resource_policy(
            "workloads-understood",
            "Every pod spec and container is one the pack reads: a kind it does not understand is refused, "
            "not passed.",
            lambda obj, _: guardrails.workloads_understood(obj),
        ),
        resource_policy(
            "no-secret-literals-in-env",
            "Secret material reaches containers through Secrets, never as a literal env value, command or "
            "argument.",
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
        StackValidationPolicy(
            name="job-size-within-budget",
            description="A training job, or a TrainingRuntime's defaults, uses at most the configured number "
            "of nodes and GPUs; a TrainJob counts what it leaves to its runtime from that runtime.",
            validate=_job_budget,
            enforcement_level=EnforcementLevel.MANDATORY,
            config_schema=PolicyConfigSchema(properties=BUDGET),
        ),
    ]
