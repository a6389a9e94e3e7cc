"""Settings: the S3/MinIO object store (the key pair itself is secret config, `SECRET_KEYS`)."""

from __future__ import annotations

from pydantic import field_validator

from infra.program.settings.base import SettingsGroup, check_cidrs, key, optional_dns_label


class S3Settings(SettingsGroup):
    """Endpoint, bucket and prefix of the object store, and an existing credentials Secret."""

    minio_endpoint: str = key(
        "minioEndpoint", "", "S3/MinIO endpoint as host[:port]; empty when no object store is used."
    )
    minio_tls: bool = key("minioTls", True, "Reach the endpoint over https (true) or http (false).")
    minio_ca_bundle: str = key(
        "minioCaBundle",
        "",
        "With minioTls: a PEM file of the CA(s) that sign the endpoint's certificate (a private CA, e.g. "
        "cert-manager's), absolute or relative to the directory of Pulumi.yaml. The stack puts it in the "
        "ConfigMap ddp-mnist-s3-ca and every pod that reaches the store trusts it (AWS_CA_BUNDLE); empty: "
        "the image's public CAs.",
    )
    minio_bucket: str = key("minioBucket", "mnist", "Bucket holding the MNIST files.")
    minio_prefix: str = key(
        "minioPrefix",
        "mnist",
        "Key prefix inside the bucket: the MNIST files, and models/<job>/ when jobModelExport is on.",
    )
    minio_region: str = key("minioRegion", "us-east-1", "Region name sent to the S3 API.")
    minio_egress_port: int = key(
        "minioEgressPort",
        0,
        "TCP port the NetworkPolicies (job and seed Job) let pods reach the S3/MinIO endpoint on: the "
        "MinIO pods' port, since a NetworkPolicy port is a port on the peer pod (a Service mapping port "
        "80 to MinIO's 9000 needs 9000 here); 0 uses minioEndpoint's port.",
        ge=0,
        le=65535,
    )
    minio_egress_cidrs: list[str] = key(
        "minioEgressCidrs",
        [],
        "Where pods may reach an S3 endpoint outside the cluster (minioEndpoint not a Service name), as "
        "CIDRs (a store in your network: 10.20.0.0/16); empty: public addresses only, never a private, "
        "link-local (instance metadata), shared or unique-local one.",
    )
    minio_existing_secret: str = key(
        "minioExistingSecret",
        "",
        "Name of an existing Secret with keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the "
        "namespace, instead of minioAccessKey/minioSecretKey; only with createNamespace false (the "
        "Secret must exist before the first `pulumi up`, so its namespace must too).",
    )

    minio_read_existing_secret: str = key(
        "minioReadExistingSecret",
        "",
        "Name of an existing Secret with a read-only key pair (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) for "
        "the pods that only read: the seed Job and the model server; instead of "
        "minioReadAccessKey/minioReadSecretKey, only with createNamespace false. Without either, they "
        "use the training job's read/write keys.",
    )

    minio_read_keys_required: bool = key(
        "minioReadKeysRequired",
        False,
        "Refuse the stack when a pod that only reads the store (the seed Job with seedSource s3, the "
        "model server with serveModelSource s3) would hold the read/write keys: set "
        "minioReadAccessKey/minioReadSecretKey (or minioReadExistingSecret) then. The shipped cloud job "
        "stacks set it.",
    )

    @field_validator("minio_read_existing_secret")
    @classmethod
    def _read_secret_dns_label(cls, value: str) -> str:
        return optional_dns_label(value)

    @field_validator("minio_existing_secret")
    @classmethod
    def _existing_secret_dns_label(cls, value: str) -> str:
        return optional_dns_label(value)

    @field_validator("minio_egress_cidrs")
    @classmethod
    def _minio_egress_cidrs(cls, value: list[str]) -> list[str]:
        return check_cidrs(value)
