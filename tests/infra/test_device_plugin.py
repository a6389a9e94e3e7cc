"""The NVIDIA device plugin a platform stack installs where the cloud does not (gpuDevicePlugin)."""

from __future__ import annotations

import pulumi
import pytest

from infra.program.checks import ConfigError
from infra.program.platform.device_plugin import gpu_smoke_outcome
from infra.program.settings.base import GPU_DEVICE_PLUGIN_IMAGE
from infra.review.cluster import cluster_view
from tests.infra.conftest import by_kind, render_config, shipped
from tests.infra.test_platform_stack import JOB, settings_of

PLATFORM = {"stackRole": "platform", "operatorInstall": False, "gpuDevicePlugin": "install"}


def _plugin(values: dict) -> dict:
    (daemon_set,) = by_kind(render_config(values), "DaemonSet")
    return daemon_set


def test_the_plugin_is_upstreams_daemonset_by_digest_on_every_node_idle_without_a_gpu():
    daemon_set = _plugin(PLATFORM)
    assert (daemon_set["metadata"]["name"], daemon_set["metadata"]["namespace"]) == (
        "nvidia-device-plugin-daemonset",
        "kube-system",
    )
    pod = daemon_set["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == GPU_DEVICE_PLUGIN_IMAGE
    assert GPU_DEVICE_PLUGIN_IMAGE.startswith("nvcr.io/nvidia/k8s-device-plugin:v0.19.3@sha256:")
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert container["env"] == [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert pod["volumes"] == [
        {
            "name": "kubelet-device-plugins-dir",
            "hostPath": {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"},
        }
    ]
    assert pod["priorityClassName"] == "system-node-critical"
    assert by_kind(render_config({"stackRole": "platform", "operatorInstall": True}), "DaemonSet") == []


def test_a_mirror_must_be_pinned_and_only_a_platform_or_all_stack_installs_it():
    image = "mirror.example/nvidia/k8s-device-plugin:v0.19.3"
    assert (
        _plugin({**PLATFORM, "gpuDevicePluginImage": image})["spec"]["template"]["spec"]["containers"][0][
            "image"
        ]
        == image
    )
    with pytest.raises(
        ConfigError, match=r"^config ddp-mnist:gpuDevicePluginImage=.* is invalid: must be a pinned"
    ):
        settings_of({**PLATFORM, "gpuDevicePluginImage": "mirror.example/nvidia/k8s-device-plugin"})
    with pytest.raises(
        ConfigError, match=r"gpuDevicePlugin=\"?install\"? is invalid: must be present when stackRole is job"
    ):
        settings_of({**JOB, "jobKind": "indexed-job", "gpuDevicePlugin": "install"})


@pytest.mark.parametrize("stack", ["eks-platform", "aks-platform"])
def test_the_eks_and_aks_platform_stacks_install_it(stack: str) -> None:
    assert [d["metadata"]["name"] for d in by_kind(shipped(stack), "DaemonSet")] == [
        "nvidia-device-plugin-daemonset"
    ]


SMOKE = {**PLATFORM, "gpuSmokeNodeSelector": ["node.kubernetes.io/instance-type=g5.12xlarge"]}


def test_the_gpu_smoke_pod_asks_for_one_gpu_on_the_gpu_nodes_after_the_plugins_rollout():
    rendering = render_config(SMOKE)
    (job,) = [j for j in by_kind(rendering, "Job") if j["metadata"]["name"] == "gpu-smoke"]
    assert job["metadata"]["namespace"] == "ddp-mnist-smoke"
    assert (job["spec"]["backoffLimit"], job["spec"]["activeDeadlineSeconds"]) == (0, 900)
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "g5.12xlarge"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    regs = {r.name: r for r in rendering.registrations}
    assert "gpu-device-plugin-daemonset" in regs["smoke-gpu"].dependencies
    view = cluster_view(rendering.objects, rendering.settings)
    assert view.admission.refusals == []
    assert {view.level_of(p) for p in view.admission.pods if p.owner == "Job/gpu-smoke"} == {"restricted"}


def test_the_gpu_smoke_outcome_names_the_likely_causes_when_no_gpu_pod_started():
    settings, _ = settings_of(SMOKE)
    assert gpu_smoke_outcome({"conditions": [{"type": "Complete", "status": "True"}]}, settings) == "Complete"
    deadline = {
        "conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "x"}]
    }
    with pytest.raises(pulumi.RunError) as failed:
        gpu_smoke_outcome(deadline, settings)
    assert str(failed.value) == (
        "smoke check Job ddp-mnist-smoke/gpu-smoke failed: no pod asking for one nvidia.com/gpu started within "
        "900s on nodes labelled node.kubernetes.io/instance-type=g5.12xlarge: none of them advertises "
        "nvidia.com/gpu (no device plugin: gpuDevicePlugin), no node has these labels, or none is free; see "
        "`kubectl -n ddp-mnist-smoke get events --field-selector involvedObject.name=gpu-smoke` and "
        "`kubectl -n ddp-mnist-smoke describe pods -l job-name=gpu-smoke`"
    )


def test_only_a_platform_or_all_stack_runs_the_gpu_smoke_check_on_well_formed_labels():
    with pytest.raises(
        ConfigError, match=r"gpuSmokeNodeSelector=.* is invalid: must be empty when stackRole is job"
    ):
        settings_of({**JOB, "jobKind": "indexed-job", "gpuSmokeNodeSelector": ["a=b"]})
    with pytest.raises(
        ConfigError,
        match=r"gpuSmokeNodeSelector=\"?gpu\"? is invalid: must be entries 'label-key=label-value'",
    ):
        settings_of({**SMOKE, "gpuSmokeNodeSelector": ["gpu"]})


def _node(labels: dict[str, str], taints: list[dict[str, str]] | None = None) -> dict:
    return {"metadata": {"labels": {"kubernetes.io/os": "linux", **labels}}, "spec": {"taints": taints or []}}


GKE_L4 = _node(
    {"cloud.google.com/gke-accelerator": "nvidia-l4"},
    [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
)
EKS_G5 = _node(
    {"node.kubernetes.io/instance-type": "g5.12xlarge"}, [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
)
AKS_GPUNP = _node({"agentpool": "gpunp"}, [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}])
OPERATOR_MANAGED = _node({"nvidia.com/gpu.deploy.device-plugin": "true"})
WINDOWS = {"metadata": {"labels": {"kubernetes.io/os": "windows"}}, "spec": {}}
CORDONED = _node({}, [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}])
CPU = _node({})


def _runs_on(pod: dict, node: dict) -> bool:
    """Whether the DaemonSet controller places this pod on the node: its nodeSelector, its required
    node affinity and its tolerations against the node's labels and NoSchedule/NoExecute taints
    (kubernetes v1.33.13 `pkg/controller/daemon/daemon_controller.go` NodeShouldRunDaemonPod)."""
    labels = node["metadata"]["labels"]
    if any(labels.get(k) != v for k, v in pod.get("nodeSelector", {}).items()):
        return False
    terms = pod.get("affinity", {}).get("nodeAffinity", {})
    terms = terms.get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", [])
    ops = {
        "In": lambda k, vs: labels.get(k) in vs,
        "NotIn": lambda k, vs: labels.get(k) not in vs,
        "Exists": lambda k, _: k in labels,
        "DoesNotExist": lambda k, _: k not in labels,
    }
    if terms and not any(
        all(ops[e["operator"]](e["key"], e.get("values", [])) for e in t["matchExpressions"]) for t in terms
    ):
        return False
    tolerations = pod.get("tolerations", [])

    def tolerated(taint: dict) -> bool:
        return any(
            t.get("key") in (None, taint["key"])
            and t.get("effect") in (None, taint["effect"])
            and (t["operator"] == "Exists" or t.get("value") == taint.get("value"))
            for t in tolerations
        )

    return all(tolerated(taint) for taint in node["spec"].get("taints", []))


def test_the_plugin_runs_on_linux_gpu_nodes_it_tolerates_and_leaves_those_another_installer_manages():
    aks = _plugin({**PLATFORM, "gpuNodeTolerations": ["sku=gpu:NoSchedule"]})["spec"]["template"]["spec"]
    plain = _plugin(PLATFORM)["spec"]["template"]["spec"]
    assert [_runs_on(aks, n) for n in (EKS_G5, AKS_GPUNP, CPU)] == [True, True, True]
    assert _runs_on(plain, AKS_GPUNP) is False  # AKS's taint only when the stack names it
    for node in (GKE_L4, OPERATOR_MANAGED, WINDOWS, CORDONED):
        assert _runs_on(aks, node) is False, node
    assert _runs_on(aks, _node({"nvidia.com/gpu.deploy.device-plugin": "false"}))


def test_the_aks_platform_stack_tolerates_its_gpu_pools_taint_and_nothing_wider():
    rendering = shipped("aks-platform")
    (daemon_set,) = by_kind(rendering, "DaemonSet")
    assert daemon_set["spec"]["template"]["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "sku", "operator": "Equal", "effect": "NoSchedule", "value": "gpu"},
    ]


def test_a_malformed_gpu_node_toleration_names_its_key():
    with pytest.raises(ConfigError, match=r"gpuNodeTolerations=.*sku=gpu.* is invalid: must be entries"):
        settings_of({**PLATFORM, "gpuNodeTolerations": ["sku=gpu"]})
    with pytest.raises(
        ConfigError, match=r"gpuNodeTolerations=.* is invalid: must be empty when stackRole is job"
    ):
        settings_of({**JOB, "jobKind": "indexed-job", "gpuNodeTolerations": ["sku=gpu:NoSchedule"]})
