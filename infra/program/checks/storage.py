"""Cross-field rules of the storage backend and its volumes."""

from __future__ import annotations

import re
from collections.abc import Iterator

from infra.program.checks.errors import ConfigError
from infra.program.settings import Settings, parse_quantity

# The size range of one Filestore instance per tier, as the pinned driver has it (kubernetes-sigs/
# gcp-filestore-csi-driver v1.13.1 `pkg/csi_driver/controller.go`: tierToCapacityRange; zonal from its
# small range's minimum to its large range's maximum). Before v1.10.0 the standard tier's minimum was 1Ti.
FILESTORE_SIZES = {
    "standard": ("100Gi", "63.9Ti"),
    "premium": ("2.5Ti", "63.9Ti"),
    "enterprise": ("1Ti", "10Ti"),
    "zonal": ("1Ti", "100Ti"),
}


def storage(s: Settings, _: bool) -> Iterator[ConfigError]:
    if s.stack_role == "prerequisites" or (s.stack_role == "platform" and not s.platform_storage_classes):
        return  # a prerequisites stack's rules are its own; a platform stack may create classes alone
    provider = s.storage_provider
    if provider == "nfs-csi" and not s.nfs_server:
        yield ConfigError(
            "nfsServer", s.nfs_server, "the NFS server's address when storageProvider is nfs-csi"
        )
    if provider == "nfs-csi" and not s.nfs_share.startswith("/"):
        yield ConfigError("nfsShare", s.nfs_share, "an absolute exported path such as /exports/ddp")
    if provider == "aws-efs" and not re.fullmatch(r"fs-[0-9a-f]{8,17}", s.efs_file_system_id):
        yield ConfigError(
            "efsFileSystemId",
            s.efs_file_system_id,
            "an EFS id such as fs-0123456789abcdef0 when storageProvider is aws-efs",
        )
    if (
        provider == "azure-files"
        and s.azure_files_protocol == "nfs"
        and not s.azure_files_sku.startswith("Premium")
    ):
        yield ConfigError(
            "azureFilesSkuName", s.azure_files_sku, "Premium_LRS or Premium_ZRS with azureFilesProtocol nfs"
        )
    if provider == "gke-filestore":
        low, high = FILESTORE_SIZES[s.filestore_tier]
        claims = [("dataVolumeSize", s.data_volume_size), ("checkpointVolumeSize", s.checkpoint_volume_size)]
        for name, size in claims if s.stack_role != "platform" else []:  # a platform stack makes none
            if not parse_quantity(low) <= parse_quantity(size) <= parse_quantity(high):
                yield ConfigError(
                    name,
                    size,
                    f"from {low} to {high} for filestoreTier {s.filestore_tier} (the Filestore driver rounds "
                    f"a smaller claim up to {low}, billed as such, and refuses a larger one)",
                )
        reserved = s.filestore_reserved_ip_range
        cidr = bool(re.fullmatch(r"\d{1,3}(\.\d{1,3}){3}/\d{1,2}", reserved))
        if reserved and s.filestore_connect_mode == "PRIVATE_SERVICE_ACCESS" and cidr:
            yield ConfigError(
                "filestoreReservedIpRange",
                reserved,
                "the name of an allocated address range with filestoreConnectMode PRIVATE_SERVICE_ACCESS "
                "(the driver refuses a CIDR there)",
            )
        if reserved and s.filestore_connect_mode == "DIRECT_PEERING" and not cidr:
            yield ConfigError(
                "filestoreReservedIpRange",
                reserved,
                "a CIDR such as 10.10.0.0/24 with filestoreConnectMode DIRECT_PEERING (a named range needs "
                "PRIVATE_SERVICE_ACCESS)",
            )
