"""Settings: the cluster prerequisites a `stackRole: prerequisites` stack installs (NFS, its CSI driver,
MinIO with MNIST), and where their chart and images come from."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from infra.program.settings.base import SettingsGroup, check_pinned_image, key

# What a prerequisites stack serves, at fixed names: the addresses a job stack's nfsServer, nfsShare and
# minioEndpoint then name (stacks/Pulumi.dev.yaml). The server exports its directory as the NFSv4 root
# (fsid=0), so the share is `/`.
NFS_NAMESPACE = "nfs-system"
NFS_SERVER = "nfs-server"
NFS_SERVER_HOST = f"{NFS_SERVER}.{NFS_NAMESPACE}.svc.cluster.local"
NFS_SHARE = "/"
MINIO_NAMESPACE = "minio"
MINIO = "minio"
MINIO_PORT = 9000
MINIO_ENDPOINT = f"{MINIO}.{MINIO_NAMESPACE}.svc.cluster.local:{MINIO_PORT}"

# csi-driver-nfs's chart as upstream publishes it in its repository at the release tag (NFS_CSI_CHART_URL),
# vendored at NFS_CSI_CHART (relative to the project root) and applied only when its sha256 is upstream's:
# nothing is fetched, and an archive changed in place stops the preview (infra/program/common/vendored.py).
NFS_CSI_VERSION = "v4.11.0"
NFS_CSI_CHART_URL = (
    f"https://raw.githubusercontent.com/kubernetes-csi/csi-driver-nfs/{NFS_CSI_VERSION}/charts/"
    f"{NFS_CSI_VERSION}/csi-driver-nfs-{NFS_CSI_VERSION.lstrip('v')}.tgz"
)
NFS_CSI_CHART = f"infra/charts/csi-driver-nfs-{NFS_CSI_VERSION.lstrip('v')}.tgz"
NFS_CSI_CHART_SHA256 = "e44bcd7f6934fe6cb07194a1b6e780ca4a428c5d37330a9db2bfa7a9300c8da5"
# The NFS server of csi-driver-nfs's own example (deploy/example/nfs-provisioner/nfs-server.yaml, which
# runs it by :latest). Tag 12 is the image's last release; the digest is its linux/amd64 image manifest
# (the tag is no multi-arch index, so arm64 nodes need a mirror of another build: nfsServerImage), as
# public repositories pin it: quay.io/awels/nfs-server-alpine:12 (a mirror, same digest) and
# itsthenetwork/nfs-server-alpine:latest (the tag then pointed at the same manifest). Nothing here can
# pull it; re-check with `docker buildx imagetools inspect itsthenetwork/nfs-server-alpine:12`.
NFS_SERVER_IMAGE = (
    "docker.io/itsthenetwork/nfs-server-alpine:12"
    "@sha256:7fa99ae65c23c5af87dd4300e543a86b119ed15ba61422444207efc7abd0ba20"
)
# MinIO as quay.io serves it (Docker Hub no longer publishes minio/minio).
MINIO_IMAGE = (
    "quay.io/minio/minio:RELEASE.2025-09-07T16-13-09Z"
    "@sha256:14cea493d9a34af32f524e538b8346cf79f3321eff8e708c1e2960462bd8936e"
)


class PrerequisitesSettings(SettingsGroup):
    """What a prerequisites stack installs for storage, and where it takes csi-driver-nfs's chart, the NFS
    server and MinIO from."""

    prerequisites_storage: Literal["nfs", "none"] = key(
        "prerequisitesStorage",
        "nfs",
        "The RWX storage a prerequisites stack installs. nfs: an in-cluster NFS server and csi-driver-nfs "
        "(the job stack then sets storageProvider nfs-csi, as stacks/Pulumi.dev.yaml). none: MinIO and its "
        "MNIST only, for a cluster that already has a ReadWriteMany StorageClass (the job stack then sets "
        "storageProvider existing and storageClassName to it).",
    )
    nfs_csi_chart: str = key(
        "nfsCsiChart",
        "",
        f"Helm chart of csi-driver-nfs a prerequisites stack installs (a mirror for air-gapped clusters, "
        f"whose values may name mirrored images): a chart directory or .tgz (absolute, or ./ or ../ "
        f"relative to the directory of Pulumi.yaml) or an https URL of the chart archive, applied as "
        f"given; empty uses upstream's chart {NFS_CSI_VERSION} vendored at {NFS_CSI_CHART}, checked "
        f"against upstream's sha256 first.",
    )
    nfs_server_image: str = key(
        "nfsServerImage",
        NFS_SERVER_IMAGE,
        "Image of the in-cluster NFS server a prerequisites stack runs (a mirror for air-gapped "
        "clusters), pinned by tag or digest; it needs SHARED_DIRECTORY and runs privileged.",
    )
    minio_image: str = key(
        "minioImage",
        MINIO_IMAGE,
        "Image of the MinIO a prerequisites stack runs (a mirror for air-gapped clusters), pinned by tag "
        "or digest.",
    )

    @field_validator("nfs_csi_chart")
    @classmethod
    def _chart_source(cls, value: str) -> str:
        if value and not value.startswith(("/", "./", "../", "https://")):
            raise ValueError(
                "a local chart directory or .tgz (/..., ./..., ../...) or an https URL of the chart "
                "archive (empty: upstream's chart)"
            )
        return value

    @field_validator("nfs_server_image", "minio_image")
    @classmethod
    def _prerequisite_pinned_image(cls, value: str) -> str:
        return check_pinned_image(value)
