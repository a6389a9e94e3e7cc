"""The training job for real: a job stack of the Indexed Job kind, deployed by the real engine, whose two
pods run our trainer image on the real node under runc as uid 1000 with a read-only root, find each
other through the headless Service's DNS names (CoreDNS), train over gloo, and reach 99%.

The claims bind to host directories (conftest.volumes_for); the data one holds MNIST as a seed Job
leaves it (`seedSource: none` is the stack's setting for a volume filled by other means). Every figure
asserted is the trainer's own: its log read through the kubelet, its checkpoint on the volume.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from infra.offline.realcluster.node.config import NODE_NAME
from tests.e2e import live
from tests.e2e.project import Backend
from tests.e2e_local import scenario
from tests.e2e_node.conftest import TRAINER_UID, node_job_config, show_logs

pytestmark = pytest.mark.e2e_node

NAMESPACE = "node-indexed"
INDEX = "batch.kubernetes.io/job-completion-index"
ACCURACY = re.compile(r"test_acc=(\d+\.\d+)%")


def test_the_indexed_job_trains_to_99_percent_on_the_real_node(
    backend: Backend, node_images: dict[str, str], volumes_for: Callable[[str], dict[str, Path]]
) -> None:
    volumes = volumes_for(NAMESPACE)
    config = node_job_config(node_images["trainer"], NAMESPACE, jobKind="indexed-job")
    stack = scenario.stack(backend, NAMESPACE, config)
    try:
        stack.up(on_output=print, show_secrets=False)
        pods = live.items("pods", NAMESPACE, INDEX)
        assert sorted(p["spec"]["nodeName"] for p in pods) == [NODE_NAME, NODE_NAME]
        assert {p["status"]["phase"] for p in pods} == {"Succeeded"}
        main = next(p for p in pods if p["metadata"]["labels"][INDEX] == "0")
        logs = live.kubectl("logs", "-n", NAMESPACE, main["metadata"]["name"])
        accuracies = [float(a) for a in ACCURACY.findall(logs)]
        assert accuracies and accuracies[-1] >= 99.0, logs[-3000:]
        written = [p for p in volumes["checkpoints"].rglob("*") if p.is_file()]
        assert written, "rank 0 wrote no checkpoint onto the volume"
        assert {p.stat().st_uid for p in written} == {TRAINER_UID}
    finally:
        show_logs(NAMESPACE)
        scenario.destroy(stack, NAMESPACE)
