"""Cross-field rules over a validated `Settings`, each failing with the key it blames."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from infra.program.settings import Settings, parse_quantity


class ConfigError(ValueError):
    """A bad stack config value; `str()` is the one line shown to the user."""

    def __init__(self, key: str, value: object, allowed: str, *, secret: bool = False) -> None:
        from infra.program.settings import PROJECT

        shown = "(unset)" if value is None else "[secret]" if secret else _show(value)
        self.key = key if ":" in key else f"{PROJECT}:{key}"
        super().__init__(f"config {self.key}={shown} is invalid: must be {allowed}")


def _show(value: object) -> str:
    """Config values as typed on the CLI: strings bare (empty as ""), anything else as JSON."""
    import json

    if isinstance(value, str):
        return value or '""'
    return json.dumps(value)


Check = Callable[[Settings, bool], Iterator[ConfigError]]
_CHECKS: list[Check] = []


def check(fn: Check) -> Check:
    _CHECKS.append(fn)
    return fn


def first_violation(settings: Settings, has_keys: bool) -> ConfigError | None:
    """The first broken cross-field rule, or None; `has_keys` says the S3 key pair was set."""
    for rule in _CHECKS:
        for error in rule(settings, has_keys):
            return error
    return None


@check
def _gpus(s: Settings, _: bool) -> Iterator[ConfigError]:
    if s.job_gpus_per_node > 0 and s.job_procs_per_node > s.job_gpus_per_node:
        yield ConfigError(
            "jobProcsPerNode",
            s.job_procs_per_node,
            f"<= jobGpusPerNode ({s.job_gpus_per_node}): one process per GPU",
        )
    if s.job_backend == "nccl" and s.job_gpus_per_node == 0:
        yield ConfigError("jobBackend", "nccl", "gloo or auto when jobGpusPerNode is 0 (nccl needs GPUs)")


@check
def _batch(s: Settings, _: bool) -> Iterator[ConfigError]:
    if s.job_scaling == "strong" and s.job_batch_size % s.world_size:
        yield ConfigError(
            "jobBatchSize",
            s.job_batch_size,
            f"divisible by the world size {s.world_size} (jobNodes x jobProcsPerNode) under strong scaling",
        )
    if s.job_scaling == "strong" and s.job_batch_size < s.world_size:
        yield ConfigError("jobBatchSize", s.job_batch_size, f">= the world size {s.world_size}")


@check
def _names(s: Settings, _: bool) -> Iterator[ConfigError]:
    full = f"{s.job_name}-{s.job_run_id}"
    if len(full) > 40:
        yield ConfigError(
            "jobRunId",
            s.job_run_id,
            f"short enough that '{full}' (jobName-jobRunId) has at most 40 characters",
        )


@check
def _storage(s: Settings, _: bool) -> Iterator[ConfigError]:
    if s.stack_role == "platform":
        return  # a platform stack creates no storage
    provider = s.storage_provider
    if provider == "nfs-csi" and not s.nfs_server:
        yield ConfigError(
            "nfsServer", s.nfs_server, "the NFS server's address when storageProvider is nfs-csi"
        )
    if provider == "nfs-csi" and not s.nfs_share.startswith("/"):
        yield ConfigError("nfsShare", s.nfs_share, "an absolute exported path such as /exports/ddp")
    if provider == "aws-efs" and not re.fullmatch(r"fs-[0-9a-f]{8,17}", s.efs_file_system_id):
        yield ConfigError(
            "efsFileSystemId",
            s.efs_file_system_id,
            "an EFS id such as fs-0123456789abcdef0 when storageProvider is aws-efs",
        )
    if (
        provider == "azure-files"
        and s.azure_files_protocol == "nfs"
        and not s.azure_files_sku.startswith("Premium")
    ):
        yield ConfigError(
            "azureFilesSkuName", s.azure_files_sku, "Premium_LRS or Premium_ZRS with azureFilesProtocol nfs"
        )
    if provider == "gke-filestore":
        for name, size in (
            ("dataVolumeSize", s.data_volume_size),
            ("checkpointVolumeSize", s.checkpoint_volume_size),
        ):
            if parse_quantity(size) < 2**40:
                yield ConfigError(name, size, "at least 1Ti: the smallest Filestore instance")


@check
def _resources(s: Settings, _: bool) -> Iterator[ConfigError]:
    if s.job_cpu_limit and parse_quantity(s.job_cpu_request) > parse_quantity(s.job_cpu_limit):
        yield ConfigError("jobCpuRequest", s.job_cpu_request, f"<= jobCpuLimit ({s.job_cpu_limit})")
    if parse_quantity(s.job_memory_request) > parse_quantity(s.job_memory_limit):
        yield ConfigError(
            "jobMemoryRequest", s.job_memory_request, f"<= jobMemoryLimit ({s.job_memory_limit})"
        )
    if parse_quantity(s.job_shm_size) >= parse_quantity(s.job_memory_limit):
        yield ConfigError(
            "jobShmSize",
            s.job_shm_size,
            f"< jobMemoryLimit ({s.job_memory_limit}): /dev/shm counts against it",
        )


@check
def _object_store(s: Settings, has_keys: bool) -> Iterator[ConfigError]:
    if s.minio_endpoint and not re.fullmatch(r"[A-Za-z0-9.-]+(:\d{1,5})?", s.minio_endpoint):
        yield ConfigError(
            "minioEndpoint",
            s.minio_endpoint,
            "host[:port] without a scheme, such as minio.minio.svc:9000 (minioTls picks https)",
        )
    for uses, why in (
        (s.job_data_source == "s3", "jobDataSource is s3"),
        (s.seeds_data and s.seed_source == "s3", "seedSource is s3"),
        (s.job_model_export, "jobModelExport is true"),
    ):
        if uses and not s.minio_endpoint:
            yield ConfigError("minioEndpoint", s.minio_endpoint, f"set when {why}")
        if uses and not (has_keys or s.minio_existing_secret):
            yield ConfigError(
                "minioAccessKey",
                None,
                f"set (with minioSecretKey, both --secret) or minioExistingSecret given when {why}",
            )
    if has_keys and s.minio_existing_secret:
        yield ConfigError(
            "minioExistingSecret",
            s.minio_existing_secret,
            "empty when minioAccessKey/minioSecretKey are set (choose one source)",
        )
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", s.minio_bucket):
        yield ConfigError(
            "minioBucket", s.minio_bucket, "a bucket name: 3-63 lowercase letters, digits, '.', '-'"
        )
    if s.minio_prefix.startswith("/") or ".." in s.minio_prefix.split("/"):
        yield ConfigError("minioPrefix", s.minio_prefix, "a relative key prefix without '..'")


@check
def _existing_secret(s: Settings, _: bool) -> Iterator[ConfigError]:
    """An existing Secret must be in the namespace before the first `pulumi up`; a namespace the stack
    creates cannot hold it then (creating it first makes the stack's Namespace create fail with
    AlreadyExists: pulumi-kubernetes >= 4.29 never adopts an existing object)."""
    if s.minio_existing_secret and s.create_namespace:
        yield ConfigError(
            "minioExistingSecret",
            s.minio_existing_secret,
            f"empty when createNamespace is true (the stack creates namespace {s.namespace}, so no "
            "Secret can be in it before `pulumi up`): set minioAccessKey and minioSecretKey with "
            "--secret and the stack creates the Secret, or set createNamespace false for a namespace "
            "prepared beforehand",
        )


@check
def _operator_source(s: Settings, _: bool) -> Iterator[ConfigError]:
    source = s.operator_source
    if not source or (source.startswith(("/", "./", "../")) and "?ref=" not in source):
        return  # upstream at operatorVersion, or a local checkout
    ref = re.search(r"[?&]ref=([^&]+)", source)
    if not ref or not re.fullmatch(r"v\d+\.\d+\.\d+|[0-9a-f]{40}", ref.group(1)):
        yield ConfigError(
            "operatorSource",
            source,
            "a local path (/..., ./..., ../...), or a git URL pinned with "
            "?ref=<release tag vX.Y.Z or 40-hex commit> (never a branch)",
        )


@check
def _scheduling(s: Settings, _: bool) -> Iterator[ConfigError]:
    from infra.program.scheduling import SchedulingError, affinity_terms, node_selector, tolerations

    for name, parse, value in (
        ("jobNodeSelector", node_selector, s.job_node_selector),
        ("jobTolerations", tolerations, s.job_tolerations),
        ("jobNodeAffinity", affinity_terms, s.job_node_affinity),
    ):
        try:
            parse(value)
        except SchedulingError as exc:
            yield ConfigError(name, exc.entry, exc.allowed)


@check
def _namespace_budget(s: Settings, _: bool) -> Iterator[ConfigError]:
    """The job must fit the namespace budget it is deployed with, or its pods could never start."""
    gpus = s.job_nodes * s.job_gpus_per_node
    if s.namespace_gpu_quota and gpus > s.namespace_gpu_quota:
        yield ConfigError(
            "namespaceGpuQuota",
            s.namespace_gpu_quota,
            f">= the job's {gpus} GPUs (jobNodes x jobGpusPerNode), or its pods can never all start",
        )
    if s.namespace_max_gpus_per_container and s.job_gpus_per_node > s.namespace_max_gpus_per_container:
        yield ConfigError(
            "jobGpusPerNode",
            s.job_gpus_per_node,
            f"<= namespaceMaxGpusPerContainer ({s.namespace_max_gpus_per_container})",
        )
    for name, quota, request, request_key in (
        ("namespaceCpuQuota", s.namespace_cpu_quota, s.job_cpu_request, "jobCpuRequest"),
        ("namespaceMemoryQuota", s.namespace_memory_quota, s.job_memory_request, "jobMemoryRequest"),
    ):
        if quota and s.job_nodes * parse_quantity(request) > parse_quantity(quota):
            yield ConfigError(
                name,
                quota,
                f">= jobNodes x {request_key} ({s.job_nodes} x {request}), or its pods can never all start",
            )


@check
def _operator_init_container(s: Settings, _: bool) -> Iterator[ConfigError]:
    """An operator this stack does not install adds an init container this stack cannot see to every
    PyTorchJob Worker pod; under 'restricted' the user must vouch for it, or no Worker pod is admitted."""
    workers = s.stack_role != "platform" and s.job_kind == "pytorchjob" and s.job_nodes > 1
    if (
        workers
        and not s.operator_install
        and s.namespace_pod_security == "restricted"
        and not s.operator_init_container_restricted
    ):
        yield ConfigError(
            "operatorInitContainerRestricted",
            False,
            "true when operatorInstall is false and a multi-node PyTorchJob runs in a namespace enforcing "
            "Pod Security 'restricted' (the operator adds an init container to every Worker pod, upstream's "
            "without a securityContext, and the namespace refuses those pods): configure that operator's "
            "init container template to be restricted-compliant (as operatorInstall true does) and set this "
            "key, or set namespacePodSecurity to baseline",
        )


@check
def _kueue(s: Settings, _: bool) -> Iterator[ConfigError]:
    if s.job_queue_name and not s.job_cluster_queue:
        yield ConfigError(
            "jobClusterQueue",
            "",
            f"the Kueue ClusterQueue that LocalQueue {s.job_queue_name} (jobQueueName) points at: the stack "
            "creates that LocalQueue in its namespace, and without one Kueue keeps the job suspended",
        )
    pytorchjob = s.stack_role != "platform" and s.job_kind == "pytorchjob"
    if pytorchjob and s.job_queue_name and not s.kueue_pytorchjob_integration:
        yield ConfigError(
            "kueuePyTorchJobIntegration",
            False,
            "true with jobKind pytorchjob and jobQueueName, once 'kubeflow.org/pytorchjob' is in the "
            "integrations.frameworks of Kueue's Configuration: Kueue from v0.19 leaves it out by default "
            "and then lets the PyTorchJob run at once, outside the ClusterQueue's quota (or use jobKind "
            "indexed-job, which Kueue always manages)",
        )


@check
def _exit_code_retries(s: Settings, _: bool) -> Iterator[ConfigError]:
    """Under ExitCode every retry is a new pod, whose restarts the operator's backoff never counts."""
    if (
        s.job_kind == "pytorchjob"
        and s.job_restart_policy == "ExitCode"
        and not s.job_active_deadline_seconds
    ):
        yield ConfigError(
            "jobActiveDeadlineSeconds",
            0,
            "> 0 with jobRestartPolicy ExitCode: the operator retries retryable exit codes with new pods "
            "and its backoffLimit never counts them, so only a deadline bounds the retries",
        )


