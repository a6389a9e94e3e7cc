"""A Kubeflow Trainer v2 TrainJob trains for real on the node: the platform stack installs Trainer v2.3.0
and JobSet v0.12.0 (their controllers run as the tier's local processes, infra/localcluster/
operators.py), the real Trainer controller makes the JobSet, JobSet its Job and headless Service, and the
Job's two pods run our trainer image on the real node: the torch plugin's PET_MASTER_ADDR,
`<trainjob>-node-0-0.<trainjob>`, resolves through CoreDNS, and they reach 99% over gloo.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pulumi
import pytest
from pulumi import automation as auto

from infra.localcluster.node.config import NODE_NAME
from infra.program.platform.network_check import (
    CLOSED_PORT,
    INDEX_LABEL,
    JOB_LABEL,
    NETWORK_JOB,
    network_outcome,
)
from infra.program.settings import SMOKE_NAMESPACE, Settings
from tests.e2e import judge, live
from tests.e2e.project import Backend
from tests.e2e_local import scenario
from tests.e2e_node.conftest import (
    final_accuracy_on_the_node,
    node_job_config,
    place_on_the_node,
    show_logs,
)

pytestmark = pytest.mark.e2e_node

NAMESPACE = "node-trainjob"
JOB = "mnist-r1"


@pytest.fixture(scope="module")
def platform(backend: Backend, node_images: dict[str, str]) -> Iterator[auto.Stack]:
    """The platform stack in gke-platform's shape (the operator and Trainer v2 with JobSet), without the
    NVIDIA device plugin: its DaemonSet's image is not on this machine. Its smoke checks run on the real
    node (their namespace placed there) in the tools image, as operatorInitContainerImage: the
    PyTorchJob's Worker through the operator's init container, the TrainJob's two pods, and the
    NetworkPolicy check's two pods under kube-router."""
    config = {
        key: value
        for key, value in scenario.platform_config().items()
        if key not in ("ddp-mnist:gpuDevicePlugin", "ddp-mnist:gpuSmokeNodeSelector")
    }
    config.update(
        {
            "ddp-mnist:trainerInstall": "true",
            "ddp-mnist:allowBothOperators": "true",
            "ddp-mnist:operatorInitContainerImage": node_images["tools"],
        }
    )
    place_on_the_node(SMOKE_NAMESPACE)
    stack = scenario.stack(backend, "node-platform", config)
    outputs = scenario.outputs(stack.up(on_output=print, show_secrets=False))
    assert outputs["operatorSmokeCheck"] == "Succeeded"
    assert outputs["trainerSmokeCheck"] == "Complete"
    assert outputs["networkPolicySmokeCheck"] == "Complete"
    # Its pods ran here, under the engine, and the probe saw the open port answer and the closed not.
    assert "NetworkPolicy is enforced" in network_probe_log(), "the probe's last line"
    yield stack
    # Destroyed, so a later scenario's stack that installs the operators (the tutorial's `dev`, stack
    # role `all`) starts from a cluster without them, as the tutorial's reader does.
    if not scenario.KEEP:
        stack.destroy(on_output=print)


def network_probe_log() -> str:
    """The NetworkPolicy check's probe's log (index 1), once both its pods ran on the real node."""
    pods = live.items("pod", SMOKE_NAMESPACE, f"{JOB_LABEL}={NETWORK_JOB}")
    assert sorted(p["spec"]["nodeName"] for p in pods) == [NODE_NAME, NODE_NAME], pods
    (probe,) = [p for p in pods if p["metadata"]["labels"][INDEX_LABEL] == "1"]
    log = live.kubectl("-n", SMOKE_NAMESPACE, "logs", probe["metadata"]["name"])
    print(log)
    return log


def test_the_network_check_fails_up_where_the_closed_port_answers(platform: auto.Stack) -> None:
    """The check's failing side on the same node: where traffic the namespace's default deny closes gets
    through (here a policy opening every pod of the smoke namespace to everything, as a cluster without
    an engine leaves them), the deployed check's own Job, run again, fails on the probe's exit 3, and
    its status reads as the one line naming the switch."""
    deployed = live.get("job", NETWORK_JOB, SMOKE_NAMESPACE)
    live.kubectl("delete", "job", NETWORK_JOB, "-n", SMOKE_NAMESPACE, "--cascade=foreground", "--wait=true")
    open_all = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "open-everything", "namespace": SMOKE_NAMESPACE},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [{}], "egress": [{}]},
    }
    # The same Job as deployed, without what the API server generated for it.
    generated = ("controller-uid", "batch.kubernetes.io/controller-uid")
    template = deployed["spec"]["template"]
    template["metadata"]["labels"] = {
        k: v for k, v in template["metadata"]["labels"].items() if k not in generated
    }
    spec = {k: v for k, v in deployed["spec"].items() if k not in ("selector", "manualSelector")}
    again = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": NETWORK_JOB, "namespace": SMOKE_NAMESPACE},
        "spec": spec,
    }
    live.kubectl("apply", "-f", "-", stdin=json.dumps(open_all))
    try:
        live.kubectl("create", "-f", "-", stdin=json.dumps(again))
        deadline = time.monotonic() + 300
        while True:
            status = live.get("job", NETWORK_JOB, SMOKE_NAMESPACE).get("status", {})
            types = {c["type"] for c in status.get("conditions", []) if c["status"] == "True"}
            if types & {"FailureTarget", "Failed", "Complete"}:
                break
            assert time.monotonic() < deadline, f"the check did not end in 300 s: {status}"
            time.sleep(2)
        assert "NetworkPolicy is not enforced" in network_probe_log()
        with pytest.raises(pulumi.RunError) as raised:
            network_outcome(
                status, Settings.model_validate({"stackRole": "platform", "nfsServer": "n.example"})
            )
        assert f"NetworkPolicy is not enforced: a pod reached port {CLOSED_PORT}" in str(raised.value)
        print(raised.value)
    finally:
        live.kubectl(
            "delete", "networkpolicy", "open-everything", "-n", SMOKE_NAMESPACE, "--ignore-not-found"
        )
        live.kubectl(
            "delete", "job", NETWORK_JOB, "-n", SMOKE_NAMESPACE, "--ignore-not-found", "--wait=false"
        )


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
