"""The NVIDIA device plugin, for clusters whose cloud leaves it to the user (gpuDevicePlugin: install).

A GPU node advertises `nvidia.com/gpu` only once a device plugin registers it with the kubelet; without
one every pod asking for a GPU stays Pending ("Insufficient nvidia.com/gpu"). GKE installs the plugin on
its GPU node pools itself, as do EKS's Bottlerocket NVIDIA AMIs and eksctl's GPU node groups; EKS's
AL2023 NVIDIA AMIs bring the driver and the container runtime, not the plugin (EKS user guide, "Install
Kubernetes device plugin for GPUs"), and AKS GPU node pools without the GPU Operator leave it to the
user too.

The DaemonSet is upstream's static manifest (NVIDIA/k8s-device-plugin v0.19.3
`deployments/static/nvidia-device-plugin.yml`) with what a mixed cluster needs on top:
- it tolerates `nvidia.com/gpu` (upstream's) and the GPU pools' own taints, gpuNodeTolerations (AKS
  taints its GPU pools `sku=gpu:NoSchedule`), nothing else: a node being drained or cordoned
  (`node.kubernetes.io/unschedulable`), a control-plane node or another team's tainted pool gets no pod;
- it runs on Linux nodes only (`kubernetes.io/os: linux`), and leaves the nodes whose plugin another
  installer manages: the GPU Operator's (labelled `nvidia.com/gpu.deploy.device-plugin=true`, the
  label its own plugin DaemonSet selects) and GKE's GPU nodes (`cloud.google.com/gke-accelerator`,
  which GKE's `nvidia-gpu-device-plugin` selects). Two plugins registering `nvidia.com/gpu` on one node
  replace each other's registration at the kubelet;
- `FAIL_ON_INIT_ERROR=false`: on a node without an NVIDIA GPU the plugin finds no device and idles
  instead of crash-looping (upstream README, "fail-on-init-error");
- the image pinned by digest, a seccomp profile, small requests.
What Pod Security "restricted" forbids and the plugin needs: the hostPath volume
`/var/lib/kubelet/device-plugins` (the kubelet's registration socket) and running as root (the directory
is root's). So it runs in `kube-system`, upstream's namespace, which managed clusters exempt from Pod
Security admission; the policy pack skips it there as the platform's own install (policy/crossguard.py).
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.program.common.meta import labels
from infra.program.common.outcome import status_field
from infra.program.common.scheduling import GPU_TOLERATION, tolerations
from infra.program.platform.smoke_pod import smoke_pod
from infra.program.settings import PROJECT, SMOKE_NAMESPACE, Settings

core = k8s.core.v1
NAMESPACE = "kube-system"
NAME = "nvidia-device-plugin-daemonset"  # upstream's: a second install collides instead of doubling up
SELECTOR = {"name": "nvidia-device-plugin-ds"}
SOCKETS = "/var/lib/kubelet/device-plugins"
# The GPU smoke check (gpuSmokeNodeSelector), run by the platform's SmokeCheck in its namespace.
GPU_JOB_NAME = "gpu-smoke"
GPU_DEADLINE_SECONDS = 900  # a GPU node may have to be added by an autoscaler first
GPU_WAIT_SECONDS = 1200
GPU_TTL_SECONDS = 600  # the finished Job (and its pod) is deleted after this


# Nodes whose device plugin another installer manages: the GPU Operator's, GKE's.
MANAGED_ELSEWHERE = (
    core.NodeSelectorRequirementArgs(
        key="nvidia.com/gpu.deploy.device-plugin", operator="NotIn", values=["true"]
    ),
    core.NodeSelectorRequirementArgs(key="cloud.google.com/gke-accelerator", operator="DoesNotExist"),
)


def gpu_node_tolerations(settings: Settings) -> list[dict[str, str]]:
    """What the plugin and the GPU smoke pod tolerate: nvidia.com/gpu and gpuNodeTolerations."""
    extra = tolerations(settings.gpu_node_tolerations)
    return [dict(GPU_TOLERATION), *(t for t in extra if t != GPU_TOLERATION)]


def device_plugin_pod_spec(settings: Settings) -> core.PodSpecArgs:
    """The plugin's pod: upstream's container on the Linux GPU nodes no other installer manages,
    tolerating their taints, idle on nodes without a GPU."""
    return core.PodSpecArgs(
        node_selector={"kubernetes.io/os": "linux"},
        affinity=core.AffinityArgs(
            node_affinity=core.NodeAffinityArgs(
                required_during_scheduling_ignored_during_execution=core.NodeSelectorArgs(
                    node_selector_terms=[core.NodeSelectorTermArgs(match_expressions=list(MANAGED_ELSEWHERE))]
                )
            )
        ),
        tolerations=[
            core.TolerationArgs(
                key=t["key"], operator=t["operator"], value=t.get("value"), effect=t["effect"]
            )
            for t in gpu_node_tolerations(settings)
        ],
        priority_class_name="system-node-critical",
        automount_service_account_token=False,
        security_context=core.PodSecurityContextArgs(
            seccomp_profile=core.SeccompProfileArgs(type="RuntimeDefault")
        ),
        containers=[
            core.ContainerArgs(
                name="nvidia-device-plugin-ctr",
                image=settings.gpu_device_plugin_image,
                env=[core.EnvVarArgs(name="FAIL_ON_INIT_ERROR", value="false")],
                resources=core.ResourceRequirementsArgs(
                    requests={"cpu": "10m", "memory": "32Mi"}, limits={"memory": "256Mi"}
                ),
                security_context=core.SecurityContextArgs(
                    allow_privilege_escalation=False,
                    capabilities=core.CapabilitiesArgs(drop=["ALL"]),
                ),
                volume_mounts=[core.VolumeMountArgs(name="kubelet-device-plugins-dir", mount_path=SOCKETS)],
            )
        ],
        volumes=[
            core.VolumeArgs(
                name="kubelet-device-plugins-dir",
                host_path=core.HostPathVolumeSourceArgs(path=SOCKETS, type="Directory"),
            )
        ],
    )


class NvidiaDevicePlugin(pulumi.ComponentResource):
    """The device plugin's DaemonSet; `pulumi up` waits for its rollout on every node (the provider's
    DaemonSet await)."""

    def __init__(self, name: str, settings: Settings, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{PROJECT}:platform:NvidiaDevicePlugin", name, {}, opts)
        self.daemon_set = k8s.apps.v1.DaemonSet(
            f"{name}-daemonset",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=NAME, namespace=NAMESPACE, labels=labels(settings, "gpu-device-plugin")
            ),
            spec=k8s.apps.v1.DaemonSetSpecArgs(
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=SELECTOR),
                update_strategy=k8s.apps.v1.DaemonSetUpdateStrategyArgs(type="RollingUpdate"),
                template=core.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(labels=SELECTOR),
                    spec=device_plugin_pod_spec(settings),
                ),
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({})


def gpu_job_spec(settings: Settings) -> dict[str, Any]:
    """One pod on the GPU nodes (gpuSmokeNodeSelector) asking for one nvidia.com/gpu, tolerating their
    taints (gpuNodeTolerations), never retried; a pod that never starts fails the Job at its deadline
    (DeadlineExceeded)."""
    from infra.program.common.scheduling import node_selector

    template = smoke_pod(settings, "gpu", "echo gpu pod started")
    (container,) = template["spec"]["containers"]
    for side in ("requests", "limits"):
        container["resources"][side]["nvidia.com/gpu"] = "1"
    template["spec"] |= {
        "restartPolicy": "Never",
        "nodeSelector": node_selector(settings.gpu_smoke_node_selector),
        "tolerations": gpu_node_tolerations(settings),
    }
    return {
        "backoffLimit": 0,
        "activeDeadlineSeconds": GPU_DEADLINE_SECONDS,
        "ttlSecondsAfterFinished": GPU_TTL_SECONDS,
        "template": template,
    }


def gpu_smoke_outcome(status: Any, settings: Settings) -> str:
    """The GPU smoke Job's final condition; raises with the likely causes unless it completed."""
    conditions = [c for c in status_field(status, "conditions") or [] if status_field(c, "status") == "True"]
    if "Complete" in {status_field(c, "type") for c in conditions}:
        return "Complete"
    failed = next((c for c in conditions if status_field(c, "type") == "Failed"), None)
    if failed is None:
        return "unknown (not awaited)"
    ns, labels_ = SMOKE_NAMESPACE, ", ".join(settings.gpu_smoke_node_selector)
    events = f"kubectl -n {ns} get events --field-selector involvedObject.name={GPU_JOB_NAME}"
    reason, message = str(status_field(failed, "reason") or ""), str(status_field(failed, "message") or "")
    if reason == "DeadlineExceeded":
        cause = (
            f"no pod asking for one nvidia.com/gpu started within {GPU_DEADLINE_SECONDS}s on nodes labelled "
            f"{labels_}: none of them advertises nvidia.com/gpu (no device plugin: gpuDevicePlugin), no "
            "node has these labels, or none is free"
        )
    else:
        cause = f"{reason}: {message}"
    more = f"kubectl -n {ns} describe pods -l job-name={GPU_JOB_NAME}"
    raise pulumi.RunError(f"smoke check Job {ns}/{GPU_JOB_NAME} failed: {cause}; see `{events}` and `{more}`")
