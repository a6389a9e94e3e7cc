"""The stack's typed settings: one field per project config key, validated once.

Every field carries its config key (the alias), its default and its description; `Pulumi.yaml`'s
`config:` schema is generated from this model (`python -m infra.program.schema`), so the two cannot drift.
The keys stay flat (`jobNodes`, not `job.nodes`); the fields are written in one module per concern,
each a `SettingsGroup` with its own value rules, and `Settings` is all of them together.
Cross-field rules live in `infra.program.checks`.
"""

from __future__ import annotations

from infra.program.settings.base import (
    DEFAULT_MASTER_PORT,
    K8S_VERSIONS,
    OPERATOR_INIT_IMAGE,
    PROJECT,
    PROJECT_ROOT,
    SECRET_KEYS,
    TRAINER_MASTER_PORT,
    check_pinned_image,
    parse_quantity,
)
from infra.program.settings.cluster import ClusterSettings, NamespaceBudgetSettings
from infra.program.settings.interconnect import JobInterconnectSettings
from infra.program.settings.job import JobOutputSettings, JobSettings
from infra.program.settings.lifecycle import JobLifecycleSettings
from infra.program.settings.network import NetworkSettings, RendezvousSettings
from infra.program.settings.operators import (
    SMOKE_NAMESPACE,
    OperatorSettings,
    SmokeCheckSettings,
    TrainerV2Settings,
)
from infra.program.settings.pods import JobPlacementSettings, JobResourceSettings, JobUserSettings
from infra.program.settings.prerequisites import PrerequisitesSettings
from infra.program.settings.queue import QueueSettings
from infra.program.settings.s3 import S3Settings
from infra.program.settings.seed import SeedSettings
from infra.program.settings.serving import KServeSettings, ServingSettings
from infra.program.settings.storage import StorageSettings
from infra.program.settings.tenancy import TenancySettings
from infra.program.settings.tracking import TrackingSettings

__all__ = [
    "SMOKE_NAMESPACE",
    "DEFAULT_MASTER_PORT",
    "K8S_VERSIONS",
    "OPERATOR_INIT_IMAGE",
    "PROJECT",
    "PROJECT_ROOT",
    "SECRET_KEYS",
    "TRAINER_MASTER_PORT",
    "Settings",
    "check_pinned_image",
    "config_key",
    "parse_quantity",
]


# pydantic collects fields from the bases in reverse order (the last base's come first), and the
# order is the order of Pulumi.yaml's `config:` block and of validation (the first bad key is the
# one reported): the groups are listed last key first, so that ClusterSettings' keys lead.
class Settings(
    TenancySettings,
    PrerequisitesSettings,
    KServeSettings,
    ServingSettings,
    JobUserSettings,
    TrackingSettings,
    NetworkSettings,
    RendezvousSettings,
    QueueSettings,
    JobLifecycleSettings,
    JobInterconnectSettings,
    JobPlacementSettings,
    JobResourceSettings,
    JobOutputSettings,
    SeedSettings,
    JobSettings,
    TrainerV2Settings,
    SmokeCheckSettings,
    OperatorSettings,
    S3Settings,
    StorageSettings,
    NamespaceBudgetSettings,
    ClusterSettings,
):
    """Everything one stack needs; built once from stack config by
    `infra.program.common.config.load_settings`."""

    @property
    def smoke_checks(self) -> tuple[bool, bool]:
        """(PyTorchJob check, TrainJob check): on where the stack installs (or patches) that operator and
        the key is on."""
        on = self.operator_smoke_check and self.stack_role in ("all", "platform")
        return on and (self.operator_install or self.operator_patch_existing), on and self.trainer_install

    @property
    def network_check(self) -> bool:
        """Whether the stack proves NetworkPolicy enforcement (networkPolicySmokeCheck, platform or 'all')."""
        return self.network_policy_smoke_check and self.stack_role in ("all", "platform")

    @property
    def seeds_data(self) -> bool:
        """Whether the stack renders the seed Job: the trainer reads the data PVC and a source is set."""
        return self.job_data_source == "pvc" and self.seed_source != "none"


def config_key(field: str) -> str:
    """The full config key (`ddp-mnist:jobNodes`) of a model field name."""
    alias = Settings.model_fields[field].alias or field
    return f"{PROJECT}:{alias}"
