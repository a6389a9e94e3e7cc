"""Settings: the ReadWriteMany storage (StorageClass presets) and the two PVCs."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from infra.program.settings.base import SettingsGroup, dns_subdomain, key, quantity


class StorageSettings(SettingsGroup):
    """The RWX backend, its StorageClass, and the data and checkpoint volumes."""

    storage_provider: Literal["nfs-csi", "gke-filestore", "azure-files", "aws-efs", "existing"] = key(
        "storageProvider",
        "nfs-csi",
        "ReadWriteMany backend: a StorageClass preset to create, or 'existing' for storageClassName as is.",
    )
    storage_class_name: str = key(
        "storageClassName",
        "ddp-mnist-rwx",
        "Name of the StorageClass to create, or of the existing one to use.",
    )
    data_storage_class_name: str = key(
        "dataStorageClassName",
        "",
        "With storageProvider existing: the existing StorageClass of the data claim (a platform stack's "
        "<storageClassName>-data, platformStorageClasses); empty uses storageClassName for both claims.",
    )
    storage_volume_binding_mode: Literal["Immediate", "WaitForFirstConsumer"] = key(
        "storageVolumeBindingMode",
        "Immediate",
        "With storageProvider existing: the volumeBindingMode of the existing classes. WaitForFirstConsumer "
        "(a cloud file store's) runs the seed Job on the job's nodes, so the data volume is created in "
        "their zone. A job stack using its platform stack's classes (platformStack, "
        "platformStorageClasses) takes it from there.",
    )
    storage_reclaim_policy: Literal["Retain", "Delete"] = key(
        "storageReclaimPolicy",
        "Retain",
        "reclaimPolicy of the created StorageClass storageClassName, the checkpoint claim's: Retain keeps "
        "the checkpoints' storage when its claim is deleted.",
    )
    data_reclaim_policy: Literal["Delete", "Retain"] = key(
        "dataReclaimPolicy",
        "Delete",
        "reclaimPolicy of the data claim's StorageClass, created as <storageClassName>-data: the data is "
        "re-seedable, so Delete frees its storage (a Filestore instance, an Azure share, an EFS access "
        "point) once a destroy deletes the claim. With storageProvider existing both claims use "
        "storageClassName and its own reclaimPolicy.",
    )
    nfs_server: str = key("nfsServer", "", "NFS server address (storageProvider nfs-csi).")
    nfs_share: str = key("nfsShare", "/", "Exported NFS path (storageProvider nfs-csi).")
    nfs_mount_options: list[str] = key(
        "nfsMountOptions", ["nfsvers=4.1"], "NFS mount options (storageProvider nfs-csi)."
    )
    filestore_tier: Literal["standard", "premium", "zonal", "enterprise"] = key(
        "filestoreTier", "standard", "GKE Filestore tier (storageProvider gke-filestore)."
    )
    filestore_network: str = key(
        "filestoreNetwork",
        "default",
        "VPC network of the Filestore instances (storageProvider gke-filestore).",
    )
    filestore_connect_mode: Literal["DIRECT_PEERING", "PRIVATE_SERVICE_ACCESS"] = key(
        "filestoreConnectMode",
        "DIRECT_PEERING",
        "How Filestore instances join filestoreNetwork (the driver's connect-mode): DIRECT_PEERING, or "
        "PRIVATE_SERVICE_ACCESS, which a Shared VPC needs (storageProvider gke-filestore).",
    )
    filestore_reserved_ip_range: str = key(
        "filestoreReservedIpRange",
        "",
        "Addresses of the Filestore instances (storageProvider gke-filestore): with PRIVATE_SERVICE_ACCESS "
        "the name of an allocated range (the driver refuses a CIDR there), with DIRECT_PEERING a CIDR "
        "the driver picks each instance's block from; empty lets Google choose.",
    )
    azure_files_sku: Literal["Premium_LRS", "Premium_ZRS", "Standard_LRS", "Standard_ZRS", "Standard_GRS"] = (
        key(
            "azureFilesSkuName",
            "Premium_LRS",
            "Azure Files SKU (storageProvider azure-files); NFS needs Premium.",
        )
    )
    azure_files_protocol: Literal["nfs", "smb"] = key(
        "azureFilesProtocol", "nfs", "Azure Files protocol (storageProvider azure-files)."
    )
    efs_file_system_id: str = key(
        "efsFileSystemId", "", "EFS file system id, fs-... (storageProvider aws-efs)."
    )
    data_volume_size: str = key("dataVolumeSize", "10Gi", "Size of the training-data PVC (a quantity).")
    checkpoint_volume_size: str = key(
        "checkpointVolumeSize", "20Gi", "Size of the checkpoint/model PVC (a quantity)."
    )
    checkpoint_volume_retain: bool = key(
        "checkpointVolumeRetain",
        True,
        "Keep the checkpoint PVC, and the namespace it lives in when the stack creates it, in the "
        "cluster when the stack is destroyed (retainOnDelete).",
    )
    reattach_retained: bool = key(
        "reattachRetained",
        False,
        "Adopt the namespace and checkpoint PVC an earlier destroy of this stack left behind "
        "(checkpointVolumeRetain) instead of creating them (Pulumi import).",
    )

    @field_validator("storage_class_name")
    @classmethod
    def _storage_class_dns_subdomain(cls, value: str) -> str:
        return dns_subdomain(value)

    @field_validator("data_storage_class_name")
    @classmethod
    def _data_class_dns_subdomain(cls, value: str) -> str:
        return value and dns_subdomain(value)

    @field_validator("data_volume_size", "checkpoint_volume_size")
    @classmethod
    def _volume_quantity(cls, value: str) -> str:
        return quantity(value)
