"""ReadWriteMany storage: a StorageClass preset per cloud (or an existing class) and the two PVCs.

Re-attaching a retained checkpoint claim (`reattachRetained`) imports it. Since pulumi 3.174 an import
is followed by an ordinary diff (`pkg/resource/deploy/step_generator.go`: the import step, then
continueStepsFromImport), and the imported inputs are the live object's (`provider/pkg/provider/provider.go`
Read, readFromCluster: every input property of the live object), so they carry what the API server
and the PV binder filled in: `spec.volumeName` and `spec.volumeMode`. pulumi-kubernetes replaces a
PVC when `.spec.accessModes`, `.spec.selector`, `.spec.storageClassName` or `.spec.volumeName` differ
(`provider/pkg/provider/diff.go`, forceNew), and the engine refuses to replace a resource whose goal
still names an import ID ("previously-imported resources that still specify an ID may not be
replaced"). The claims therefore ignore `BINDER_FIELDS`, which the program never sets: the import is
followed by an in-place update (metadata) at most. `storageClassName` is not ignored: the program
always sets it, and a kept claim of another class is refused by the engine rather than silently kept.
(Read at pulumi v3.259.0 and pulumi-kubernetes v4.32.0; see docs/ENGINE.md.)
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.program.common.meta import labels
from infra.program.settings import PROJECT, Settings

_PROVISIONERS = {
    "nfs-csi": "nfs.csi.k8s.io",
    "gke-filestore": "filestore.csi.storage.gke.io",
    "azure-files": "file.csi.azure.com",
    "aws-efs": "efs.csi.aws.com",
}
# Azure Files over NFS: the mount options of the driver's own NFS StorageClass (kubernetes-sigs/
# azurefile-csi-driver v1.35.7 `deploy/example/storageclass-azurefile-nfs.yaml`): 4 TCP connections,
# a new source port on reconnect, attributes cached 30 s.
AZURE_FILES_NFS_MOUNT_OPTIONS = ("nconnect=4", "noresvport", "actimeo=30")
# Filled in by the API server (volumeMode, defaulted) and the PV binder (volumeName), never by us.
BINDER_FIELDS = ["spec.volumeName", "spec.volumeMode"]


def filestore_addressing(settings: Settings) -> dict[str, str]:
    """The Filestore driver's connect-mode and reserved-address parameters (gcp-filestore-csi-driver
    v1.13.1 `pkg/csi_driver/controller.go`: `connect-mode` DIRECT_PEERING by default; with
    PRIVATE_SERVICE_ACCESS `reserved-ip-range`, a named allocated range; with DIRECT_PEERING
    `reserved-ipv4-cidr`, the CIDR it picks each instance's block from); none at their defaults."""
    found: dict[str, str] = {}
    private = settings.filestore_connect_mode == "PRIVATE_SERVICE_ACCESS"
    if private:
        found["connect-mode"] = settings.filestore_connect_mode
    if settings.filestore_reserved_ip_range:
        found["reserved-ip-range" if private else "reserved-ipv4-cidr"] = settings.filestore_reserved_ip_range
    return found


def binds_at_first_consumer(settings: Settings) -> bool:
    """Whether the claims' classes bind WaitForFirstConsumer (every cloud preset: the volume is created
    in the zone of the node its first pod runs on), not Immediate (nfs-csi, an existing server); for
    existing classes, as storageVolumeBindingMode declares."""
    if settings.storage_provider == "existing":
        return settings.storage_volume_binding_mode == "WaitForFirstConsumer"
    return settings.storage_provider != "nfs-csi"


def data_class_name(settings: Settings) -> str:
    """The data claim's StorageClass: its own (`<storageClassName>-data`, reclaimPolicy
    dataReclaimPolicy) for a created preset; for an existing class, dataStorageClassName, else
    storageClassName."""
    if settings.storage_provider == "existing":
        return settings.data_storage_class_name or settings.storage_class_name
    return f"{settings.storage_class_name}-data"


