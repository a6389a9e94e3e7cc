"""Cross-field rules of the object store and its credentials."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from infra.program.checks.errors import ConfigError
from infra.program.settings import PROJECT_ROOT, Settings


def object_store(s: Settings, has_keys: bool) -> Iterator[ConfigError]:
    if s.minio_endpoint and not re.fullmatch(r"[A-Za-z0-9.-]+(:\d{1,5})?", s.minio_endpoint):
        yield ConfigError(
            "minioEndpoint",
            s.minio_endpoint,
            "host[:port] without a scheme, such as minio.minio.svc:9000 (minioTls picks https)",
        )
    for uses, why in (
        (s.job_data_source == "s3", "jobDataSource is s3"),
        (s.seeds_data and s.seed_source == "s3", "seedSource is s3"),
        (s.job_model_export, "jobModelExport is true"),
    ):
        if uses and not s.minio_endpoint:
            yield ConfigError("minioEndpoint", s.minio_endpoint, f"set when {why}")
        if uses and not (has_keys or s.minio_existing_secret):
            yield ConfigError(
                "minioAccessKey",
                None,
                f"set (with minioSecretKey, both --secret) or minioExistingSecret given when {why}",
            )
    if has_keys and s.minio_existing_secret:
        yield ConfigError(
            "minioExistingSecret",
            s.minio_existing_secret,
            "empty when minioAccessKey/minioSecretKey are set (choose one source)",
        )
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", s.minio_bucket):
        yield ConfigError(
            "minioBucket", s.minio_bucket, "a bucket name: 3-63 lowercase letters, digits, '.', '-'"
        )
    if s.minio_prefix.startswith("/") or ".." in s.minio_prefix.split("/"):
        yield ConfigError("minioPrefix", s.minio_prefix, "a relative key prefix without '..'")


def existing_secret(s: Settings, _: bool) -> Iterator[ConfigError]:
    """An existing Secret must be in the namespace before the first `pulumi up`; a namespace the stack
    creates cannot hold it then (creating it first makes the stack's Namespace create fail with
    AlreadyExists: pulumi-kubernetes >= 4.29 never adopts an existing object)."""
    if s.minio_existing_secret and s.create_namespace:
        yield ConfigError(
            "minioExistingSecret",
            s.minio_existing_secret,
            f"empty when createNamespace is true (the stack creates namespace {s.namespace}, so no "
            "Secret can be in it before `pulumi up`): set minioAccessKey and minioSecretKey with "
            "--secret and the stack creates the Secret, or set createNamespace false for a namespace "
            "prepared beforehand",
        )
    if s.minio_read_existing_secret and s.create_namespace:
        yield ConfigError(
            "minioReadExistingSecret",
            s.minio_read_existing_secret,
            f"empty when createNamespace is true (the stack creates namespace {s.namespace}, so no Secret "
            "can be in it before `pulumi up`): set minioReadAccessKey and minioReadSecretKey with --secret "
            "instead",
        )


def ca_bundle(s: Settings, _: bool) -> Iterator[ConfigError]:
    """A CA bundle for a TLS endpoint, read now: a missing or malformed file stops the preview."""
    if not s.minio_ca_bundle:
        return
    if not s.minio_tls:
        yield ConfigError("minioCaBundle", s.minio_ca_bundle, "empty with minioTls false (no TLS to verify)")
        return
    text = ca_bundle_text(s)
    if text is None:
        yield ConfigError(
            "minioCaBundle",
            s.minio_ca_bundle,
            f"a readable PEM file (absolute, or relative to {PROJECT_ROOT})",
        )
    elif "-----BEGIN CERTIFICATE-----" not in text:
        yield ConfigError(
            "minioCaBundle", s.minio_ca_bundle, "a PEM file holding -----BEGIN CERTIFICATE----- blocks"
        )


def ca_bundle_text(s: Settings) -> str | None:
    """minioCaBundle's contents, or None when it cannot be read."""
    path = Path(s.minio_ca_bundle)
    try:
        return (path if path.is_absolute() else PROJECT_ROOT / path).read_text()
    except (OSError, UnicodeDecodeError):
        return None


def external_egress(s: Settings, _: bool) -> Iterator[ConfigError]:
    """Egress CIDRs for a server outside the cluster only; a server on a private address needs them,
    since without them the NetworkPolicies let the pods reach public addresses alone."""
    import ipaddress

    from infra.program.common.isolation import (
        NOT_PUBLIC_V4,
        NOT_PUBLIC_V6,
        s3_destination,
        tracking_destination,
    )

    not_public = [ipaddress.ip_network(c) for c in (*NOT_PUBLIC_V4, *NOT_PUBLIC_V6)]
    tracking_host = s.mlflow_tracking_uri.partition("://")[2].split("/", 1)[0].partition(":")[0]
    for key, endpoint_key, host, cidrs, server in (
        (
            "minioEgressCidrs",
            "minioEndpoint",
            s.minio_endpoint.partition(":")[0],
            s.minio_egress_cidrs,
            s3_destination(s),
        ),
        (
            "mlflowEgressCidrs",
            "mlflowTrackingUri",
            tracking_host,
            s.mlflow_egress_cidrs,
            tracking_destination(s),
        ),
    ):
        if cidrs and (server is None or server.namespace):
            yield ConfigError(
                key,
                cidrs,
                f"empty when {endpoint_key} is unset or a Service name: the pods reach that Service's "
                "namespace",
            )
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            continue
        if not cidrs and any(address in network for network in not_public):
            yield ConfigError(
                key,
                cidrs,
                f"the CIDR of {address} ({endpoint_key}), a private, link-local or shared address: "
                "without it the pods may reach public addresses only",
            )
