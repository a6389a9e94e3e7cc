"""Cross-field rules of Kubeflow Trainer v2 and of jobKind trainjob."""

from __future__ import annotations

from collections.abc import Iterator

from infra.program.checks.errors import ConfigError
from infra.program.checks.operators import unpinned_source, unvendored_version
from infra.program.common.vendored import TRAINER
from infra.program.settings import Settings


def trainer_install(s: Settings, _: bool) -> Iterator[ConfigError]:
    """Kubeflow Trainer v2 is installed like the operator: by the platform stack, or by an 'all' stack;
    a job stack assumes it present, and a TrainJob needs it installed or declared present."""
    if s.stack_role == "job" and s.trainer_install:
        yield ConfigError(
            "trainerInstall",
            True,
            "false when stackRole is job: the cluster's platform stack installs Kubeflow Trainer v2 and owns "
            "its CRDs (set trainerPresent true here; stackRole all installs both in one stack)",
        )
    if s.operator_install and s.trainer_install and not s.allow_both_operators:
        yield ConfigError(
            "allowBothOperators",
            False,
            "true to install both the training operator v1 (operatorInstall) and Kubeflow Trainer v2 "
            "(trainerInstall) in one stack; or set operatorInstall false (jobKind trainjob needs only "
            "Trainer v2)",
        )
    uses_trainer = s.stack_role != "platform" and s.job_kind == "trainjob"
    if uses_trainer and not (s.trainer_install or s.trainer_present):
        yield ConfigError(
            "trainerPresent",
            False,
            "true when jobKind is trainjob and trainerInstall is false: declare that Kubeflow Trainer v2 "
            "(with JobSet) is in the cluster, e.g. from the platform stack, or set trainerInstall true",
        )
    if s.trainer_progress and not (s.trainer_install or s.trainer_present):
        yield ConfigError(
            "trainerProgress",
            True,
            "false unless this stack installs Kubeflow Trainer v2 (trainerInstall) or declares it present "
            "(trainerPresent): the progress report is a feature of Trainer's controller",
        )


TRAINER_MIN_KUBERNETES = (1, 31)


def trainer_kubernetes_version(s: Settings, _: bool) -> Iterator[ConfigError]:
    """Kubeflow Trainer v2.3.0 supports Kubernetes >= 1.31 (kubeflow/trainer v2.3.0
    docs/operator-guides/installation.md, charts/kubeflow-trainer/README.md)."""
    minor = tuple(int(part) for part in s.kubernetes_version.split("."))
    if minor >= TRAINER_MIN_KUBERNETES:
        return
    for uses, why in (
        (s.trainer_install, "trainerInstall true"),
        (s.stack_role != "platform" and s.job_kind == "trainjob", "jobKind trainjob"),
    ):
        if uses:
            yield ConfigError(
                "kubernetesVersion",
                s.kubernetes_version,
                f"1.31 or later with {why}: Kubeflow Trainer v2 (v2.3.0) supports Kubernetes >= 1.31 "
                "only (use jobKind pytorchjob or indexed-job on older clusters)",
            )


def trainer_source(s: Settings, _: bool) -> Iterator[ConfigError]:
    yield from unpinned_source("trainerSource", s.trainer_source)
    if s.trainer_install:
        yield from unvendored_version(
            "trainerVersion", s.trainer_version, "trainerSource", s.trainer_source, TRAINER
        )


def trainjob_equivalents(s: Settings, _: bool) -> Iterator[ConfigError]:
    """What a TrainJob (Trainer v2.3.0) and its JobSet (v0.12.0) cannot express is refused, not dropped.

    The Pulumi CLI passes every key's default as if set, so a default value reads as "unset"."""
    if s.job_kind != "trainjob":
        return
    from infra.program.settings import TRAINER_MASTER_PORT

    if s.job_master_port != TRAINER_MASTER_PORT:
        yield ConfigError(
            "jobMasterPort",
            s.job_master_port,
            f"{TRAINER_MASTER_PORT} (or unset) with jobKind trainjob: Kubeflow Trainer's torch plugin "
            f"fixes the rendezvous port (PET_MASTER_PORT) at {TRAINER_MASTER_PORT}",
        )
    if s.job_restart_policy != "ExitCode":
        yield ConfigError(
            "jobRestartPolicy",
            s.job_restart_policy,
            "unset with jobKind trainjob: a TrainJob has no replica restart policy; its rule is the "
            "default's, ExitCode (codes 1-127 fail it at once, a failed node otherwise fails its Job and "
            "JobSet restarts every node, up to jobBackoffLimit times)",
        )
    if s.job_clean_pod_policy != "None":
        yield ConfigError(
            "jobCleanPodPolicy",
            s.job_clean_pod_policy,
            "unset with jobKind trainjob: a TrainJob keeps its pods until jobTtlSecondsAfterFinished "
            "deletes its JobSet",
        )
