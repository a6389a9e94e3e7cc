"""A Kubeflow Trainer v2 TrainJob trains for real on the node: the platform stack installs Trainer v2.3.0
and JobSet v0.12.0 (their controllers run as the tier's local processes, infra/offline/realcluster/
operators.py), the real Trainer controller makes the JobSet, JobSet its Job and headless Service, and the
Job's two pods run our trainer image on the real node: the torch plugin's PET_MASTER_ADDR,
`<trainjob>-node-0-0.<trainjob>`, resolves through CoreDNS, and they reach 99% over gloo.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pulumi import automation as auto

from tests.e2e import judge, live
from tests.e2e.project import Backend
from tests.e2e_local import scenario
from tests.e2e_node.conftest import final_accuracy_on_the_node, node_job_config, show_logs

pytestmark = pytest.mark.e2e_node

NAMESPACE = "node-trainjob"
JOB = "mnist-r1"


@pytest.fixture(scope="module")
def platform(backend: Backend, node_images: dict[str, str]) -> Iterator[auto.Stack]:
    """The platform stack in gke-platform's shape (the operator and Trainer v2 with JobSet), without the
    NVIDIA device plugin: its DaemonSet's image is not on this machine."""
    config = {
        key: value
        for key, value in scenario.platform_config().items()
        if key not in ("ddp-mnist:gpuDevicePlugin", "ddp-mnist:gpuSmokeNodeSelector")
    }
    config.update({"ddp-mnist:trainerInstall": "true", "ddp-mnist:allowBothOperators": "true"})
    stack = scenario.stack(backend, "node-platform", config)
    outputs = scenario.outputs(stack.up(on_output=print, show_secrets=False))
    assert outputs["trainerSmokeCheck"] == "Complete"
    yield stack
    # Destroyed, so a later scenario's stack that installs the operators (the tutorial's `dev`, stack
    # role `all`) starts from a cluster without them, as the tutorial's reader does.
    if not scenario.KEEP:
        stack.destroy(on_output=print)


def test_a_trainjob_trains_to_99_percent_on_the_real_node(
    backend: Backend,
    platform: auto.Stack,
    node_images: dict[str, str],
    volumes_for: Callable[[str], dict[str, Path]],
) -> None:
    volumes_for(NAMESPACE)
    config = node_job_config(node_images["trainer"], NAMESPACE, jobKind="trainjob", trainerPresent="true")
    stack = scenario.stack(backend, NAMESPACE, config)
    try:
        outputs = scenario.outputs(stack.up(on_output=print, show_secrets=False))
        assert outputs["jobOutcome"] == "Complete", outputs
        assert judge.job_condition(live.get("trainjob", JOB, NAMESPACE)) == "Complete"
        assert final_accuracy_on_the_node(NAMESPACE) >= 99.0
    finally:
        show_logs(NAMESPACE)
        scenario.destroy(stack, NAMESPACE)
