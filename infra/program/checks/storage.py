"""Cross-field rules of the storage backend and its volumes."""

from __future__ import annotations

import re
from collections.abc import Iterator

from infra.program.checks.errors import ConfigError
from infra.program.settings import Settings, parse_quantity


def storage(s: Settings, _: bool) -> Iterator[ConfigError]:
    if s.stack_role in ("platform", "prerequisites"):
        return  # a platform stack creates no storage; a prerequisites stack's rules are its own
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
        for name, size in (
            ("dataVolumeSize", s.data_volume_size),
            ("checkpointVolumeSize", s.checkpoint_volume_size),
        ):
            if parse_quantity(size) < 2**40:
                yield ConfigError(name, size, "at least 1Ti: the smallest Filestore instance")
