"""What a platform stack installed, as one stack output, and how a job stack takes it.

A platform (or 'all') stack exports `platform`: the facts of what it installed: the training operator
(version, the init container image it gives PyTorchJob Workers, that its template meets Pod Security
'restricted'), Kubeflow Trainer v2 (version, and whether its progress report is on: trainerProgress),
KServe (version), and what the platform team declares of the cluster's Kueue
(`kueuePyTorchJobIntegration`). A job stack that names it (`platformStack`, a
Pulumi stack reference) reads that output instead of trusting its own declarations:

- each declaration the job stack leaves at its default is taken from the facts;
- a declaration it sets that the facts contradict stops the program with one line naming both stacks;
- so does a job that needs what the platform did not install (a PyTorchJob and no operator, a TrainJob
  and no Trainer, serveKind kserve and no KServe, a queued PyTorchJob without Kueue's integration,
  a queued TrainJob with a Trainer older than Kueue supports).

Without `platformStack` nothing here runs and the declarations work as written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from infra.program.checks import first_violation
from infra.program.settings import PROJECT, Settings
from infra.program.settings.tenancy import parse_priority_ceiling

OUTPUT = "platform"  # the stack output holding the facts
SCHEMA = 1
# Kueue's TrainJob integration needs Kubeflow Trainer >= v2.2 (kubernetes-sigs/kueue#14886: the
# integration reads TrainJob fields that Trainer added in v2.2).
# Kubernetes' own classes (2000000000 and 2000001000), above any a user may create (1000000000):
# a pod naming one outranks, and may preempt, every workload of the cluster.
SYSTEM_PRIORITY_CLASSES = ("system-cluster-critical", "system-node-critical")
KUEUE_TRAINJOB_MIN_TRAINER = (2, 2, 0)

# Job-stack declarations (settings fields) a platform's facts replace.
DECLARATIONS = (
    "operator_init_container_restricted",
    "operator_init_container_image",
    "trainer_present",
    "trainer_progress",
    "kserve_present",
    "kueue_pytorchjob_integration",
)


def config_key(name: str) -> str:
    """The config key of settings field `name`."""
    return str(Settings.model_fields[name].alias)


class PlatformMismatch(ValueError):
    """A job stack and its platform stack disagree; `str()` is the one line shown."""


def facts(settings: Settings) -> dict[str, Any] | None:
    """What this stack installs, as its `platform` output; None for a job stack (it installs none)."""
    if settings.stack_role == "job":
        return None
    operator = None
    if settings.operator_install or settings.operator_patch_existing:
        # The install and the patch of an existing operator (operator_patch.py) both give it the
        # restricted template (training_operator.py); a patched operator's version is its own.
        operator = {
            "version": settings.operator_version if settings.operator_install else "",
            "initContainerImage": settings.operator_init_container_image,
            "initContainerRestricted": True,
        }
        if settings.operator_patch_existing:
            operator["patched"] = f"{settings.operator_existing_namespace}/{settings.operator_existing_name}"
    return {
        "schema": SCHEMA,
        "project": PROJECT,
        "operator": operator,
        "trainer": _trainer(settings),
        "kserve": _part(settings.kserve_install, settings.kserve_present, settings.kserve_version),
        "kueue": {"pytorchjobIntegration": settings.kueue_pytorchjob_integration},
        "priorityClasses": sorted(settings.priority_class_values),
        # The namespaces it made for job stacks (createNamespace false there), with their levels, and
        # the StorageClasses it made for them.
        "teamNamespaces": settings.team_namespace_levels,
        # Per team namespace, the priorityClasses its pods may name (the others are refused there).
        "teamPriorityClasses": allowed_priority_classes(settings),
        "storageClasses": _storage_classes(settings),
    }


def _storage_classes(settings: Settings) -> dict[str, str]:
    """The StorageClasses a platform stack creates (platformStorageClasses), with their volumeBindingMode."""
    from infra.program.common.storage import binds_at_first_consumer, data_class_name

    if not settings.platform_storage_classes:
        return {}
    mode = "WaitForFirstConsumer" if binds_at_first_consumer(settings) else "Immediate"
    return {settings.storage_class_name: mode, data_class_name(settings): mode}


def _trainer(settings: Settings) -> dict[str, Any] | None:
    """Kubeflow Trainer v2 as `_part` says, and whether its TrainJobStatus gate is on (trainerProgress)."""
    part = _part(settings.trainer_install, settings.trainer_present, settings.trainer_version)
    return None if part is None else {**part, "progress": settings.trainer_progress}


def _part(installed: bool, present: bool, version: str) -> dict[str, str] | None:
    """A part the platform stack installs (at `version`), or declares present in the cluster (installed by
    someone else: its version unknown, ""), or neither (None)."""
    if installed:
        return {"version": version}
    return {"version": ""} if present else None


def assume_platform_provides(settings: Settings) -> Settings:
    """`settings` with each yes/no declaration the platform's facts will decide, and that this stack
    does not declare, assumed true: the rules that read them wait for the facts (`take`)."""
    undeclared = {
        name: True
        for name in DECLARATIONS
        if isinstance(getattr(settings, name), bool) and not settings.declares(name)
    }
    return settings.model_copy(update=undeclared)


def _version(tag: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", tag)[:3])


def _derived(settings: Settings, found: Mapping[str, Any]) -> dict[str, Any]:
    operator = found.get("operator")
    return {
        "operator_init_container_restricted": bool(operator and operator.get("initContainerRestricted")),
        "operator_init_container_image": (
            operator["initContainerImage"] if operator else settings.operator_init_container_image
        ),
        "trainer_present": found.get("trainer") is not None,
        "trainer_progress": bool((found.get("trainer") or {}).get("progress")),
        "kserve_present": found.get("kserve") is not None,
        "kueue_pytorchjob_integration": bool((found.get("kueue") or {}).get("pytorchjobIntegration")),
        **_team_facts(settings, found),
    }


def _team_facts(settings: Settings, found: Mapping[str, Any]) -> dict[str, Any]:
    """What a team namespace and the platform's StorageClasses decide for this job stack: the Pod
    Security level its namespace enforces, and how the classes it uses (storageProvider existing) bind."""
    taken: dict[str, Any] = {}
    level = (found.get("teamNamespaces") or {}).get(settings.namespace)
    if level is not None:
        taken["namespace_pod_security"] = level
    mode = (found.get("storageClasses") or {}).get(settings.storage_class_name)
    if settings.storage_provider == "existing" and mode is not None:
        taken["storage_volume_binding_mode"] = mode
    return taken


def _needs(settings: Settings, found: Mapping[str, Any]) -> str | None:
    """What the job needs that the platform did not install, as the end of the one line; or None."""
    kind = settings.job_kind
    trainer = found.get("trainer")
    if kind == "pytorchjob" and found.get("operator") is None:
        return "runs a PyTorchJob (jobKind pytorchjob), but {platform} installed no training operator"
    if kind == "trainjob" and trainer is None:
        return "runs a TrainJob (jobKind trainjob), but {platform} installed no Kubeflow Trainer v2"
    if settings.serve_kind == "kserve" and found.get("kserve") is None:
        return "serves with KServe (serveKind kserve), but {platform} installed no KServe"
    if settings.create_namespace and settings.namespace in (found.get("teamNamespaces") or {}):
        return (
            f"creates namespace {settings.namespace} (createNamespace true), but {{platform}} owns it "
            "(teamNamespaces): set createNamespace false to deploy into it"
        )
    wanted = settings.job_priority_class_name
    if wanted and wanted not in (found.get("priorityClasses") or []):
        created = ", ".join(found.get("priorityClasses") or []) or "none"
        return (
            f"sets jobPriorityClassName {wanted}, but {{platform}} creates no such PriorityClass (it "
            f"creates: {created}); the API server would refuse every pod of the job"
        )
    allowed = (found.get("teamPriorityClasses") or {}).get(settings.namespace)
    if wanted and allowed is not None and wanted not in allowed:
        return (
            f"sets jobPriorityClassName {wanted}, but {{platform}} refuses it in team namespace "
            f"{settings.namespace} (teamPriorityClasses; it allows: {', '.join(allowed) or 'none'})"
        )
    if not settings.job_network_policy and settings.namespace in (found.get("teamNamespaces") or {}):
        return (
            f"sets jobNetworkPolicy false, but {{platform}} isolates team namespace {settings.namespace} "
            "with a default-deny of its own: the job's pods would reach nothing; set jobNetworkPolicy true"
        )
    queued = bool(settings.job_queue_name)
    if queued and kind == "pytorchjob" and not _derived(settings, found)["kueue_pytorchjob_integration"]:
        return (
            "queues a PyTorchJob (jobQueueName), but {platform} declares kueuePyTorchJobIntegration "
            "false: Kueue would let the job run outside the queue"
        )
    if (
        queued
        and kind == "trainjob"
        and trainer
        and trainer["version"]  # "" for a Trainer the platform declares present: its version unknown
        and _version(trainer["version"]) < KUEUE_TRAINJOB_MIN_TRAINER
    ):
        least = "v" + ".".join(map(str, KUEUE_TRAINJOB_MIN_TRAINER))
        return (
            f"queues a TrainJob (jobQueueName), but {{platform}} installed Kubeflow Trainer "
            f"{trainer['version']}: Kueue manages TrainJobs from Trainer {least}"
        )
    return None


def take(settings: Settings, found: Any, stack: str, has_keys: bool) -> Settings:
    """`settings` with the declarations of `DECLARATIONS` taken from the platform's facts `found` (its
    `platform` output); raises PlatformMismatch (one line naming this `stack` and the platform stack)."""
    reference = settings.platform_stack
    platform = f"platform stack {reference}"
    if not isinstance(found, Mapping) or found.get("schema") != SCHEMA:
        raise PlatformMismatch(
            f"stack {stack}: platformStack {reference} exports no '{OUTPUT}' output of schema {SCHEMA} "
            f"(a {PROJECT} stack with stackRole platform or all, after its `pulumi up`)"
        )
    derived = _derived(settings, found)
    for name, value in derived.items():
        mine = getattr(settings, name)
        if settings.declares(name) and mine != value:
            key = config_key(name)
            raise PlatformMismatch(
                f"stack {stack} declares {key}={_show(mine)}, but its {platform} says {_show(value)} "
                f"(remove {key} from stack {stack}: it comes from the platform stack)"
            )
    need = _needs(settings, found)
    if need:
        raise PlatformMismatch(f"stack {stack} " + need.format(platform=platform))
    merged = settings.model_copy(update=derived)
    violation = first_violation(merged, has_keys)
    if violation:
        raise PlatformMismatch(f"stack {stack} with the facts of its {platform}: {violation}")
    return merged


def _show(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def refused_priority_classes(settings: Settings, namespace: str) -> list[str]:
    """The PriorityClasses no pod of `namespace` may name: the system classes, and this stack's classes
    valued above the one teamPriorityClasses gives the namespace."""
    values = settings.priority_class_values
    ceilings = dict(map(parse_priority_ceiling, settings.team_priority_classes))
    above: list[str] = []
    if namespace in ceilings and ceilings[namespace] in values:
        ceiling = values[ceilings[namespace]]
        above = sorted(name for name, value in values.items() if value > ceiling)
    return [*SYSTEM_PRIORITY_CLASSES, *above]


def allowed_priority_classes(settings: Settings) -> dict[str, list[str]]:
    """Per team namespace, the stack's PriorityClasses its pods may name (the `platform` output)."""
    return {
        namespace: sorted(
            set(settings.priority_class_values) - set(refused_priority_classes(settings, namespace))
        )
        for namespace in settings.team_namespace_levels
    }
