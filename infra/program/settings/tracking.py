"""Settings: where the trainer logs its runs (an MLflow tracking server), and its credentials Secret."""

from __future__ import annotations

import re

from pydantic import field_validator

from infra.program.settings.base import SettingsGroup, check_cidrs, key, optional_dns_label

# http(s)://HOST[:PORT][/PATH], no user info, query or fragment: what the trainer's client takes
# (trainer/mlflow_rest.py), and a host a NetworkPolicy rule can be derived from.
TRACKING_URI = re.compile(r"https?://[A-Za-z0-9.-]+(:\d{1,5})?(/[^\s?#@]*)?")
# Keys holding a URL or an endpoint: a bad value with user info in it (user:password@) is reported
# without the value.
URL_KEYS = frozenset({"mlflowTrackingUri", "minioEndpoint"})


class TrackingSettings(SettingsGroup):
    """The MLflow tracking server the training job logs to (rank 0), if any."""

    mlflow_tracking_uri: str = key(
        "mlflowTrackingUri",
        "",
        "MLflow tracking server the trainer logs params, curves and the model to "
        "(MLFLOW_TRACKING_URI), as http(s)://host[:port][/path], e.g. http://mlflow.mlflow.svc:5000; "
        "empty: no MLflow logging. The job's NetworkPolicy lets its pods reach it.",
    )
    mlflow_egress_port: int = key(
        "mlflowEgressPort",
        0,
        "TCP port the job's NetworkPolicy lets pods reach the tracking server on: the server pods' "
        "port (a Service mapping port 80 to MLflow's 5000 needs 5000 here); 0 uses mlflowTrackingUri's "
        "port (else 80 or 443).",
        ge=0,
        le=65535,
    )
    mlflow_egress_cidrs: list[str] = key(
        "mlflowEgressCidrs",
        [],
        "Where the job's pods may reach a tracking server outside the cluster, as CIDRs (a server in "
        "your network); empty: public addresses only, never a private, link-local (instance metadata), "
        "shared or unique-local one.",
    )
    mlflow_existing_secret: str = key(
        "mlflowExistingSecret",
        "",
        "Name of an existing Secret in the namespace whose keys MLFLOW_TRACKING_TOKEN, or "
        "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, the training pods get as env (each "
        "key optional); empty: no credentials.",
    )

    @field_validator("mlflow_tracking_uri")
    @classmethod
    def _tracking_uri(cls, value: str) -> str:
        if value and not TRACKING_URI.fullmatch(value):
            raise ValueError(
                "an http(s)://host[:port][/path] URL without credentials, query or fragment "
                "(credentials go in mlflowExistingSecret)"
            )
        return value

    @field_validator("mlflow_existing_secret")
    @classmethod
    def _mlflow_secret_dns_label(cls, value: str) -> str:
        return optional_dns_label(value)

    @field_validator("mlflow_egress_cidrs")
    @classmethod
    def _mlflow_egress_cidrs(cls, value: list[str]) -> list[str]:
        return check_cidrs(value)
