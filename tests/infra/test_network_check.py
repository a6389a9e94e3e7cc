"""The platform's NetworkPolicy check (infra/program/platform/network_check.py): two indexed pods in the smoke
namespace, one port a policy opens and one the default deny closes; a closed port that answers fails
`pulumi up` with one line naming the cloud's switch. What the pods do on a cluster is shown by the real
node's tier (tests/e2e_node/test_trainjob.py); here, what the stack renders and how outcomes read."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from infra.program.platform.network_check import (
    CLOSED_PORT,
    CONTAINER,
    EXIT_NO_OPEN_PATH,
    EXIT_NOT_ENFORCED,
    INDEX_LABEL,
    JOB_LABEL,
    NETWORK_JOB,
    OPEN_PORT,
    network_outcome,
    script,
)
from infra.program.settings import OPERATOR_INIT_IMAGE, SMOKE_NAMESPACE, Settings
from infra.review.admission import admit, namespace_of
from infra.review.cluster import controllers_for
from infra.review.effective import derive
from infra.review.manifest import render
from tests.infra.conftest import BASE, PLATFORM_STACKS, by_kind, one, shipped, stack_config

PLATFORM = {**BASE, "stackRole": "platform", "networkPolicySmokeCheck": True}


def in_smoke(rendering: Any, kind: str) -> list[dict[str, Any]]:
    return [
        o
        for o in rendering.objects
        if o["kind"] == kind and o["metadata"].get("namespace") == SMOKE_NAMESPACE
    ]


def pod_labels(job: dict[str, Any], index: int) -> dict[str, str]:
    """The labels the Job controller gives an Indexed Job's pod (besides the template's)."""
    return {
        **job["spec"]["template"]["metadata"]["labels"],
        JOB_LABEL: job["metadata"]["name"],
        "job-name": job["metadata"]["name"],
        INDEX_LABEL: str(index),
    }


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, selector  # no expressions in these policies
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def allowed(
    policies: list[dict[str, Any]], source: dict[str, str], target: dict[str, str], port: int
) -> bool:
    """NetworkPolicy semantics in one namespace (TCP): the egress side of `source` and the ingress side of
    `target` must both allow; a side no policy of that type selects allows everything."""

    def side(pod: dict[str, str], peer: dict[str, str], kind: str, rules_key: str, peer_key: str) -> bool:
        applying = [
            p for p in policies if kind in p["spec"]["policyTypes"] and selects(p["spec"]["podSelector"], pod)
        ]
        if not applying:
            return True
        for policy in applying:
            for rule in policy["spec"].get(rules_key) or []:
                peers = rule.get(peer_key)
                peer_ok = peers is None or any(
                    "podSelector" in p and selects(p["podSelector"], peer) for p in peers
                )
                ports = rule.get("ports")
                port_ok = ports is None or any(
                    p.get("protocol", "TCP") == "TCP" and p["port"] == port for p in ports
                )
                if peer_ok and port_ok:
                    return True
        return False

    return side(source, target, "Egress", "egress", "to") and side(
        target, source, "Ingress", "ingress", "from"
    )


def test_a_platform_stack_checks_enforcement_with_two_indexed_pods_after_the_policies():
    rendering = render(stack_config(PLATFORM))
    job = one(rendering, "Job")
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (
        "Indexed",
        2,
        2,
        0,
    )
    assert spec["activeDeadlineSeconds"] > 0 and spec["ttlSecondsAfterFinished"] > 0
    # The probe's own exits fail the Job at once, their code in the condition's message.
    (rule,) = spec["podFailurePolicy"]["rules"]
    assert rule == {
        "action": "FailJob",
        "onExitCodes": {
            "containerName": CONTAINER,
            "operator": "In",
            "values": [EXIT_NOT_ENFORCED, EXIT_NO_OPEN_PATH],
        },
    }
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["subdomain"] == NETWORK_JOB
    (container,) = pod["containers"]
    assert container["name"] == CONTAINER and container["image"] == OPERATOR_INIT_IMAGE
    assert container["command"][:2] == ["sh", "-c"] and container["command"][2] == script()
    assert pod["automountServiceAccountToken"] is False
    # The waited-for outcome is a stack output; under mocks nothing ran.
    assert rendering.outputs["networkPolicySmokeCheck"] == "unknown (not awaited)"
    # The Job comes after its Service, the policies that open its port and the namespace's default deny.
    (reg,) = [r for r in rendering.registrations if r.name == "smoke-network-check"]
    assert set(reg.dependencies) >= {
        "smoke-network",  # the namespace's default deny (infra/program/platform/smoke.py)
        "smoke-network-check-service",
        "smoke-network-check-open-in",
        "smoke-network-check-open-out",
    }


def test_its_pods_are_admitted_by_the_restricted_namespace():
    rendering = render(stack_config(PLATFORM))
    namespace = namespace_of(rendering.objects, SMOKE_NAMESPACE, "privileged")
    assert namespace.level == "restricted"
    pods = derive(by_kind(rendering, "Job"), controllers_for(rendering.settings)).pods
    assert len(pods) == 2  # the Indexed Job's two pods
    assert admit(pods, namespace).refusals == []
    # The model refuses what restricted refuses: the same pods as root are not admitted.
    job = one(rendering, "Job")
    job["spec"]["template"]["spec"]["securityContext"]["runAsUser"] = 0
    job["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] = False
    assert admit(derive([job], controllers_for(rendering.settings)).pods, namespace).refusals


def test_the_policies_open_the_open_port_from_the_probe_to_the_target_and_nothing_else():
    rendering = render(stack_config(PLATFORM))
    policies = in_smoke(rendering, "NetworkPolicy")
    job = one(rendering, "Job")
    target, probe = pod_labels(job, 0), pod_labels(job, 1)
    assert allowed(policies, probe, target, OPEN_PORT)
    assert not allowed(policies, probe, target, CLOSED_PORT)  # the default deny's, the probe's test
    assert not allowed(policies, target, probe, OPEN_PORT)
    # The headless Service names the target for the probe (hostname.subdomain).
    (service,) = in_smoke(rendering, "Service")
    assert service["metadata"]["name"] == NETWORK_JOB and service["spec"]["clusterIP"] == "None"
    assert selects({"matchLabels": service["spec"]["selector"]}, target)
    # Without the opening policies, the open port would be closed too: the check relies on them.
    only_default = [p for p in policies if p["spec"]["podSelector"] == {}]
    assert not allowed(only_default, probe, target, OPEN_PORT)


@pytest.mark.parametrize("name", PLATFORM_STACKS)
def test_every_shipped_platform_stack_runs_it(name):
    rendering = shipped(name)
    assert [j["metadata"]["name"] for j in in_smoke(rendering, "Job")].count(NETWORK_JOB) == 1
    assert "networkPolicySmokeCheck" in rendering.outputs


def test_it_can_be_switched_off_and_job_stacks_never_run_it():
    assert not in_smoke(render(stack_config({**PLATFORM, "networkPolicySmokeCheck": False})), "Job")
    assert not in_smoke(shipped("gke-gpu"), "Job")


def settings_for(storage: str) -> Settings:
    presets = {
        "aws-efs": {"efsFileSystemId": "fs-0123456789abcdef0"},
        "gke-filestore": {},
        "azure-files": {},
        "nfs-csi": {"nfsServer": "nfs.example.internal"},
    }
    return Settings.model_validate({"storageProvider": storage, "stackRole": "platform", **presets[storage]})


def failed(code: int | None, reason: str = "PodFailurePolicy", kind: str = "FailureTarget") -> dict[str, Any]:
    # The Job controller's message (kubernetes v1.33.13 pkg/controller/job/pod_failure_policy.go).
    message = (
        f"Container probe for pod {SMOKE_NAMESPACE}/{NETWORK_JOB}-1-x7k2p failed with exit code {code} "
        "matching FailJob rule at index 0"
        if code is not None
        else "Job was active longer than specified deadline"
    )
    return {"conditions": [{"type": kind, "status": "True", "reason": reason, "message": message}]}


@pytest.mark.parametrize(
    ("storage", "switch"),
    [
        ("aws-efs", "vpc-cni add-on (v1.14 or later) with enableNetworkPolicy"),
        ("gke-filestore", "Dataplane V2"),
        ("azure-files", "--network-policy cilium"),
        ("nfs-csi", "a NetworkPolicy engine in the cluster's network plugin"),
    ],
)
def test_a_closed_port_that_answers_fails_up_naming_the_clouds_switch(storage, switch):
    with pytest.raises(pulumi.RunError) as raised:
        network_outcome(failed(EXIT_NOT_ENFORCED), settings_for(storage))
    line = str(raised.value)
    assert "\n" not in line
    assert line.startswith(
        f"smoke check Job {SMOKE_NAMESPACE}/{NETWORK_JOB} failed: NetworkPolicy is not enforced: a pod "
        f"reached port {CLOSED_PORT}"
    )
    assert switch in line and "docs/CLOUDS.md#networkpolicy-must-be-enforced" in line
    assert line.endswith(f"see `kubectl -n {SMOKE_NAMESPACE} logs -l {JOB_LABEL}={NETWORK_JOB} --prefix`")


def test_other_failures_say_their_own_cause():
    settings = settings_for("nfs-csi")
    with pytest.raises(pulumi.RunError, match=f"never reached port {OPEN_PORT} of another pod"):
        network_outcome(failed(EXIT_NO_OPEN_PATH), settings)
    with pytest.raises(pulumi.RunError, match="did not finish within 300s: not started .*busybox nc"):
        network_outcome(failed(None, "DeadlineExceeded", "Failed"), settings)
    with pytest.raises(pulumi.RunError, match="BackoffLimitExceeded: Job has reached"):
        network_outcome(
            {
                "conditions": [
                    {
                        "type": "Failed",
                        "status": "True",
                        "reason": "BackoffLimitExceeded",
                        "message": "Job has reached the specified backoff limit",
                    }
                ]
            },
            settings,
        )
    assert network_outcome({"conditions": [{"type": "Complete", "status": "True"}]}, settings) == "Complete"
    assert network_outcome({"conditions": []}, settings) == "unknown (not awaited)"