@check
def _stack_role(s: Settings, _: bool) -> Iterator[ConfigError]:
    if s.stack_role == "platform" and not (s.operator_install or s.trainer_install or s.kserve_install):
        yield ConfigError(
            "operatorInstall",
            False,
            "true when stackRole is platform (the platform stack installs the operator)",
        )
    if s.stack_role == "job" and s.operator_install:
        yield ConfigError(
            "operatorInstall",
            True,
            "false when stackRole is job: the cluster's platform stack installs the operator and owns its "
            "CRDs (stackRole all installs both in one stack)",
        )
    if s.reattach_retained and not s.checkpoint_volume_retain:
        yield ConfigError(
            "reattachRetained", True, "false unless checkpointVolumeRetain is true (nothing was retained)"
        )
    for adopt, flag, installs, install_flag in (
        (s.operator_adopt_crds, "operatorAdoptCrds", s.operator_install, "operatorInstall"),
        (s.trainer_adopt_crds, "trainerAdoptCrds", s.trainer_install, "trainerInstall"),
    ):
        if adopt and not installs:
            yield ConfigError(flag, True, f"false unless {install_flag} is true (nothing is installed)")


@check
def _trainer_install(s: Settings, _: bool) -> Iterator[ConfigError]:
    """Kubeflow Trainer v2 is installed like the operator: by the platform stack, or by an 'all' stack;
    a job stack assumes it present, and a TrainJob needs it installed or declared present."""
    if s.stack_role == "job" and s.trainer_install:
        yield ConfigError(
            "trainerInstall",
            True,
            "false when stackRole is job: the cluster's platform stack installs Kubeflow Trainer v2 and owns "
            "its CRDs (set trainerPresent true here; stackRole all installs both in one stack)",
        )
    if s.operator_install and s.trainer_install and not s.allow_both_operators:
        yield ConfigError(
            "allowBothOperators",
            False,
            "true to install both the training operator v1 (operatorInstall) and Kubeflow Trainer v2 "
            "(trainerInstall) in one stack; or set operatorInstall false (jobKind trainjob needs only "
            "Trainer v2)",
        )
    uses_trainer = s.stack_role != "platform" and s.job_kind == "trainjob"
    if uses_trainer and not (s.trainer_install or s.trainer_present):
        yield ConfigError(
            "trainerPresent",
            False,
            "true when jobKind is trainjob and trainerInstall is false: declare that Kubeflow Trainer v2 "
            "(with JobSet) is in the cluster, e.g. from the platform stack, or set trainerInstall true",
        )


