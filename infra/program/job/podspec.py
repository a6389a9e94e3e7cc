"""The one pod template every job kind runs: image, torchrun command, env, volumes, security, placement.

PyTorchJob and Indexed Job differ only in who supplies the `PET_*` variables the command reads
(the training operator, or the Job's own env from `rendezvous_env`); everything else is built here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.program.common import scheduling
from infra.program.common.meta import (
    CHECKPOINT_MOUNT,
    CONTAINER,
    DATA_MOUNT,
    JOB_LABEL,
    PORT_NAME,
    JobNames,
    labels,
)
from infra.program.job.env import lineage_env, s3_ca_volumes, trainer_env, with_user_env
from infra.program.settings import Settings
from infra.program.settings.interconnect import extended_resources, host_mounts, split_pair

core = k8s.core.v1
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
CACHE_MOUNT = "/cache"


def data_uri(settings: Settings) -> str:
    """What the trainer's --data points at: the data PVC's MNIST root, or the bucket prefix."""
    if settings.job_data_source == "s3":
        return f"s3://{settings.minio_bucket}/{settings.minio_prefix}".rstrip("/")
    return f"{DATA_MOUNT}/mnist"


def trainer_args(settings: Settings, names: JobNames) -> list[str]:
    """The flags of `python -m trainer` (see trainer/cli.py), identical on every node."""
    return [
        f"--data={data_uri(settings)}",
        f"--cache-dir={CACHE_MOUNT}",
        f"--checkpoint-dir={names.checkpoint_dir}",
        f"--epochs={settings.job_epochs}",
        f"--batch-size={settings.job_batch_size}",
        f"--scaling={settings.job_scaling}",
        f"--lr={settings.job_learning_rate}",
        f"--lr-scaling={settings.job_lr_scaling}",
        f"--checkpoint-every={settings.job_checkpoint_every}",
        f"--backend={settings.backend}",
        f"--seed={settings.job_seed}",
        f"--dist-timeout={settings.job_dist_timeout_seconds}",
        *([f"--export-to={model_export_uri(settings, names)}"] if settings.job_model_export else []),
    ]


def model_export_uri(settings: Settings, names: JobNames) -> str:
    """Where rank 0 uploads the run's model, metrics and their SHA256SUMS."""
    return "/".join(
        p for p in (f"s3://{settings.minio_bucket}", settings.minio_prefix, "models", names.job) if p
    )


def container_command(settings: Settings, names: JobNames) -> tuple[list[str], list[str]]:
    """(command, args): torchrun behind the launcher that waits for the master and keeps exit codes.

    Every rendezvous value is a `$(PET_*)` reference that Kubernetes expands from the container's
    env, so the master address and node rank come from the env (operator- or Job-supplied), never
    from a literal.
    """
    torchrun = [
        "--nnodes=$(PET_NNODES)",
        "--node-rank=$(PET_NODE_RANK)",
        "--nproc-per-node=$(PET_NPROC_PER_NODE)",
        "--master-addr=$(PET_MASTER_ADDR)",
        "--master-port=$(PET_MASTER_PORT)",
        "--max-restarts=0",
    ]
    launcher = [f"--master-wait-timeout={settings.job_master_wait_seconds}", "--"]
    return ["python", "-m", "trainer.launch"], [
        *launcher,
        *torchrun,
        "-m",
        "trainer",
        *trainer_args(settings, names),
    ]


def rendezvous_env(settings: Settings, names: JobNames) -> list[core.EnvVarArgs]:
    """What an Indexed Job's pod must set itself (the training operator injects these on a PyTorchJob)."""
    rank = core.EnvVarSourceArgs(
        field_ref=core.ObjectFieldSelectorArgs(
            field_path=f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"
        )
    )
    return [
        core.EnvVarArgs(name="PET_NODE_RANK", value_from=rank),
        core.EnvVarArgs(name="PET_NNODES", value=str(settings.job_nodes)),
        core.EnvVarArgs(name="PET_NPROC_PER_NODE", value=str(settings.job_procs_per_node)),
        core.EnvVarArgs(name="PET_MASTER_ADDR", value=names.master_host),
        core.EnvVarArgs(name="PET_MASTER_PORT", value=str(settings.job_master_port)),
    ]


def _resources(settings: Settings) -> core.ResourceRequirementsArgs:
    requests = {"cpu": settings.job_cpu_request, "memory": settings.job_memory_request}
    limits = {"memory": settings.job_memory_limit}
    if settings.job_cpu_limit:
        limits["cpu"] = settings.job_cpu_limit
    if settings.job_gpus_per_node:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(settings.job_gpus_per_node)
    # Extended resources (EFA, RDMA) cannot be overcommitted: request equals limit.
    for name, amount in extended_resources(settings.job_extra_resources).items():
        requests[name] = limits[name] = amount
    return core.ResourceRequirementsArgs(requests=requests, limits=limits)


