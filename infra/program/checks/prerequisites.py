"""Cross-field rules of a prerequisites stack (`stackRole: prerequisites`)."""

from __future__ import annotations

from collections.abc import Iterator

from infra.program.checks.errors import ConfigError
from infra.program.settings import Settings
from infra.program.settings.prerequisites import MINIO_ENDPOINT, NFS_SERVER_HOST, NFS_SHARE

# MinIO refuses to start with a root user shorter than 3 bytes or a root password shorter than 8
# (`auth.CreateCredentials`, internal/auth/credentials.go: accessKeyMinLen, secretKeyMinLen; called by
# cmd/common-main.go for MINIO_ROOT_USER/MINIO_ROOT_PASSWORD): its pod would crash-loop until the
# provider's wait ran out, with no cause in `pulumi up`'s output.
MINIO_ROOT_MINIMUMS = (
    ("minioAccessKey", 3, "MinIO's root user"),
    ("minioSecretKey", 8, "MinIO's root password"),
)


def prerequisites(s: Settings, has_keys: bool) -> Iterator[ConfigError]:
    """MinIO's root keys are the stack's secret key pair; the addresses a prerequisites stack states are
    those of the servers it creates (what the job stacks then name)."""
    if s.stack_role != "prerequisites":
        return
    if not has_keys:
        yield ConfigError(
            "minioAccessKey",
            None,
            "set (with minioSecretKey, both --secret) when stackRole is prerequisites: they become "
            "MinIO's root user and password, the same pair the job stacks set",
        )
    if s.minio_existing_secret:
        yield ConfigError(
            "minioExistingSecret",
            s.minio_existing_secret,
            "empty when stackRole is prerequisites (MinIO's root keys are minioAccessKey and minioSecretKey)",
        )
    for name, value, served in (
        ("nfsServer", s.nfs_server, NFS_SERVER_HOST),
        ("minioEndpoint", s.minio_endpoint, MINIO_ENDPOINT),
    ):
        if value and value != served:
            yield ConfigError(
                name,
                value,
                f"{served} or empty when stackRole is prerequisites (the server it creates)",
            )
    if s.nfs_share != NFS_SHARE:
        yield ConfigError(
            "nfsShare",
            s.nfs_share,
            f"{NFS_SHARE} when stackRole is prerequisites: its NFS server exports its directory as the "
            "NFSv4 root (fsid=0)",
        )
    if s.minio_endpoint and s.minio_tls:
        yield ConfigError(
            "minioTls", True, "false when stackRole is prerequisites: its MinIO serves plain HTTP"
        )


def minio_root_keys(s: Settings, keys: dict[str, str]) -> ConfigError | None:
    """The first of a prerequisites stack's key pair (plaintext, never shown) that MinIO would refuse as
    its root user or password, or None. Lengths are counted in bytes, as MinIO counts them."""
    if s.stack_role != "prerequisites":
        return None
    for key, minimum, role in MINIO_ROOT_MINIMUMS:
        if len(keys.get(key, "").encode()) < minimum:
            return ConfigError(
                key,
                keys.get(key),
                f"at least {minimum} characters when stackRole is prerequisites: it becomes {role}, and "
                f"MinIO refuses to start with a shorter one",
                secret=True,
            )
    return None
