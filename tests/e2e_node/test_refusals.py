"""Run-time refusals that only a real node shows, failing `up` fast with one line: an image the node does
not have and cannot pull, and a checkpoint volume the trainer's uid cannot write (which, before the
trainer checked it at start, trained a whole epoch and then died with a traceback, exit 1).

`jobPlacementTimeoutSeconds` bounds how long `up` waits on a container that cannot start
(infra/program/job/placement.py); the node's kubelet and containerd say why.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pulumi import automation as auto

from tests.e2e import live
from tests.e2e.project import Backend
from tests.e2e_local import scenario
from tests.e2e_node.conftest import node_job_config, show_logs

pytestmark = pytest.mark.e2e_node

BOUND_S = 20  # jobPlacementTimeoutSeconds
MISSING = "ddp-mnist.local/trainer@sha256:" + "0" * 64


def failed_up(stack: auto.Stack) -> tuple[str, float]:
    """`up`'s error lines (the program's own, as the engine prints them) and its wall time."""
    started = time.monotonic()
    with pytest.raises(auto.CommandError) as failed:
        stack.up(on_output=print, show_secrets=False)
    lines = [line.strip() for line in str(failed.value).splitlines() if line.strip().startswith("error: ")]
    return "\n".join(lines), time.monotonic() - started


def test_an_image_the_node_cannot_pull_fails_up_within_the_bound(
    backend: Backend, volumes_for: Callable[[str], dict[str, Path]]
) -> None:
    namespace = "node-no-image"
    volumes_for(namespace)
    config = node_job_config(
        MISSING, namespace, jobKind="indexed-job", jobPlacementTimeoutSeconds=str(BOUND_S)
    )
    stack = scenario.stack(backend, namespace, config)
    try:
        errors, seconds = failed_up(stack)
        assert "cannot start after" in errors and (
            "ImagePullBackOff" in errors or "ErrImagePull" in errors
        ), errors
        assert MISSING in errors, errors
        assert seconds < BOUND_S + 90, seconds
    finally:
        scenario.destroy(stack, namespace)


def test_a_checkpoint_volume_the_trainer_cannot_write_fails_up_with_one_line(
    backend: Backend, node_images: dict[str, str], volumes_for: Callable[[str], dict[str, Path]]
) -> None:
    namespace = "node-read-only"
    volumes = volumes_for(namespace)
    os.chown(volumes["checkpoints"], 0, 0)  # root's, 0755: uid 1000 can read it, not write it
    volumes["checkpoints"].chmod(0o755)
    config = node_job_config(node_images["trainer"], namespace, jobKind="indexed-job")
    stack = scenario.stack(backend, namespace, config)
    try:
        errors, seconds = failed_up(stack)
        # Rank 0 fails before it loads the data (trainer exit 5), not after an epoch with a traceback.
        assert "failed with exit code 5 matching FailJob" in errors, errors
        assert seconds < 60, seconds
        logs = live.kubectl(
            "logs", "-n", namespace, "--tail=-1", "-l", "batch.kubernetes.io/job-completion-index=0"
        )
        expected = (
            "trainer: output: cannot write /checkpoints/mnist-r1: Permission denied; it must be writable by"
        )
        assert f"{expected} uid 1000 gid 1000" in logs, logs
        # The cause is in `up`'s own error: the kubelet's termination message (the log's last lines, by
        # FallbackToLogsOnError) ends with the launcher's line, which quotes the rank's.
        # It quotes the pod the Job's condition names (rank 0's), not rank 1's reaction to it after.
        said = f"the named Pod {namespace}/"
        assert said in errors and "exited 5 (Error): launch: worker rank 0 failed" in errors, errors
        assert expected in errors.split(said, 1)[1], errors
    finally:
        show_logs(namespace)
        scenario.destroy(stack, namespace)
