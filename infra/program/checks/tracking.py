"""Cross-field rules of the MLflow tracking server."""

from __future__ import annotations

from collections.abc import Iterator

from infra.program.checks.errors import ConfigError
from infra.program.settings import Settings


def tracking(s: Settings, _: bool) -> Iterator[ConfigError]:
    """A Secret or port for a tracking server needs the server."""
    if s.mlflow_tracking_uri:
        return
    if s.mlflow_existing_secret:
        yield ConfigError("mlflowExistingSecret", s.mlflow_existing_secret, "empty without mlflowTrackingUri")
    if s.mlflow_egress_port:
        yield ConfigError("mlflowEgressPort", s.mlflow_egress_port, "0 without mlflowTrackingUri")
