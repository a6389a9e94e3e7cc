"""The training job for real: a job stack of the Indexed Job kind, deployed by the real engine, whose two
pods run our trainer image on the real node under runc as uid 1000 with a read-only root, find each
other through the headless Service's DNS names (CoreDNS), train over gloo, and reach 99%.

The claims bind to host directories (conftest.volumes_for); the data one holds MNIST as a seed Job
leaves it (`seedSource: none` is the stack's setting for a volume filled by other means). Every figure
asserted is the trainer's own: its log read through the kubelet, its checkpoint on the volume.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.project import Backend
from tests.e2e_local import scenario
from tests.e2e_node.conftest import (
    TRAINER_UID,
    final_accuracy_on_the_node,
    node_job_config,
    show_logs,
    startup_table,
)

pytestmark = pytest.mark.e2e_node

NAMESPACE = "node-indexed"


def test_the_indexed_job_trains_to_99_percent_on_the_real_node(
    backend: Backend, node_images: dict[str, str], volumes_for: Callable[[str], dict[str, Path]]
) -> None:
    volumes = volumes_for(NAMESPACE)
    config = node_job_config(node_images["trainer"], NAMESPACE, jobKind="indexed-job")
    stack = scenario.stack(backend, NAMESPACE, config)
    try:
        stack.up(on_output=print, show_secrets=False)
        assert final_accuracy_on_the_node(NAMESPACE) >= 99.0
        written = [p for p in volumes["checkpoints"].rglob("*") if p.is_file()]
        assert written, "rank 0 wrote no checkpoint onto the volume"
        assert {p.stat().st_uid for p in written} == {TRAINER_UID}
        print("start-up on the node, seconds from the first pod's creation:")
        print(startup_table(NAMESPACE, volumes["checkpoints"]))
    finally:
        show_logs(NAMESPACE)
        scenario.destroy(stack, NAMESPACE)
