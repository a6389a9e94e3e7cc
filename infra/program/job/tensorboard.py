"""The run's training curves served by TensorBoard (`tensorboardDeploy`): a Deployment and a NetworkPolicy.

The trainer's rank 0 writes TensorBoard event files under each run's checkpoint directory
(`/checkpoints/<job>-<run id>/tensorboard/`, `trainer/curves.py`). One pod runs the trainer image's
`tensorboard` command over the whole checkpoint claim, mounted read-only, so every run of the claim
(and any superseded schedule's curves) shows as its own run, side by side. It listens on 127.0.0.1
only and has no Service: the way in is `kubectl port-forward` (the `tensorboardCommand` output), which
reaches the pod's loopback through the kubelet, so no other pod can call it, and its NetworkPolicy
admits nothing and lets nothing out. Pod Security "restricted" like every pod of the stack; no
service-account token. Its readiness is TensorBoard answering on its port, checked from inside the pod;
`pulumi up` does not wait for it (found by the local cluster tier: a claim that never binds kept `up`
waiting on this pod for the provider's ten minutes after the job's own failure was known).

The Deployment's template has no run id in it: a new `jobRunId` changes nothing here.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from infra.program.common.meta import CHECKPOINT_MOUNT, labels
from infra.program.job.env import base_env
from infra.program.job.podspec import container_security, pod_security
from infra.program.settings import PROJECT, Settings
from infra.program.settings.serving import TENSORBOARD_REQUESTS as REQUESTS

core = k8s.core.v1
net = k8s.networking.v1
meta = k8s.meta.v1

BOARD = f"{PROJECT}-tensorboard"
PORT = 6006
BOARD_LABEL = f"{PROJECT}.io/tensorboard"
LIMITS = {"cpu": "1", "memory": "1Gi"}
# TensorBoard answers /data/logdir once its HTTP server runs (tensorboard/backend/application.py).
READY = (
    f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{PORT}/data/logdir', timeout=3).read()"
)


def board_args() -> list[str]:
    """`tensorboard` over the whole claim, on loopback only; the pure-Python reader (`--load_fast=false`),
    so no second server process opens a port of its own."""
    return [
        f"--logdir={CHECKPOINT_MOUNT}",
        "--host=127.0.0.1",
        f"--port={PORT}",
        "--load_fast=false",
        "--reload_interval=30",
    ]


def board_pods() -> meta.LabelSelectorArgs:
    return meta.LabelSelectorArgs(match_labels={BOARD_LABEL: BOARD})


def board_command(settings: Settings) -> str:
    return (
        f"kubectl -n {settings.namespace} port-forward deployment/{BOARD} {PORT}:{PORT} "
        f"(then open http://127.0.0.1:{PORT})"
    )


def board_container(settings: Settings) -> core.ContainerArgs:
    return core.ContainerArgs(
        name="tensorboard",
        image=settings.job_image,
        image_pull_policy=settings.image_pull_policy,
        command=["tensorboard"],
        args=board_args(),
        env=base_env(),
        readiness_probe=core.ProbeArgs(
            exec_=core.ExecActionArgs(command=["python", "-c", READY]),
            period_seconds=30,
            timeout_seconds=10,
            failure_threshold=3,
        ),
        resources=core.ResourceRequirementsArgs(requests=REQUESTS, limits=LIMITS),
        volume_mounts=[
            core.VolumeMountArgs(name="tmp", mount_path="/tmp"),
            core.VolumeMountArgs(name="checkpoints", mount_path=CHECKPOINT_MOUNT, read_only=True),
        ],
        security_context=container_security(),
    )


class TensorBoard(pulumi.ComponentResource):
    """One TensorBoard pod over the checkpoint claim, read-only, reachable by port-forward only."""

    def __init__(
        self,
        name: str,
        settings: Settings,
        namespace: pulumi.Input[str],
        checkpoint_claim: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{PROJECT}:curves:TensorBoard", name, {}, opts)
        child = pulumi.ResourceOptions(parent=self)
        pod_labels = {**labels(settings, "tensorboard"), BOARD_LABEL: BOARD}
        claim = core.PersistentVolumeClaimVolumeSourceArgs(claim_name=checkpoint_claim, read_only=True)
        # Nothing in, nothing out: port-forward enters through the kubelet, not the pod network. In place
        # before the pod starts, so it never runs unrestricted.
        self.network_policy = net.NetworkPolicy(
            f"{name}-network-policy",
            metadata=meta.ObjectMetaArgs(
                name=BOARD, namespace=namespace, labels=labels(settings, "tensorboard")
            ),
            spec=net.NetworkPolicySpecArgs(
                pod_selector=board_pods(), policy_types=["Ingress", "Egress"], ingress=[], egress=[]
            ),
            opts=child,
        )
        # `pulumi up` does not wait for it (skipAwait): the curves are a view of the run, and a pod that
        # cannot start (its claim unbound, no node with room) must neither hold up nor fail the job's
        # `up`. Whether it runs: `kubectl -n <namespace> get deployment ddp-mnist-tensorboard`.
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata=meta.ObjectMetaArgs(
                name=BOARD,
                namespace=namespace,
                labels=pod_labels,
                annotations={"pulumi.com/skipAwait": "true"},
            ),
            spec=k8s.apps.v1.DeploymentSpecArgs(
                replicas=1,
                selector=board_pods(),
                template=core.PodTemplateSpecArgs(
                    metadata=meta.ObjectMetaArgs(labels=pod_labels),
                    spec=core.PodSpecArgs(
                        containers=[board_container(settings)],
                        volumes=[
                            core.VolumeArgs(
                                name="tmp", empty_dir=core.EmptyDirVolumeSourceArgs(size_limit="1Gi")
                            ),
                            core.VolumeArgs(name="checkpoints", persistent_volume_claim=claim),
                        ],
                        automount_service_account_token=False,
                        enable_service_links=False,
                        security_context=pod_security(settings),
                    ),
                ),
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.network_policy]),
        )
        self.command = board_command(settings)
        self.register_outputs({"command": self.command})