TRAINER_MIN_KUBERNETES = (1, 31)


@check
def _trainer_kubernetes_version(s: Settings, _: bool) -> Iterator[ConfigError]:
    """Kubeflow Trainer v2.3.0 supports Kubernetes >= 1.31 (kubeflow/trainer v2.3.0
    docs/operator-guides/installation.md, charts/kubeflow-trainer/README.md)."""
    minor = tuple(int(part) for part in s.kubernetes_version.split("."))
    if minor >= TRAINER_MIN_KUBERNETES:
        return
    for uses, why in (
        (s.trainer_install, "trainerInstall true"),
        (s.stack_role != "platform" and s.job_kind == "trainjob", "jobKind trainjob"),
    ):
        if uses:
            yield ConfigError(
                "kubernetesVersion",
                s.kubernetes_version,
                f"1.31 or later with {why}: Kubeflow Trainer v2 (v2.3.0) supports Kubernetes >= 1.31 "
                "only (use jobKind pytorchjob or indexed-job on older clusters)",
            )


@check
def _trainer_source(s: Settings, _: bool) -> Iterator[ConfigError]:
    source = s.trainer_source
    if not source or (source.startswith(("/", "./", "../")) and "?ref=" not in source):
        return  # upstream at trainerVersion, or a local checkout
    ref = re.search(r"[?&]ref=([^&]+)", source)
    if not ref or not re.fullmatch(r"v\d+\.\d+\.\d+|[0-9a-f]{40}", ref.group(1)):
        yield ConfigError(
            "trainerSource",
            source,
            "a local path (/..., ./..., ../...), or a git URL pinned with "
            "?ref=<release tag vX.Y.Z or 40-hex commit> (never a branch)",
        )


