"""Settings: the seed Job that fills the data PVC with MNIST before training."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import field_validator

from infra.program.settings.base import SettingsGroup, check_cidrs, key


class SeedSettings(SettingsGroup):
    """Where the seed Job takes MNIST from, and how often it retries."""

    seed_source: Literal["https", "s3", "none"] = key(
        "seedSource",
        "https",
        "Where the seed Job (run before the training job, when jobDataSource is pvc) takes MNIST from: "
        "'https' the seedMirrors, 's3' the stack's bucket (minioBucket/minioPrefix), 'none' renders no "
        "seed Job (the data PVC is filled by other means).",
    )
    seed_mirrors: list[str] = key(
        "seedMirrors",
        ["https://ossci-datasets.s3.amazonaws.com/mnist/"],
        "HTTPS base URLs holding the four MNIST .gz files, tried in order; every file is checked against "
        "the canonical sha256 of its raw content.",
    )
    seed_https_egress_cidrs: list[str] = key(
        "seedHttpsEgressCidrs",
        [],
        "Where the seed Job may connect on port 443 (seedSource https), as CIDRs (a mirror or proxy inside "
        "your network); empty: the public internet only, never a private, link-local (instance metadata), "
        "shared or unique-local address.",
    )
    seed_node_selector: list[str] = key(
        "seedNodeSelector",
        [],
        "Nodes for the seed Job, each 'key=value': a CPU pool (e.g. "
        "cloud.google.com/gke-nodepool=default-pool), so the copy never scales a GPU node up; it "
        "tolerates no taint. Empty: the job's nodes when the claims bind WaitForFirstConsumer, anywhere "
        "otherwise. With a zonal class the seed's node picks the volume's zone: add the GPU pool's "
        "(topology.kubernetes.io/zone=...).",
    )
    seed_backoff_limit: int = key(
        "seedBackoffLimit",
        4,
        "Retries of the seed Job after an unreachable source (bad input and bad data fail at once).",
        ge=0,
        le=20,
    )

    @field_validator("seed_https_egress_cidrs")
    @classmethod
    def _https_egress_cidrs(cls, value: list[str]) -> list[str]:
        return check_cidrs(value)

    @field_validator("seed_mirrors")
    @classmethod
    def _https_mirrors(cls, value: list[str]) -> list[str]:
        for url in value:
            if not re.fullmatch(r"https://[A-Za-z0-9.-]+(:\d{1,5})?(/[^\s?#]*)?", url):
                raise ValueError(f"a list of https:// base URLs ({url!r} is not one)")
        return value
