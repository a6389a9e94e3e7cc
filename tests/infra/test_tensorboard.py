"""tensorboardDeploy: one TensorBoard pod over the checkpoint claim, read-only, reachable by
port-forward only, admitted under Pod Security "restricted"."""

from __future__ import annotations

import pytest

from infra.program.checks import ConfigError
from infra.review.cluster import cluster_view
from tests.infra.conftest import by_kind, render_config

BOARD = {"tensorboardDeploy": True}


def _named(rendering, kind, name):
    (obj,) = [o for o in by_kind(rendering, kind) if o["metadata"]["name"] == name]
    return obj


def test_no_board_by_default_but_the_curves_dir_is_an_output():
    rendering = render_config({})
    assert not by_kind(rendering, "Deployment")
    assert "tensorboardCommand" not in rendering.outputs
    assert rendering.outputs["curvesDir"] == "/checkpoints/mnist-r1/tensorboard"


def test_the_board_reads_every_run_of_the_claim_read_only_on_loopback():
    rendering = render_config(BOARD)
    deployment = _named(rendering, "Deployment", "ddp-mnist-tensorboard")
    assert deployment["spec"]["replicas"] == 1
    # `up` never waits on it: a board that cannot start holds up nothing
    assert deployment["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["tensorboard"]
    assert container["args"] == [
        "--logdir=/checkpoints",
        "--host=127.0.0.1",
        "--port=6006",
        "--load_fast=false",
        "--reload_interval=30",
    ]
    assert "ports" not in container  # nothing listens beyond the pod's loopback
    assert container["image"] == rendering.settings.job_image
    claim = next(v for v in pod["volumes"] if "persistentVolumeClaim" in v)
    assert claim["persistentVolumeClaim"] == {"claimName": "ddp-mnist-checkpoints", "readOnly": True}
    mount = next(m for m in container["volumeMounts"] if m["name"] == claim["name"])
    assert mount == {"name": claim["name"], "mountPath": "/checkpoints", "readOnly": True}
    assert container["readinessProbe"]["exec"]["command"][:2] == ["python", "-c"]
    assert "127.0.0.1:6006/data/logdir" in container["readinessProbe"]["exec"]["command"][2]
    assert pod["automountServiceAccountToken"] is False
    assert container["resources"]["requests"] == {"cpu": "100m", "memory": "256Mi"}
    # Its template has no run id: a new jobRunId leaves the board as it is.
    again = render_config({**BOARD, "jobRunId": "r2"})
    assert _named(again, "Deployment", "ddp-mnist-tensorboard")["spec"] == deployment["spec"]
    assert rendering.outputs["tensorboardCommand"] == (
        "kubectl -n ddp-mnist port-forward deployment/ddp-mnist-tensorboard 6006:6006 "
        "(then open http://127.0.0.1:6006)"
    )


def test_its_network_policy_admits_nothing_and_lets_nothing_out():
    rendering = render_config(BOARD)
    policy = _named(rendering, "NetworkPolicy", "ddp-mnist-tensorboard")
    selected = policy["spec"]["podSelector"]["matchLabels"]
    pod_labels = _named(rendering, "Deployment", "ddp-mnist-tensorboard")["spec"]["template"]["metadata"]
    assert selected.items() <= pod_labels["labels"].items()
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"].get("ingress", []) == [] and policy["spec"].get("egress", []) == []


def test_the_board_pod_passes_restricted_admission():
    rendering = render_config(BOARD)
    view = cluster_view(rendering.objects, rendering.settings)
    boards = [p for p in view.admission.pods if p.owner == "Deployment/ddp-mnist-tensorboard"]
    assert len(boards) == 1
    assert view.admission.refusals == []


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {**BOARD, "stackRole": "platform"},
            "config ddp-mnist:tensorboardDeploy=true is invalid: must be false when stackRole is platform",
        ),
        (
            {**BOARD, "namespaceCpuQuota": "4", "jobCpuRequest": "2"},
            "config ddp-mnist:namespaceCpuQuota=4 is invalid: must be >= jobNodes x jobCpuRequest (2 x 2) "
            "+ TensorBoard's 100m (tensorboardDeploy), or its pods can never all start",
        ),
    ],
)
def test_bad_board_settings_are_refused_naming_the_key(values, message):
    with pytest.raises(ConfigError) as caught:
        render_config(values)
    assert str(caught.value).startswith(message)
