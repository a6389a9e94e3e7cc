"""The NVIDIA device plugin a platform stack installs where the cloud does not (gpuDevicePlugin)."""

from __future__ import annotations

import pulumi
import pytest

from infra.offline.cluster import cluster_view
from infra.offline.manifest import render
from infra.offline.stackconfig import load_stack
from infra.program.checks import ConfigError
from infra.program.device_plugin import gpu_smoke_outcome
from infra.program.settings.base import GPU_DEVICE_PLUGIN_IMAGE
from tests.infra.conftest import by_kind, render_config
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
    assert pod["tolerations"] == [{"operator": "Exists"}]  # AKS's sku=gpu taint too
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
    assert [d["metadata"]["name"] for d in by_kind(render(load_stack(stack)), "DaemonSet")] == [
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
    assert pod["tolerations"] == [{"operator": "Exists"}]
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