def storage_class_args(settings: Settings, data: bool = False) -> dict[str, Any] | None:
    """The StorageClass fields of the chosen preset (the data claim's with `data`), or None for an
    existing class. The two differ in name and reclaimPolicy alone."""
    provider = settings.storage_provider
    if provider == "existing":
        return None
    uid = str(settings.job_run_as_user)
    presets: dict[str, dict[str, str]] = {
        "nfs-csi": {"server": settings.nfs_server, "share": settings.nfs_share},
        "gke-filestore": {
            "tier": settings.filestore_tier,
            "network": settings.filestore_network,
            **filestore_addressing(settings),
        },
        "azure-files": {"skuName": settings.azure_files_sku, "protocol": settings.azure_files_protocol},
        # Access points give the non-root trainer its own uid/gid on the shared file system.
        "aws-efs": {
            "provisioningMode": "efs-ap",
            "fileSystemId": settings.efs_file_system_id,
            "directoryPerms": "770",
            "uid": uid,
            "gid": uid,
            "basePath": f"/{PROJECT}",
            "subPathPattern": "${.PVC.namespace}/${.PVC.name}",
            "ensureUniqueDirectory": "false",
        },
    }
    parameters = presets[provider]
    mount_options = {
        "nfs-csi": settings.nfs_mount_options,
        "azure-files": (
            list(AZURE_FILES_NFS_MOUNT_OPTIONS)
            if settings.azure_files_protocol == "nfs"
            else [f"uid={uid}", f"gid={uid}", "dir_mode=0770", "file_mode=0660", "mfsymlinks"]
        ),
    }.get(provider, [])
    return dict(
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=data_class_name(settings) if data else settings.storage_class_name,
            labels=labels(settings, "storage"),
        ),
        provisioner=_PROVISIONERS[provider],
        parameters=parameters,
        mount_options=mount_options or None,
        reclaim_policy=settings.data_reclaim_policy if data else settings.storage_reclaim_policy,
        volume_binding_mode="WaitForFirstConsumer" if binds_at_first_consumer(settings) else "Immediate",
        allow_volume_expansion=provider != "aws-efs",
    )


class TrainingStorage(pulumi.ComponentResource):
    """The data PVC and the checkpoint/model PVC, both ReadWriteMany, and their StorageClasses: one each
    for a created preset, so that a destroy frees the (re-seedable) data's storage and keeps the
    checkpoints' (dataReclaimPolicy, storageReclaimPolicy)."""

    data_claim: pulumi.Output[str]
    checkpoint_claim: pulumi.Output[str]
    storage_class: pulumi.Output[str]
    data_storage_class: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        settings: Settings,
        namespace: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{PROJECT}:storage:TrainingStorage", name, {}, opts)
        child = pulumi.ResourceOptions(parent=self)
        class_name: pulumi.Output[str] = pulumi.Output.from_input(settings.storage_class_name)
        data_class: pulumi.Output[str] = pulumi.Output.from_input(data_class_name(settings))
        class_args = storage_class_args(settings)
        data_args = storage_class_args(settings, data=True)
        if class_args is not None and data_args is not None:
            storage_class = k8s.storage.v1.StorageClass(f"{name}-class", **class_args, opts=child)
            class_name = storage_class.metadata.name
            data_storage = k8s.storage.v1.StorageClass(f"{name}-data-class", **data_args, opts=child)
            data_class = data_storage.metadata.name
        data = self._claim(
            f"{name}-data",
            f"{PROJECT}-data",
            settings.data_volume_size,
            settings,
            namespace,
            data_class,
            child,
        )
        checkpoints = self._claim(
            f"{name}-checkpoints",
            f"{PROJECT}-checkpoints",
            settings.checkpoint_volume_size,
            settings,
            namespace,
            class_name,
            pulumi.ResourceOptions.merge(
                child,
                pulumi.ResourceOptions(
                    retain_on_delete=settings.checkpoint_volume_retain,
                    import_=f"{settings.namespace}/{PROJECT}-checkpoints"
                    if settings.reattach_retained
                    else None,
                ),
            ),
        )
        self.data_claim = data.metadata.name
        self.checkpoint_claim = checkpoints.metadata.name
        self.storage_class = class_name
        self.data_storage_class = data_class
        self.register_outputs(
            {
                "data_claim": self.data_claim,
                "checkpoint_claim": self.checkpoint_claim,
                "storage_class": self.storage_class,
                "data_storage_class": self.data_storage_class,
            }
        )

    @staticmethod
    def _claim(
        resource: str,
        claim: str,
        size: str,
        settings: Settings,
        namespace: pulumi.Input[str],
        class_name: pulumi.Input[str],
        opts: pulumi.ResourceOptions,
    ) -> k8s.core.v1.PersistentVolumeClaim:
        return k8s.core.v1.PersistentVolumeClaim(
            resource,
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=claim,
                namespace=namespace,
                labels=labels(settings, "storage"),
                # RWX claims on CSI file stores bind lazily; do not block `pulumi up` on binding.
                annotations={"pulumi.com/skipAwait": "true"},
            ),
            spec=k8s.core.v1.PersistentVolumeClaimSpecArgs(
                access_modes=["ReadWriteMany"],
                storage_class_name=class_name,
                resources=k8s.core.v1.VolumeResourceRequirementsArgs(requests={"storage": size}),
            ),
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(ignore_changes=BINDER_FIELDS)),
        )