def container_resources(settings: Settings) -> core.ResourceRequirementsArgs:
    """The trainer container's requests and limits (also a TrainJob's `resourcesPerNode`)."""
    return _resources(settings)


def _volumes(
    settings: Settings,
    data_claim: pulumi.Input[str],
    checkpoint_claim: pulumi.Input[str],
) -> tuple[list[core.VolumeArgs], list[core.VolumeMountArgs]]:
    empty = core.EmptyDirVolumeSourceArgs
    volumes = [
        core.VolumeArgs(
            name="checkpoints",
            persistent_volume_claim=core.PersistentVolumeClaimVolumeSourceArgs(claim_name=checkpoint_claim),
        ),
        core.VolumeArgs(name="dshm", empty_dir=empty(medium="Memory", size_limit=settings.job_shm_size)),
        core.VolumeArgs(name="tmp", empty_dir=empty(size_limit="1Gi")),
        core.VolumeArgs(name="cache", empty_dir=empty(size_limit="1Gi")),
    ]
    mounts = [
        core.VolumeMountArgs(name="checkpoints", mount_path=CHECKPOINT_MOUNT),
        core.VolumeMountArgs(name="dshm", mount_path="/dev/shm"),
        core.VolumeMountArgs(name="tmp", mount_path="/tmp"),
        core.VolumeMountArgs(name="cache", mount_path=CACHE_MOUNT),
    ]
    if settings.job_data_source == "pvc":
        volumes.insert(
            0,
            core.VolumeArgs(
                name="data",
                persistent_volume_claim=(
                    core.PersistentVolumeClaimVolumeSourceArgs(claim_name=data_claim, read_only=True)
                ),
            ),
        )
        mounts.insert(0, core.VolumeMountArgs(name="data", mount_path=DATA_MOUNT, read_only=True))
    ca_volumes, ca_mounts = s3_ca_volumes(settings)
    return volumes + ca_volumes, mounts + ca_mounts


def node_affinity(settings: Settings) -> core.NodeAffinityArgs | None:
    """The required node affinity of jobNodeAffinity, or None."""
    expressions = scheduling.affinity_terms(settings.job_node_affinity)
    if not expressions:
        return None
    return core.NodeAffinityArgs(
        required_during_scheduling_ignored_during_execution=core.NodeSelectorArgs(
            node_selector_terms=[
                core.NodeSelectorTermArgs(
                    match_expressions=[
                        core.NodeSelectorRequirementArgs(
                            key=e["key"], operator=e["operator"], values=e.get("values")
                        )
                        for e in expressions
                    ]
                )
            ]
        )
    )


def job_node_pods(settings: Settings) -> dict[str, Any]:
    """What places a pod on the job's nodes (PodSpecArgs keywords): jobNodeSelector, the tolerations
    (the GPU taint's included when the job takes GPUs) and jobNodeAffinity."""
    node = node_affinity(settings)
    return {
        "node_selector": scheduling.node_selector(settings.job_node_selector) or None,
        "tolerations": [
            core.TolerationArgs(
                key=t["key"], operator=t["operator"], value=t.get("value"), effect=t["effect"]
            )
            for t in _tolerations(settings)
        ]
        or None,
        "affinity": core.AffinityArgs(node_affinity=node) if node else None,
    }


def _affinity(settings: Settings, names: JobNames) -> core.AffinityArgs | None:
    node = node_affinity(settings)
    pod_anti = None
    if settings.job_one_pod_per_node:
        pod_anti = core.PodAntiAffinityArgs(
            required_during_scheduling_ignored_during_execution=[
                core.PodAffinityTermArgs(
                    topology_key="kubernetes.io/hostname",
                    label_selector=k8s.meta.v1.LabelSelectorArgs(match_labels={JOB_LABEL: names.job}),
                )
            ]
        )
    if node is None and pod_anti is None:
        return None
    return core.AffinityArgs(node_affinity=node, pod_anti_affinity=pod_anti)


def _tolerations(settings: Settings) -> list[dict[str, str]]:
    tolerations = scheduling.tolerations(settings.job_tolerations)
    if settings.job_gpus_per_node and not any(t["key"] == "nvidia.com/gpu" for t in tolerations):
        tolerations.append(dict(scheduling.GPU_TOLERATION))
    return tolerations


