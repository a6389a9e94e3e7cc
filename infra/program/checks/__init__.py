"""Cross-field rules over a validated `Settings`, each failing with the key it blames.

The rules are written in one module per concern; `CHECKS` lists them in the order they run, which
decides the error a config breaking several rules is reported with.
"""

from __future__ import annotations

from infra.program.checks import (
    budget,
    interconnect,
    job,
    operators,
    prerequisites,
    queue,
    s3,
    serving,
    storage,
    tenancy,
    tracking,
    trainer_v2,
)
from infra.program.checks.errors import Check, ConfigError
from infra.program.settings import Settings

__all__ = ["CHECKS", "Check", "ConfigError", "first_violation"]

CHECKS: tuple[Check, ...] = (
    job.gpus,
    job.batch,
    job.names,
    prerequisites.prerequisites,
    storage.storage,
    tenancy.data_storage_class,
    job.resources,
    s3.object_store,
    s3.existing_secret,
    s3.ca_bundle,
    tracking.tracking,
    operators.operator_source,
    job.scheduling,
    interconnect.interconnect,
    budget.namespace_budget,
    operators.operator_init_container,
    queue.kueue,
    job.exit_code_retries,
    operators.stack_role,
    operators.operator_patch,
    trainer_v2.trainer_install,
    trainer_v2.trainer_kubernetes_version,
    trainer_v2.trainer_source,
    trainer_v2.trainjob_equivalents,
    operators.smoke_namespace,
    serving.serving,
    tenancy.tenancy,
    s3.external_egress,
    job.image_digest,
)


def first_violation(settings: Settings, has_keys: bool) -> ConfigError | None:
    """The first broken cross-field rule, or None; `has_keys` says the S3 key pair was set."""
    for rule in CHECKS:
        for error in rule(settings, has_keys):
            return error
    return None