@check
def _trainjob_equivalents(s: Settings, _: bool) -> Iterator[ConfigError]:
    """What a TrainJob (Trainer v2.3.0) and its JobSet (v0.12.0) cannot express is refused, not dropped.

    The Pulumi CLI passes every key's default as if set, so a default value reads as "unset"."""
    if s.job_kind != "trainjob":
        return
    from infra.program.settings import TRAINER_MASTER_PORT

    if s.job_master_port != TRAINER_MASTER_PORT:
        yield ConfigError(
            "jobMasterPort",
            s.job_master_port,
            f"{TRAINER_MASTER_PORT} (or unset) with jobKind trainjob: Kubeflow Trainer's torch plugin "
            f"fixes the rendezvous port (PET_MASTER_PORT) at {TRAINER_MASTER_PORT}",
        )
    if s.job_restart_policy != "OnFailure":
        yield ConfigError(
            "jobRestartPolicy",
            s.job_restart_policy,
            "unset with jobKind trainjob: a TrainJob has no replica restart policy (a failed node fails its "
            "Job and JobSet restarts every node, up to jobBackoffLimit times)",
        )
    if s.job_clean_pod_policy != "None":
        yield ConfigError(
            "jobCleanPodPolicy",
            s.job_clean_pod_policy,
            "unset with jobKind trainjob: a TrainJob keeps its pods until jobTtlSecondsAfterFinished "
            "deletes its JobSet",
        )


