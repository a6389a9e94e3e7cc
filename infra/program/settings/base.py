"""What every settings group shares: the project's constants, `key()`, the value rules, `SettingsGroup`."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

PROJECT = "ddp-mnist"
# The directory holding Pulumi.yaml (and stacks/): what relative paths in config are read from.
PROJECT_ROOT = Path(__file__).resolve().parents[3]

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
K8S_VERSIONS = tuple(f"1.{minor}" for minor in range(29, 38))
DEFAULT_MASTER_PORT = 23456  # the training operator v1's `pytorchjob-port` default
# Kubeflow Trainer v2's torch plugin fixes the rendezvous port (PET_MASTER_PORT, the container port):
# kubeflow/trainer v2.3.0 pkg/constants/constants.go ContainerTrainerPort.
TRAINER_MASTER_PORT = 29500

# The operator's init container image: upstream's default is alpine:3.10 by tag. This is the alpine:3.20
# multi-arch index as pinned by several public repositories (nothing here can pull it); re-check with
# `docker buildx imagetools inspect alpine:3.20 --format '{{json .Manifest.Digest}}'` before changing it.
OPERATOR_INIT_IMAGE = (
    "docker.io/library/alpine:3.20@sha256:d9e853e87e55526f6b2917df91a2115c36dd7c696a35be12163d44e6e2a4b6bc"
)
# The NVIDIA device plugin v0.19.3 (its static manifest deployments/static/nvidia-device-plugin.yml at
# that tag names the tag alone). The digest is the one NVIDIA's GPU Operator bundle v26.3.3 and several
# public image lists pin for that tag (nothing here can pull it); re-check with `docker buildx imagetools
# inspect nvcr.io/nvidia/k8s-device-plugin:v0.19.3` before changing it.
GPU_DEVICE_PLUGIN_IMAGE = (
    "nvcr.io/nvidia/k8s-device-plugin:v0.19.3"
    "@sha256:25cc340fe6fd53c101e16fc452f503e7a92c219c64a80ed5381784b522dbbf77"
)

# Config keys that hold secrets: read with `require_secret`, never part of the plain model.
SECRET_KEYS = {
    "minioAccessKey": "S3/MinIO access key id; set with `pulumi config set --secret minioAccessKey`. In a "
    "prerequisites stack, MinIO's root user: at least 3 characters.",
    "minioSecretKey": "S3/MinIO secret access key; set with `pulumi config set --secret minioSecretKey`. "
    "In a prerequisites stack, MinIO's root password: at least 8 characters.",
    "minioReadAccessKey": "A read-only S3 key id for the pods that only read (the seed Job, the model "
    "server): the Secret ddp-mnist-s3-read; set with `pulumi config set --secret minioReadAccessKey`.",
    "minioReadSecretKey": "Its secret access key; set with `pulumi config set --secret minioReadSecretKey`.",
}
# The key pairs that go together: (access key id, secret access key).
KEY_PAIRS = (("minioAccessKey", "minioSecretKey"), ("minioReadAccessKey", "minioReadSecretKey"))


def key(alias: str, default: Any, description: str, **constraints: Any) -> Any:
    """A model field bound to the project config key `alias`."""
    return Field(default, alias=alias, description=description, **constraints)


def _dns(value: str, pattern: re.Pattern[str], what: str, limit: int = 63) -> str:
    if len(value) > limit or not pattern.match(value):
        raise ValueError(f"a {what} (lowercase letters, digits and '-', at most {limit} characters)")
    return value


def dns_label(value: str) -> str:
    return _dns(value, DNS_LABEL, "DNS-1123 label")


def optional_dns_label(value: str) -> str:
    return value and _dns(value, DNS_LABEL, "DNS-1123 label (or empty)")


def dns_subdomain(value: str) -> str:
    return _dns(value, DNS_SUBDOMAIN, "DNS-1123 subdomain", 253)


def dns_1035(value: str) -> str:
    return _dns(value, DNS_1035, "DNS-1035 label starting with a letter")


def quantity(value: str) -> str:
    """A positive Kubernetes quantity, as given."""
    if not QUANTITY.match(value) or parse_quantity(value) <= 0:
        raise ValueError("a positive Kubernetes quantity such as 500m, 2, 10Gi")
    return value


def optional_quantity(value: str) -> str:
    return value and quantity(value)


def release_tag(value: str) -> str:
    if not re.fullmatch(r"v\d+\.\d+\.\d+", value):
        raise ValueError("a release tag vMAJOR.MINOR.PATCH such as v1.9.4")
    return value


def optional_pinned_image(value: str) -> str:
    return value and check_pinned_image(value)


_SUFFIX = {
    "": 1,
    "m": 0.001,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "n": 1e-9,
    "u": 1e-6,
}


def parse_quantity(value: str) -> float:
    """A Kubernetes quantity as a number (bytes or cores); 0 when it cannot be read."""
    match = re.fullmatch(r"([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)([a-zA-Z]*)", value)
    if not match or match.group(2) not in _SUFFIX:
        return 0.0
    return float(match.group(1)) * _SUFFIX[match.group(2)]


_IMAGE = re.compile(
    r"^(?P<repo>[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?$"
)


def check_cidrs(value: list[str]) -> list[str]:
    """Each entry a CIDR with its host bits zero (an egress rule's ipBlock)."""
    for entry in value:
        try:
            ipaddress.ip_network(entry)
        except ValueError:
            raise ValueError("CIDRs such as 10.20.0.0/16 (the host bits zero)") from None
    return value


def check_pinned_image(value: str) -> str:
    """Accept `repo:tag`, `repo@sha256:...` or both; reject untagged and `:latest`."""
    match = _IMAGE.match(value)
    if not match:
        raise ValueError("an image reference such as registry/repo:1.2.3 or registry/repo@sha256:<64 hex>")
    if match.group("digest"):
        return value
    if not match.group("tag"):
        raise ValueError("a pinned image: add a version tag or an @sha256 digest (untagged means latest)")
    if match.group("tag") == "latest":
        raise ValueError("a pinned image: ':latest' moves; use a version tag or an @sha256 digest")
    return value


def pinned_by_digest(image: str) -> bool:
    """Whether an image reference names its content by `@sha256:` digest (immutable), not a tag alone."""
    match = _IMAGE.match(image)
    return bool(match and match.group("digest"))


class SettingsGroup(BaseModel):
    """One concern's config keys: a part of `Settings`, never used alone."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def declares(self, name: str) -> bool:
        """Whether field `name` is set to other than its default. The engine hands a program every key
        of Pulumi.yaml's config block, defaults included (pulumi `pkg/workspace/config.go`
        `mergeConfig`), so a value equal to its default cannot be told from one left unset."""
        return bool(getattr(self, name) != type(self).model_fields[name].default)
