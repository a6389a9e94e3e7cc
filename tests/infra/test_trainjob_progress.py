"""trainerProgress: Trainer v2's TrainJobStatus gate on the installed controller, the job's NetworkPolicy
letting its pods reach the status endpoint, the platform's facts carrying it to job stacks, and the
statusCommand that shows the progress."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pulumi
import pytest

from infra.program.common import yamlio
from infra.program.common.vendored import MANIFESTS
from infra.program.platform.trainer_v2 import PROGRESS_GATE, TRAINER_DEPLOYMENT
from tests.infra.conftest import render_config, team_policies
from tests.infra.test_platform_stack import facts_of, take

TRAINJOB = {"jobKind": "trainjob", "trainerInstall": True, "operatorInstall": False}
DEPLOYMENT = "kubernetes:apps/v1:Deployment"


def vendored_deployment(name: str) -> dict[str, Any]:
    text = (MANIFESTS / "kubeflow-trainer" / "manifests.yaml").read_text()
    for document in text.split("\n---\n"):
        if "kind: Deployment" in document and f"name: {name}\n" in document:
            found = yamlio.load(document)
            if found["kind"] == "Deployment" and found["metadata"]["name"] == name:
                return found  # type: ignore[no-any-return]
    raise LookupError(name)


def transformed(values: dict[str, Any], name: str) -> dict[str, Any] | None:
    rendering = render_config({**TRAINJOB, **values})
    (install,) = [r for r in rendering.external if r.parent == "trainer-v2"]
    (transform,) = install.transforms
    args = pulumi.ResourceTransformArgs(
        custom=True,
        type_=DEPLOYMENT,
        name="x",
        props=vendored_deployment(name),
        opts=pulumi.ResourceOptions(),
    )
    result = transform(args)
    return None if result is None else dict(result.props)


def manager(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "manager")  # type: ignore[no-any-return]


def test_the_gate_is_a_flag_on_the_vendored_controller_only_with_trainer_progress() -> None:
    upstream = manager(vendored_deployment(TRAINER_DEPLOYMENT))["args"]
    assert upstream == ["--config=/controller_manager_config.yaml", "--zap-log-level=2"]
    assert transformed({}, TRAINER_DEPLOYMENT) is None
    on = transformed({"trainerProgress": True}, TRAINER_DEPLOYMENT)
    assert on is not None and manager(on)["args"] == [*upstream, "--feature-gates=TrainJobStatus=true"]
    # The status server's port the controller listens on with the gate, already in the vendored objects.
    ports = {p["name"]: p["containerPort"] for p in manager(on)["ports"]}
    assert ports["status-server"] == 10443
    assert transformed({"trainerProgress": True}, "jobset-controller-manager") is None
    image = "registry.internal/kubeflow/trainer-controller-manager:v2.3.0"
    both = transformed({"trainerProgress": True, "trainerImage": image}, TRAINER_DEPLOYMENT)
    assert both is not None and manager(both)["image"] == image and PROGRESS_GATE in manager(both)["args"]


def egress_to_trainer(values: dict[str, Any]) -> list[dict[str, Any]]:
    rendering = render_config(values)
    (policy,) = [o for o in team_policies(rendering) if "ingress" in o["spec"]]
    return [
        rule
        for rule in policy["spec"]["egress"]
        if any("podSelector" in peer and "namespaceSelector" in peer for peer in rule.get("to") or [])
    ]


def test_the_jobs_pods_may_reach_the_status_endpoint_only_with_trainer_progress() -> None:
    assert egress_to_trainer(TRAINJOB) == []
    assert (
        egress_to_trainer({"jobKind": "indexed-job", "trainerPresent": True, "trainerProgress": True}) == []
    )
    (rule,) = egress_to_trainer({**TRAINJOB, "trainerProgress": True})
    assert rule == {
        "to": [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kubeflow-system"}},
                "podSelector": {
                    "matchLabels": {
                        "app.kubernetes.io/component": "manager",
                        "app.kubernetes.io/name": "trainer",
                        "app.kubernetes.io/part-of": "kubeflow",
                    }
                },
            }
        ],
        "ports": [{"protocol": "TCP", "port": 10443}],
    }
    # Those labels select the vendored controller's pods.
    labels = vendored_deployment(TRAINER_DEPLOYMENT)["spec"]["template"]["metadata"]["labels"]
    assert rule["to"][0]["podSelector"]["matchLabels"].items() <= labels.items()


def test_the_status_command_shows_the_reported_progress() -> None:
    assert (
        render_config(TRAINJOB).outputs["statusCommand"]
        == "kubectl -n ddp-mnist get trainjob mnist-r1 -o wide"
    )
    shown = render_config({**TRAINJOB, "trainerProgress": True}).outputs["statusCommand"]
    assert shown == (
        "kubectl -n ddp-mnist get trainjob mnist-r1 -o jsonpath='{.metadata.name} "
        "{.status.conditions[-1:].type} progress={.status.trainerStatus.progressPercentage}% "
        "eta={.status.trainerStatus.estimatedRemainingSeconds}s "
        "updated={.status.trainerStatus.lastUpdatedTime}"
        '{range .status.trainerStatus.metrics[*]} {.name}={.value}{end}{"\\n"}\''
    )
    assert render_config({"jobKind": "indexed-job", "trainerPresent": True, "trainerProgress": True}).outputs[
        "statusCommand"
    ] == ("kubectl -n ddp-mnist get job mnist-r1 -o wide")


def test_a_platform_exports_the_gate_and_a_job_stack_takes_it() -> None:
    on = facts_of(trainerInstall=True, trainerProgress=True)
    assert on["trainer"] == {"version": "v2.3.0", "progress": True}
    assert facts_of(trainerInstall=True)["trainer"] == {"version": "v2.3.0", "progress": False}
    trainjob = {"jobKind": "trainjob"}
    assert take(trainjob, on).trainer_progress is True
    assert take(trainjob, facts_of(trainerInstall=True)).trainer_progress is False
    with pytest.raises(ValueError, match="declares trainerProgress=true"):
        take({**trainjob, "trainerProgress": True}, facts_of(trainerInstall=True))


def test_trainer_progress_without_trainer_is_one_line() -> None:
    from infra.program.checks import ConfigError
    from infra.review.manifest import RecordingMocks, run_program
    from tests.infra.conftest import BASE, stack_config

    with pytest.raises(ConfigError) as raised:
        run_program(stack_config({**BASE, "trainerProgress": True}), RecordingMocks())
    assert str(raised.value) == (
        "config ddp-mnist:trainerProgress=true is invalid: must be false unless this stack installs Kubeflow "
        "Trainer v2 (trainerInstall) or declares it present (trainerPresent): the progress report is a "
        "feature of Trainer's controller"
    )


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl on PATH")
def test_kubectl_prints_the_status_commands_line_from_a_trainjob(tmp_path: Path) -> None:
    """The statusCommand's output options, as kubectl evaluates them (offline: `label --local`), on a
    TrainJob with the status Trainer writes, and on one with none yet."""
    command = shlex.split(render_config({**TRAINJOB, "trainerProgress": True}).outputs["statusCommand"])
    options = command[command.index("-o") :]
    reported = {
        "conditions": [{"type": "Created", "status": "True"}, {"type": "Complete", "status": "True"}],
        "trainerStatus": {
            "progressPercentage": 100,
            "estimatedRemainingSeconds": 0,
            "metrics": [{"name": "step", "value": "4"}, {"name": "test_accuracy", "value": "0.9412"}],
            "lastUpdatedTime": "2026-11-27T06:30:00Z",
        },
    }
    lines = []
    for status in (reported, {}):
        trainjob = {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "mnist-r1", "namespace": "ddp-mnist"},
            "status": status,
        }
        path = tmp_path / "trainjob.json"
        path.write_text(json.dumps(trainjob))
        shown = subprocess.run(
            ["kubectl", "label", "--local", "-f", str(path), "seen=yes", *options],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        lines.append(shown.stdout)
    assert lines == [
        "mnist-r1 Complete progress=100% eta=0s updated=2026-11-27T06:30:00Z step=4 test_accuracy=0.9412\n",
        "mnist-r1  progress=% eta=s updated=\n",
    ]
