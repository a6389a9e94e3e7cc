"""The prerequisites stack (`stackRole: prerequisites`): what a bare dev cluster (kind, minikube) lacks
before the `dev` stack's first `pulumi up`.

- An NFS server, `nfs-system/nfs-server` (after csi-driver-nfs's own example
  `deploy/example/nfs-provisioner/nfs-server.yaml` at v4.11.0, its image pinned and an emptyDir instead of
  a hostPath: on kind a node's /var is a volume, not overlayfs, so the kernel can export it). It exports
  its directory as the NFSv4 root (`fsid=0`), so the share is `/`. An in-kernel NFS server runs
  privileged: its namespace says so with an explicit Pod Security label ('privileged', and why, in an
  annotation), and the policy pack's `privilegedNamespaces` names it.
- csi-driver-nfs from its Helm chart (`nfsCsiChart`, upstream's v4.11.0 by default) in kube-system: the
  provisioner `nfs.csi.k8s.io` of the dev stack's RWX StorageClass.
  Both only with `prerequisitesStorage: nfs` (the default); `none` is for a cluster that already has a
  ReadWriteMany StorageClass.
- MinIO, `minio/minio` on port 9000, Pod Security 'restricted', its root user and password the stack's
  secret minioAccessKey/minioSecretKey (a Secret whose data is a Pulumi secret, read by the pods
  through secretKeyRef: the same pair the dev stack then sets), and a Job that fills
  `s3://<minioBucket>/<minioPrefix>` with MNIST from seedMirrors with the trainer image
  (`python -m trainer.seed`, which creates the bucket and is idempotent), awaited: a failed fill fails
  `pulumi up` with one line.

Each namespace denies by default, and each pod has a NetworkPolicy of its own
(`infra/program/prerequisites/policies.py`). The data lives in emptyDirs, as long as the pods: a
development cluster's, not a production store.
tests/e2e/fixtures/cluster.py builds the cluster tier's fixtures through this module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pulumi
import pulumi_kubernetes as k8s

from infra.program.common.config import S3Credentials
from infra.program.common.meta import ACCESS_KEY_ID, JOB_LABEL, SECRET_ACCESS_KEY, labels, pod_security_labels
from infra.program.job.env import base_env, s3_key_env
from infra.program.job.jobs import (
    logs_command,
    no_wait_annotations,
    pod_failure_policy,
    replace_on_any_change,
    run_outcome,
)
from infra.program.job.podspec import TERMINATION_MESSAGE_POLICY, container_security, pod_security
from infra.program.job.seed import REPLACE_UNREADY, seed_resources
from infra.program.platform.training_operator import kustomize_source
from infra.program.prerequisites.policies import (
    fill_policy_spec,
    minio_policy_spec,
    namespace_policies,
    nfs_policy_spec,
)
from infra.program.settings import PROJECT, Settings
from infra.program.settings.prerequisites import (
    MINIO,
    MINIO_ENDPOINT,
    MINIO_NAMESPACE,
    MINIO_PORT,
    NFS_CSI_CHART,
    NFS_NAMESPACE,
    NFS_SERVER,
    NFS_SERVER_HOST,
    NFS_SHARE,
)

if TYPE_CHECKING:
    from infra.program.job.runwatch import RunWatch

core = k8s.core.v1
meta = k8s.meta.v1
PROVISIONER = "nfs.csi.k8s.io"
CSI_NAMESPACE = "kube-system"
# No snapshot sidecar (a bare cluster has no VolumeSnapshot CRDs; the controller would never be ready),
# and every provisioned directory world-writable, so the pods' uid can write whatever the server's owner.
NFS_CSI_VALUES = {"controller": {"enableSnapshotter": False}, "driver": {"mountPermissions": "0777"}}
EXPORTS = "/exports"
Port = tuple[str, int, str]  # name, number, protocol: a container port and its Service port
NFS_PORTS: tuple[Port, ...] = (("tcp-2049", 2049, "TCP"), ("udp-111", 111, "UDP"))
MINIO_PORTS: tuple[Port, ...] = (("s3", MINIO_PORT, "TCP"),)
MINIO_SECRET = "minio-root"
SECRET_VERSION = f"{PROJECT}.io/root-secret-version"  # MinIO's pod template: its Secret's resourceVersion
MINIO_UID = 1000
FILL_JOB = "minio-mnist"
FILL_CONTAINER = "fill"
FILL_BACKOFF_LIMIT = 4
FILL_TIMEOUT_SECONDS = 900
POD_SECURITY_REASON = f"{PROJECT}.io/pod-security-reason"
NFS_PRIVILEGED_REASON = (
    "an in-kernel NFS server runs privileged: it mounts the nfsd filesystem and starts the kernel's nfsd "
    "threads; nothing else runs in this namespace"
)


def selector(component: str) -> dict[str, str]:
    """The labels a Service and a Deployment of this module select their pods by."""
    return {"app.kubernetes.io/name": PROJECT, "app.kubernetes.io/component": component}


def namespace(
    name: str, component: str, settings: Settings, level: str, opts: pulumi.ResourceOptions, reason: str = ""
) -> core.Namespace:
    """The namespace of `component`, labelled to enforce (and warn and audit) the Pod Security `level`;
    `reason` says why, when the level is not 'restricted'."""
    enforce = pod_security_labels(level)
    return core.Namespace(
        f"{component}-namespace",
        metadata=meta.ObjectMetaArgs(
            name=name,
            labels={**labels(settings, component), **enforce},
            annotations={POD_SECURITY_REASON: reason} if reason else None,
        ),
        opts=opts,
    )


def server(
    name: str,
    space: core.Namespace,
    settings: Settings,
    pod: core.PodSpecArgs,
    ports: Sequence[Port],
    opts: pulumi.ResourceOptions,
    annotations: Mapping[str, pulumi.Input[str]] | None = None,
) -> tuple[core.Service, k8s.apps.v1.Deployment]:
    """A Service on `ports` (the pod's container ports), and the pod's one-replica Deployment, replaced
    rather than rolled (never two at once: each pod keeps its data in an emptyDir of its own);
    `annotations` go on its pod template."""
    service_ports = [core.ServicePortArgs(name=n, port=number, protocol=t) for n, number, t in ports]
    where = meta.ObjectMetaArgs(name=name, namespace=space.metadata.name, labels=labels(settings, name))
    service = core.Service(
        f"{name}-service",
        metadata=where,
        spec=core.ServiceSpecArgs(selector=selector(name), ports=service_ports),
        opts=opts,
    )
    deployment = k8s.apps.v1.Deployment(
        f"{name}-deployment",
        metadata=where,
        spec=k8s.apps.v1.DeploymentSpecArgs(
            replicas=1,
            strategy=k8s.apps.v1.DeploymentStrategyArgs(type="Recreate"),
            selector=meta.LabelSelectorArgs(match_labels=selector(name)),
            template=core.PodTemplateSpecArgs(
                metadata=meta.ObjectMetaArgs(labels=labels(settings, name), annotations=annotations), spec=pod
            ),
        ),
        opts=opts,
    )
    return service, deployment


def nfs_server_pod(settings: Settings) -> core.PodSpecArgs:
    """The NFS server's pod: privileged (an in-kernel server), exporting an emptyDir as its NFSv4 root."""
    return core.PodSpecArgs(
        node_selector={"kubernetes.io/os": "linux"},
        automount_service_account_token=False,
        containers=[
            core.ContainerArgs(
                name=NFS_SERVER,
                image=settings.nfs_server_image,
                env=[core.EnvVarArgs(name="SHARED_DIRECTORY", value=EXPORTS)],
                ports=[core.ContainerPortArgs(name=n, container_port=p, protocol=t) for n, p, t in NFS_PORTS],
                resources=core.ResourceRequirementsArgs(
                    requests={"cpu": "50m", "memory": "64Mi"}, limits={"memory": "256Mi"}
                ),
                security_context=core.SecurityContextArgs(privileged=True),
                volume_mounts=[core.VolumeMountArgs(name="exports", mount_path=EXPORTS)],
            )
        ],
        volumes=[core.VolumeArgs(name="exports", empty_dir=core.EmptyDirVolumeSourceArgs())],
    )


def minio_pod(settings: Settings) -> core.PodSpecArgs:
    """MinIO's pod, Pod Security 'restricted': one uid, its root keys from the Secret, data in an emptyDir."""
    keys = [
        core.EnvVarArgs(
            name=env,
            value_from=core.EnvVarSourceArgs(
                secret_key_ref=core.SecretKeySelectorArgs(name=MINIO_SECRET, key=key)
            ),
        )
        for env, key in (("MINIO_ROOT_USER", ACCESS_KEY_ID), ("MINIO_ROOT_PASSWORD", SECRET_ACCESS_KEY))
    ]
    return core.PodSpecArgs(
        automount_service_account_token=False,
        security_context=core.PodSecurityContextArgs(
            run_as_non_root=True,
            run_as_user=MINIO_UID,
            run_as_group=MINIO_UID,
            fs_group=MINIO_UID,
            seccomp_profile=core.SeccompProfileArgs(type="RuntimeDefault"),
        ),
        containers=[
            core.ContainerArgs(
                name=MINIO,
                image=settings.minio_image,
                # Its certs dir defaults to $HOME/.minio/certs, not writable by the uid.
                args=["server", "/data", "--address", f":{MINIO_PORT}", "--certs-dir", "/certs"],
                env=keys,
                ports=[
                    core.ContainerPortArgs(name=n, container_port=p, protocol=t) for n, p, t in MINIO_PORTS
                ],
                readiness_probe=core.ProbeArgs(
                    http_get=core.HTTPGetActionArgs(path="/minio/health/ready", port=MINIO_PORT),
                    period_seconds=5,
                ),
                resources=core.ResourceRequirementsArgs(
                    requests={"cpu": "100m", "memory": "256Mi"}, limits={"memory": "1Gi"}
                ),
                security_context=core.SecurityContextArgs(
                    allow_privilege_escalation=False, capabilities=core.CapabilitiesArgs(drop=["ALL"])
                ),
                volume_mounts=[
                    core.VolumeMountArgs(name="data", mount_path="/data"),
                    core.VolumeMountArgs(name="certs", mount_path="/certs"),
                ],
            )
        ],
        volumes=[
            core.VolumeArgs(name="data", empty_dir=core.EmptyDirVolumeSourceArgs()),
            core.VolumeArgs(name="certs", empty_dir=core.EmptyDirVolumeSourceArgs()),
        ],
    )


def fill_args(settings: Settings) -> list[str]:
    """`python -m trainer.seed` flags: the bucket's prefix from the HTTPS mirrors."""
    target = f"s3://{settings.minio_bucket}/{settings.minio_prefix}".rstrip("/")
    return [f"--to={target}", *(f"--mirror={url}" for url in settings.seed_mirrors)]


def fill_pod(settings: Settings) -> core.PodTemplateSpecArgs:
    """The fill Job's pod: the trainer image's seed, 'restricted', MinIO's keys through secretKeyRef."""
    env = [
        *base_env(),
        core.EnvVarArgs(name="AWS_ENDPOINT_URL", value=f"http://{MINIO_ENDPOINT}"),
        core.EnvVarArgs(name="AWS_REGION", value=settings.minio_region),
        *s3_key_env(MINIO_SECRET),
    ]
    container = core.ContainerArgs(
        name=FILL_CONTAINER,
        image=settings.job_image,
        image_pull_policy=settings.image_pull_policy,
        command=["python", "-m", "trainer.seed"],
        args=fill_args(settings),
        env=env,
        resources=seed_resources(),
        volume_mounts=[core.VolumeMountArgs(name="tmp", mount_path="/tmp")],
        security_context=container_security(),
        termination_message_policy=TERMINATION_MESSAGE_POLICY,
    )
    return core.PodTemplateSpecArgs(
        metadata=meta.ObjectMetaArgs(labels={**labels(settings, FILL_JOB), JOB_LABEL: FILL_JOB}),
        spec=core.PodSpecArgs(
            containers=[container],
            volumes=[core.VolumeArgs(name="tmp", empty_dir=core.EmptyDirVolumeSourceArgs(size_limit="1Gi"))],
            restart_policy="Never",
            automount_service_account_token=False,
            enable_service_links=False,
            security_context=pod_security(settings),
        ),
    )


class NfsServer(pulumi.ComponentResource):
    """The namespace nfs-system ('privileged', with the reason), the NFS server and its Service."""

    def __init__(self, name: str, settings: Settings, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{PROJECT}:prerequisites:NfsServer", name, {}, opts)
        child = pulumi.ResourceOptions(parent=self)
        space = namespace(NFS_NAMESPACE, NFS_SERVER, settings, "privileged", child, NFS_PRIVILEGED_REASON)
        self.service, self.deployment = server(
            NFS_SERVER, space, settings, nfs_server_pod(settings), NFS_PORTS, child
        )
        specs = {NFS_SERVER: nfs_policy_spec(selector(NFS_SERVER), NFS_PORTS)}
        namespace_policies(name, settings, space.metadata.name, specs, child)
        self.register_outputs({})


class ObjectStore(pulumi.ComponentResource):
    """The namespace minio ('restricted'), MinIO's root Secret, MinIO and its Service."""

    def __init__(
        self,
        name: str,
        settings: Settings,
        credentials: S3Credentials,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{PROJECT}:prerequisites:ObjectStore", name, {}, opts)
        child = pulumi.ResourceOptions(parent=self)
        space = namespace(MINIO_NAMESPACE, MINIO, settings, "restricted", child)
        self.secret = core.Secret(
            f"{name}-secret",
            metadata=meta.ObjectMetaArgs(
                name=MINIO_SECRET, namespace=space.metadata.name, labels=labels(settings, MINIO)
            ),
            type="Opaque",
            # Both values are secret Outputs (require_secret), and so is the map: encrypted in state.
            string_data=pulumi.Output.secret(
                {ACCESS_KEY_ID: credentials.access_key_id, SECRET_ACCESS_KEY: credentials.secret_access_key}
            ),
            opts=child,
        )
        # MinIO reads its root user and password from its environment once, at start: a new key pair
        # (the Secret's resourceVersion changes) restarts it, and it starts only after the Secret exists.
        self.service, self.deployment = server(
            MINIO,
            space,
            settings,
            minio_pod(settings),
            MINIO_PORTS,
            pulumi.ResourceOptions(parent=self, depends_on=[self.secret]),
            annotations={SECRET_VERSION: self.secret.metadata.resource_version},
        )
        specs = {
            MINIO: minio_policy_spec(settings, selector(MINIO)),
            FILL_JOB: fill_policy_spec(settings, FILL_JOB, selector(MINIO)),
        }
        self.policies = namespace_policies(name, settings, space.metadata.name, specs, child)
        self.register_outputs({})


class BucketFill(pulumi.ComponentResource):
    """The Job that fills the bucket with MNIST once MinIO is ready; `outcome` fails `pulumi up` when it
    failed. Replaced at the next `pulumi up` unless it is Complete (a failed fill runs again)."""

    def __init__(
        self,
        name: str,
        settings: Settings,
        store: ObjectStore,
        watch: RunWatch | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{PROJECT}:prerequisites:BucketFill", name, {}, opts)
        # After MinIO is Available (the Deployment is awaited) behind its Service, with its Secret.
        after = (store.deployment, store.service, store.secret, *store.policies)
        self.job = k8s.batch.v1.Job(
            f"{name}-job",
            metadata=meta.ObjectMetaArgs(
                name=FILL_JOB,
                namespace=store.secret.metadata.namespace,
                labels=labels(settings, FILL_JOB),
                # Awaited by the program (`run_outcome`), which fails at once with one line on a pod
                # that cannot start (an image it cannot pull, a refused pod) instead of the provider's
                # wait running out.
                annotations={**no_wait_annotations(), REPLACE_UNREADY: "true"},
            ),
            spec=k8s.batch.v1.JobSpecArgs(
                backoff_limit=FILL_BACKOFF_LIMIT,
                # Bad flags, bad data, rejected keys fail at once; an unreachable MinIO or mirror retries.
                pod_failure_policy=pod_failure_policy(FILL_CONTAINER),
                template=fill_pod(settings),
            ),
            opts=pulumi.ResourceOptions.merge(
                pulumi.ResourceOptions(parent=self), replace_on_any_change(after)
            ),
        )
        logs = logs_command(MINIO_NAMESPACE, FILL_JOB, FILL_BACKOFF_LIMIT + 1, follow=False)
        self.outcome = run_outcome(
            self.job,
            "Job",
            FILL_JOB,
            logs,
            settings,
            watch,
            namespace=MINIO_NAMESPACE,
            timeout_seconds=FILL_TIMEOUT_SECONDS,
        )
        self.register_outputs({})


def nfs_csi_chart(settings: Settings) -> str:
    """The chart a mirror names (a relative local path made absolute), else the vendored archive of
    upstream's at the pinned tag, checked against upstream's sha256."""
    from infra.program.common.vendored import nfs_csi_chart as vendored_chart

    return kustomize_source(settings.nfs_csi_chart) or vendored_chart()


def build_prerequisites(
    settings: Settings, credentials: S3Credentials, watch: RunWatch | None = None
) -> dict[str, pulumi.Input[object]]:
    """Registers the prerequisites; returns the stack outputs: the addresses the job stacks name (no
    secret among them; the NFS ones only with `prerequisitesStorage: nfs`) and the fill Job's outcome
    (awaited through `watch`, as a job stack's seed is; without one, read from its recorded status)."""
    storage: dict[str, pulumi.Input[object]] = {}
    if settings.prerequisites_storage == "nfs":
        NfsServer("nfs-server", settings)
        chart = nfs_csi_chart(settings)
        k8s.helm.v4.Chart("csi-driver-nfs", chart=chart, namespace=CSI_NAMESPACE, values=NFS_CSI_VALUES)
        storage = {
            "nfsServer": NFS_SERVER_HOST,
            "nfsShare": NFS_SHARE,
            "storageProvisioner": PROVISIONER,
            "nfsCsiChart": settings.nfs_csi_chart or NFS_CSI_CHART,
        }
    store = ObjectStore("minio", settings, credentials)
    fill = BucketFill("mnist-bucket", settings, store, watch)
    return {
        "stackRole": settings.stack_role,
        **storage,
        "minioEndpoint": MINIO_ENDPOINT,
        "minioTls": False,
        "mnistBucket": f"s3://{settings.minio_bucket}/{settings.minio_prefix}".rstrip("/"),
        "bucketFillOutcome": fill.outcome,
    }
