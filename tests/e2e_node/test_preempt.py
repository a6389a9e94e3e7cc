"""Preemption for real: a training pod evicted through the API in its second epoch. The kubelet's
SIGTERM reaches the trainer, the ranks stop together at the step they agree on, rank 0 checkpoints
it, the evicted pod exits 143 and its peer 201 (the trainer's own exits, read from the kubelet's
container statuses), the Job's podFailurePolicy ignores both, and the new pods resume mid-epoch and
end with the model.pt of the same job run without interruption, bit for bit.

What the local cluster tier's scenario 25 shows with KWOK writing the exits, shown here by the real
node, whose pods run the trainer.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from infra.program.common.meta import JOB_LABEL
from tests.e2e import live
from tests.e2e.project import Backend
from tests.e2e_local import scenario
from tests.e2e_node.conftest import node_job_config, show_logs

pytestmark = pytest.mark.e2e_node

# Two epochs at a global batch of 256 (235 steps each): long enough to evict a pod mid-epoch 2.
RECIPE = {"jobKind": "indexed-job", "jobEpochs": "2", "jobBatchSize": "256"}
JOB = "mnist-r1"  # the dev stack's jobName and the default run id
INDEX = "batch.kubernetes.io/job-completion-index"
STOPPED = re.compile(
    r"trainer: stop at step \d+/\d+ of epoch 2: SIGTERM on a rank \(on this one .*; checkpoint "
)


def model_digest(checkpoints: Path) -> str:
    (model,) = checkpoints.rglob("model.pt")
    return hashlib.sha256(model.read_bytes()).hexdigest()


def wait_for_log(namespace: str, pod: str, text: str, timeout_s: float = 300) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            logs = live.kubectl("logs", "-n", namespace, pod)
        except RuntimeError:
            logs = ""  # the container has not started yet
        if text in logs:
            return logs
        time.sleep(1)
    raise AssertionError(f"{namespace}/{pod} did not log {text!r} in {timeout_s} s")


def terminated(pod: dict) -> dict:
    (status,) = pod["status"]["containerStatuses"]
    return dict(status["state"].get("terminated") or {})


def test_an_evicted_pod_stops_its_job_at_a_step_and_the_run_ends_as_if_uninterrupted(
    backend: Backend, node_images: dict[str, str], volumes_for: Callable[[str], dict[str, Path]]
) -> None:
    image = node_images["trainer"]
    stacks = {}
    try:
        whole = volumes_for("node-whole")
        stacks["node-whole"] = scenario.stack(
            backend, "node-whole", node_job_config(image, "node-whole", **RECIPE)
        )
        stacks["node-whole"].up(on_output=print, show_secrets=False)  # waits for the job
        preempted = volumes_for("node-preempted")
        config = node_job_config(image, "node-preempted", **RECIPE, jobWait="false")
        stacks["node-preempted"] = scenario.stack(backend, "node-preempted", config)
        stacks["node-preempted"].up(on_output=print, show_secrets=False)
        seen = preempt_in_epoch_2("node-preempted")
        assert scenario.wait_outcome("job", JOB, "node-preempted", timeout_s=600) == "Complete"
        evicted, peer = seen["evicted"], seen["peer"]
        assert scenario.disruption(evicted) is not None, evicted["status"]
        assert terminated(evicted)["exitCode"] == 143, evicted["status"]
        assert terminated(peer)["exitCode"] == 201, peer["status"]
        # Rank 0 was the pod sent SIGTERM, and checkpointed the step both ranks stopped at, in epoch 2.
        assert STOPPED.search(seen["evicted_logs"]), seen["evicted_logs"][-3000:]
        job = live.get("job", JOB, "node-preempted")
        assert (job["status"].get("failed", 0), job["status"]["succeeded"]) == (0, 2), job["status"]
        # The same model.pt, bit for bit, as the run no one interrupted.
        assert model_digest(preempted["checkpoints"]) == model_digest(whole["checkpoints"])
    finally:
        for namespace, stack in stacks.items():
            show_logs(namespace)
            scenario.destroy(stack, namespace)


def preempt_in_epoch_2(namespace: str) -> dict:
    """Evict rank 0's pod once it logged its first epoch; the evicted pod and its peer once both ended."""
    pods = scenario.wait_running(namespace, f"{JOB_LABEL}={JOB}", 2, timeout_s=300)
    assert len(pods) == 2, f"no two running pods of {JOB} in {namespace}"
    rank0, peer = (next(p for p in pods if p["metadata"]["labels"][INDEX] == i) for i in ("0", "1"))
    name = rank0["metadata"]["name"]
    wait_for_log(namespace, name, "trainer: epoch 1/2 ")  # the first epoch's summary line
    # Follow the pod's log through the kubelet until its container ends: once the evicted pod is
    # gone, the kubelet has removed its container and its log with it.
    follow = subprocess.Popen(
        ["kubectl", "logs", "-f", "-n", namespace, name], stdout=subprocess.PIPE, text=True
    )
    scenario.evict(name, namespace)
    ended = {}
    deadline = time.monotonic() + 180
    while len(ended) < 2 and time.monotonic() < deadline:
        for pod in (rank0["metadata"]["name"], peer["metadata"]["name"]):
            got = live.get("pod", pod, namespace) if live.exists("pod", pod, namespace) else None
            if got is not None and got["status"].get("phase") in ("Failed", "Succeeded"):
                ended[pod] = got
        time.sleep(1)
    assert len(ended) == 2, f"the evicted pod and its peer did not both end: {sorted(ended)}"
    logs, _ = follow.communicate(timeout=60)
    return {"evicted": ended[name], "peer": ended[peer["metadata"]["name"]], "evicted_logs": logs}