# A run's container that fails leaves the last lines of its output in its status: the kubelet reads the
# last 80 lines (at most 2,048 bytes) of a container's log into `state.terminated.message` when it ended
# with a non-zero code and wrote no termination message (kubernetes v1.33.13
# `pkg/kubelet/kuberuntime/kuberuntime_container.go` convertToKubeContainerStatus,
# `pkg/kubelet/container/runtime.go` MaxContainerTerminationMessageLog*). The run's watch shows that
# message while `pulumi up` waits (`infra/program/job/placement.py` failures): the cause of a failed pod
# is on the screen, and stays there after its pods are gone.
TERMINATION_MESSAGE_POLICY = "FallbackToLogsOnError"


def container_security(add: Sequence[str] = ()) -> core.SecurityContextArgs:
    """Pod Security 'restricted' for a container of ours: no escalation, no capabilities (but `add`,
    jobAddCapabilities, which the namespace's level must allow), read-only root."""
    return core.SecurityContextArgs(
        allow_privilege_escalation=False,
        capabilities=core.CapabilitiesArgs(drop=["ALL"], add=list(add) or None),
        read_only_root_filesystem=True,
        run_as_non_root=True,
    )


def pod_security(settings: Settings) -> core.PodSecurityContextArgs:
    """The pod level of 'restricted': the image's non-root user, volumes writable by it, RuntimeDefault."""
    uid = settings.job_run_as_user
    return core.PodSecurityContextArgs(
        run_as_non_root=True,
        run_as_user=uid,
        run_as_group=uid,
        fs_group=uid,
        fs_group_change_policy="OnRootMismatch",
        seccomp_profile=core.SeccompProfileArgs(type="RuntimeDefault"),
    )


def pod_labels(settings: Settings, names: JobNames) -> dict[str, str]:
    return {**labels(settings, "trainer"), JOB_LABEL: names.job}


def pod_template(
    settings: Settings,
    names: JobNames,
    *,
    data_claim: pulumi.Input[str],
    checkpoint_claim: pulumi.Input[str],
    secret_name: pulumi.Input[str] | None,
    service_account: pulumi.Input[str] | None = None,
    extra_env: Sequence[core.EnvVarArgs] = (),
    subdomain: str | None = None,
    restart_policy: str | None = None,
    container_name: str = CONTAINER,
) -> core.PodTemplateSpecArgs:
    """The trainer pod, Pod Security 'restricted', for any job kind, running as `service_account`.

    `container_name` is the name the job kind's controller looks for: `pytorch` for the training operator
    v1, `node` for Kubeflow Trainer v2's torch plugin."""
    command, args = container_command(settings, names)
    volumes, mounts = _volumes(settings, data_claim, checkpoint_claim)
    for index, (host, mount, read_only) in enumerate(host_mounts(settings.job_host_path_mounts)):
        name = f"host-{index}"
        volumes.append(core.VolumeArgs(name=name, host_path=core.HostPathVolumeSourceArgs(path=host)))
        mounts.append(core.VolumeMountArgs(name=name, mount_path=mount, read_only=read_only or None))
    placement = job_node_pods(settings)
    container = core.ContainerArgs(
        name=container_name,
        image=settings.job_image,
        image_pull_policy=settings.image_pull_policy,
        command=command,
        args=args,
        env=with_user_env(
            [*trainer_env(settings, secret_name), *lineage_env(settings, names), *extra_env],
            settings.job_extra_env,
        ),
        ports=[core.ContainerPortArgs(name=PORT_NAME, container_port=settings.job_master_port)],
        resources=_resources(settings),
        volume_mounts=mounts,
        security_context=container_security(settings.job_add_capabilities),
        termination_message_policy=TERMINATION_MESSAGE_POLICY,
    )
    annotations = {
        "sidecar.istio.io/inject": "false",
        **dict(split_pair(a) for a in settings.job_pod_annotations),
    }
    return core.PodTemplateSpecArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(labels=pod_labels(settings, names), annotations=annotations),
        spec=core.PodSpecArgs(
            containers=[container],
            volumes=volumes,
            restart_policy=restart_policy,
            subdomain=subdomain,
            service_account_name=service_account,
            automount_service_account_token=False,
            enable_service_links=False,
            node_selector=placement["node_selector"],
            tolerations=placement["tolerations"],
            affinity=_affinity(settings, names),
            priority_class_name=settings.job_priority_class_name or None,
            security_context=pod_security(settings),
            termination_grace_period_seconds=settings.job_termination_grace_period_seconds,
        ),
    )