@check
def _smoke_namespace(s: Settings, _: bool) -> Iterator[ConfigError]:
    """The post-install smoke check's namespace belongs to the smoke check: its job runs, and is deleted,
    there (infra/program/smoke.py)."""
    from infra.program.smoke import SMOKE_NAMESPACE, smoke_enabled

    if s.stack_role != "platform" and s.namespace == SMOKE_NAMESPACE and any(smoke_enabled(s)):
        yield ConfigError(
            "namespace",
            s.namespace,
            f"another namespace than {SMOKE_NAMESPACE}, which the post-install smoke check creates and "
            "owns (or set operatorSmokeCheck false)",
        )


@check
def _serving(s: Settings, _: bool) -> Iterator[ConfigError]:
    """The server follows the training job: only where a job runs, only after it is known to have
    succeeded, and from where the job put its model."""
    if s.stack_role == "job" and s.kserve_install:
        yield ConfigError(
            "kserveInstall",
            True,
            "false when stackRole is job: the cluster's platform stack installs KServe and owns its CRDs "
            "(set kservePresent true here; stackRole all installs both in one stack)",
        )
    if s.serve_kind == "none":
        return
    if s.stack_role == "platform":
        yield ConfigError(
            "serveKind", s.serve_kind, "none when stackRole is platform (it runs no job to serve)"
        )
    if s.serve_kind == "kserve" and not (s.kserve_present or s.kserve_install):
        yield ConfigError(
            "serveKind",
            "kserve",
            "deployment or none unless KServe is in the cluster: set kservePresent true (KServe installed "
            "by the platform stack) or kserveInstall true (stackRole all)",
        )
    if not s.job_wait:
        yield ConfigError(
            "jobWait",
            False,
            f"true when serveKind is {s.serve_kind}: the server is created only after the training job "
            "succeeded, which only a waited job tells",
        )
    if s.serve_model_source == "s3" and not s.job_model_export:
        yield ConfigError(
            "serveModelSource",
            "s3",
            "pvc unless jobModelExport is true (the server reads the run's export, which only "
            "jobModelExport writes)",
        )
    if parse_quantity(s.serve_cpu_request) > parse_quantity(s.serve_cpu_limit):
        yield ConfigError("serveCpuRequest", s.serve_cpu_request, f"<= serveCpuLimit ({s.serve_cpu_limit})")
    if parse_quantity(s.serve_memory_request) > parse_quantity(s.serve_memory_limit):
        yield ConfigError(
            "serveMemoryRequest", s.serve_memory_request, f"<= serveMemoryLimit ({s.serve_memory_limit})"
        )
    # The server keeps running while the next run trains, with one extra pod during its rollout.
    servers = s.serve_replicas + 1
    for name, quota, job_request, job_key, serve_request, serve_key in (
        (
            "namespaceCpuQuota",
            s.namespace_cpu_quota,
            s.job_cpu_request,
            "jobCpuRequest",
            s.serve_cpu_request,
            "serveCpuRequest",
        ),
        (
            "namespaceMemoryQuota",
            s.namespace_memory_quota,
            s.job_memory_request,
            "jobMemoryRequest",
            s.serve_memory_request,
            "serveMemoryRequest",
        ),
    ):
        need = s.job_nodes * parse_quantity(job_request) + servers * parse_quantity(serve_request)
        if quota and need > parse_quantity(quota):
            yield ConfigError(
                name,
                quota,
                f">= jobNodes x {job_key} + (serveReplicas + 1) x {serve_key} "
                f"({s.job_nodes} x {job_request} + {servers} x {serve_request}): the server runs while the "
                "next run trains, one pod more "
                "during its rollout",
            )
