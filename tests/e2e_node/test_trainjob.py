"""A Kubeflow Trainer v2 TrainJob trains for real on the node: the platform stack installs Trainer v2.3.0
and JobSet v0.12.0 (their controllers run as the tier's local processes, infra/offline/realcluster/
operators.py), the real Trainer controller makes the JobSet, JobSet its Job and headless Service, and the
Job's two pods run our trainer image on the real node: the torch plugin's PET_MASTER_ADDR,
`<trainjob>-node-0-0.<trainjob>`, resolves through CoreDNS, and they reach 99% over gloo.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pulumi import automation as auto

from infra.offline.realcluster.node.config import NODE_NAME
from tests.e2e import judge, live
from tests.e2e.project import Backend
from tests.e2e_local import scenario
from tests.e2e_node.conftest import node_job_config, show_logs

pytestmark = pytest.mark.e2e_node

NAMESPACE = "node-trainjob"
JOB = "mnist-r1"
INDEX = "batch.kubernetes.io/job-completion-index"
ACCURACY = re.compile(r"test_acc=(\d+\.\d+)%")


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
        pods = live.items("pods", NAMESPACE, INDEX)
        assert sorted(p["spec"]["nodeName"] for p in pods) == [NODE_NAME, NODE_NAME]
        assert {p["status"]["phase"] for p in pods} == {"Succeeded"}
        main = next(p for p in pods if p["metadata"]["labels"][INDEX] == "0")
        logs = live.kubectl("logs", "-n", NAMESPACE, main["metadata"]["name"])
        accuracies = [float(a) for a in ACCURACY.findall(logs)]
        assert accuracies and accuracies[-1] >= 99.0, logs[-3000:]
    finally:
        show_logs(NAMESPACE)
        scenario.destroy(stack, NAMESPACE)
