"""The MLflow tracking server as rendered: the training container's env (the URI, the credentials only
as optional references to mlflowExistingSecret) and the job's NetworkPolicy rule out to the server."""

from __future__ import annotations

import pytest

from tests.infra.conftest import pod_templates, render_config
from tests.infra.test_isolation import PUBLIC, job_policy

SECRET_KEYS = ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")


def tracking_env(template: dict) -> dict[str, dict]:
    (container,) = template["spec"]["containers"]
    return {e["name"]: e for e in container["env"] if e["name"].startswith("MLFLOW_")}


@pytest.mark.parametrize("kind", ["pytorchjob", "indexed-job"])
def test_training_pods_get_the_uri_and_secret_references(kind: str) -> None:
    rendering = render_config(
        {
            "jobKind": kind,
            "mlflowTrackingUri": "http://mlflow.mlflow.svc:5000",
            "mlflowExistingSecret": "mlflow-auth",
        }
    )
    templates = pod_templates(rendering)
    assert templates
    for template in templates:
        env = tracking_env(template)
        assert env.pop("MLFLOW_TRACKING_URI") == {
            "name": "MLFLOW_TRACKING_URI",
            "value": "http://mlflow.mlflow.svc:5000",
        }
        assert env == {
            var: {
                "name": var,
                "valueFrom": {"secretKeyRef": {"name": "mlflow-auth", "key": var, "optional": True}},
            }
            for var in SECRET_KEYS
        }


def test_no_tracking_server_no_env_and_no_rule() -> None:
    rendering = render_config({})
    assert all(tracking_env(t) == {} for t in pod_templates(rendering))
    assert len(job_policy(rendering)["spec"]["egress"]) == 2  # DNS and the job's own pods


def test_a_server_without_a_secret_gets_no_credentials() -> None:
    rendering = render_config({"mlflowTrackingUri": "https://mlflow.example.com/tracking"})
    (template, *_) = pod_templates(rendering)
    assert set(tracking_env(template)) == {"MLFLOW_TRACKING_URI"}


def _namespace(name: str) -> list[dict]:
    return [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}]


@pytest.mark.parametrize(
    ("values", "rule"),
    [
        (
            {"mlflowTrackingUri": "http://mlflow.mlflow.svc:5000"},
            {"to": _namespace("mlflow"), "ports": [{"protocol": "TCP", "port": 5000}]},
        ),
        (
            {"mlflowTrackingUri": "http://mlflow.tracking.svc.cluster.local", "mlflowEgressPort": 5000},
            {"to": _namespace("tracking"), "ports": [{"protocol": "TCP", "port": 5000}]},
        ),
        (
            {"mlflowTrackingUri": "http://mlflow/"},
            {"to": _namespace("ddp-mnist"), "ports": [{"protocol": "TCP", "port": 80}]},
        ),
        (  # outside the cluster: public addresses only (tests/infra/test_isolation.py PUBLIC)
            {"mlflowTrackingUri": "https://mlflow.example.com/tracking"},
            {"to": PUBLIC, "ports": [{"protocol": "TCP", "port": 443}]},
        ),
    ],
)
def test_the_job_policy_lets_pods_reach_the_tracking_server(values: dict, rule: dict) -> None:
    dns, peers, tracking = job_policy(render_config(values))["spec"]["egress"]
    assert tracking == rule
