"""The stack's typed settings: one field per project config key, validated once.

Every field carries its config key (the alias), its default and its description; `Pulumi.yaml`'s
`config:` schema is generated from this model (`python -m infra.program.schema`), so the two cannot drift.
Cross-field rules live in `infra.program.checks`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

PROJECT = "ddp-mnist"
# The directory holding Pulumi.yaml (and stacks/): what relative paths in config are read from.
PROJECT_ROOT = Path(__file__).resolve().parents[2]

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
K8S_VERSIONS = tuple(f"1.{minor}" for minor in range(29, 38))
DEFAULT_MASTER_PORT = 23456  # the training operator v1's `pytorchjob-port` default
# Kubeflow Trainer v2's torch plugin fixes the rendezvous port (PET_MASTER_PORT, the container port):
# kubeflow/trainer v2.3.0 pkg/constants/constants.go ContainerTrainerPort.
TRAINER_MASTER_PORT = 29500

# The operator's init container image: upstream's default is alpine:3.10 by tag. This is the alpine:3.20
# multi-arch index as pinned by several public repositories (nothing here can pull it); re-check with
# `docker buildx imagetools inspect alpine:3.20 --format '{{json .Manifest.Digest}}'` before changing it.
OPERATOR_INIT_IMAGE = (
    "docker.io/library/alpine:3.20@sha256:d9e853e87e55526f6b2917df91a2115c36dd7c696a35be12163d44e6e2a4b6bc"
)

# Config keys that hold secrets: read with `require_secret`, never part of the plain model.
SECRET_KEYS = {
    "minioAccessKey": "S3/MinIO access key id; set with `pulumi config set --secret minioAccessKey`.",
    "minioSecretKey": "S3/MinIO secret access key; set with `pulumi config set --secret minioSecretKey`.",
}


def key(alias: str, default: Any, description: str, **constraints: Any) -> Any:
    """A model field bound to the project config key `alias`."""
    return Field(default, alias=alias, description=description, **constraints)


def _dns(value: str, pattern: re.Pattern[str], what: str, limit: int = 63) -> str:
    if len(value) > limit or not pattern.match(value):
        raise ValueError(f"a {what} (lowercase letters, digits and '-', at most {limit} characters)")
    return value


class Settings(BaseModel):
    """Everything one stack needs; built once from stack config by `infra.program.config.load_settings`."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    # --- cluster -----------------------------------------------------------------------------
    stack_role: Literal["all", "platform", "job"] = key(
        "stackRole",
        "all",
        "What this stack owns: 'platform' the cluster-level parts (the training operator and its CRDs, "
        "one platform stack per cluster), 'job' one environment (namespace, storage, credentials, job; "
        "the operator comes from the platform stack), 'all' both (a cluster with a single environment).",
    )
    namespace: str = key("namespace", "ddp-mnist", "Namespace of every namespaced object.")
    create_namespace: bool = key(
        "createNamespace",
        True,
        "Create the namespace, labelled to enforce (and warn and audit) the Pod Security level "
        "namespacePodSecurity; false uses an existing one.",
    )
    namespace_pod_security: Literal["restricted", "baseline", "privileged"] = key(
        "namespacePodSecurity",
        "restricted",
        "Pod Security level the namespace enforces: the created namespace is labelled with it; for an "
        "existing namespace (createNamespace false) declare the level it enforces. Every pod the job's "
        "controllers create is checked against it before deployment.",
    )
    kubernetes_version: Literal[K8S_VERSIONS] = key(  # type: ignore[valid-type]
        "kubernetesVersion",
        "1.33",
        "Target Kubernetes minor version; the offline render validates against it.",
    )

    # --- namespace budget (ResourceQuota / LimitRange; every key off by default) -------------
    namespace_gpu_quota: int = key(
        "namespaceGpuQuota",
        0,
        "ResourceQuota: nvidia.com/gpu requested by all pods of the namespace together; 0 sets none.",
        ge=0,
        le=4096,
    )
    namespace_cpu_quota: str = key(
        "namespaceCpuQuota",
        "",
        "ResourceQuota: CPU requested by all pods of the namespace together (a quantity); empty sets none.",
    )
    namespace_memory_quota: str = key(
        "namespaceMemoryQuota",
        "",
        "ResourceQuota: memory requested by all pods of the namespace together (a quantity); "
        "empty sets none.",
    )
    namespace_max_gpus_per_container: int = key(
        "namespaceMaxGpusPerContainer",
        0,
        "LimitRange: the most nvidia.com/gpu one container of the namespace may use (containers that set "
        "no GPU limit get 0); 0 sets none.",
        ge=0,
        le=16,
    )
    namespace_default_cpu_request: str = key(
        "namespaceDefaultCpuRequest",
        "",
        "LimitRange: CPU request given to containers that set none (a quantity; lets them in under "
        "namespaceCpuQuota); empty sets none.",
    )
    namespace_default_memory_request: str = key(
        "namespaceDefaultMemoryRequest",
        "",
        "LimitRange: memory request given to containers that set none (a quantity; lets them in under "
        "namespaceMemoryQuota); empty sets none.",
    )

    # --- storage -----------------------------------------------------------------------------
    storage_provider: Literal["nfs-csi", "gke-filestore", "azure-files", "aws-efs", "existing"] = key(
        "storageProvider",
        "nfs-csi",
        "ReadWriteMany backend: a StorageClass preset to create, or 'existing' for storageClassName as is.",
    )
    storage_class_name: str = key(
        "storageClassName",
        "ddp-mnist-rwx",
        "Name of the StorageClass to create, or of the existing one to use.",
    )
    storage_reclaim_policy: Literal["Retain", "Delete"] = key(
        "storageReclaimPolicy", "Retain", "reclaimPolicy of a created StorageClass."
    )
    nfs_server: str = key("nfsServer", "", "NFS server address (storageProvider nfs-csi).")
    nfs_share: str = key("nfsShare", "/", "Exported NFS path (storageProvider nfs-csi).")
    nfs_mount_options: list[str] = key(
        "nfsMountOptions", ["nfsvers=4.1"], "NFS mount options (storageProvider nfs-csi)."
    )
    filestore_tier: Literal["standard", "premium", "zonal", "enterprise"] = key(
        "filestoreTier", "standard", "GKE Filestore tier (storageProvider gke-filestore)."
    )
    filestore_network: str = key(
        "filestoreNetwork",
        "default",
        "VPC network of the Filestore instances (storageProvider gke-filestore).",
    )
    azure_files_sku: Literal["Premium_LRS", "Premium_ZRS", "Standard_LRS", "Standard_ZRS", "Standard_GRS"] = (
        key(
            "azureFilesSkuName",
            "Premium_LRS",
            "Azure Files SKU (storageProvider azure-files); NFS needs Premium.",
        )
    )
    azure_files_protocol: Literal["nfs", "smb"] = key(
        "azureFilesProtocol", "nfs", "Azure Files protocol (storageProvider azure-files)."
    )
    efs_file_system_id: str = key(
        "efsFileSystemId", "", "EFS file system id, fs-... (storageProvider aws-efs)."
    )
    data_volume_size: str = key("dataVolumeSize", "10Gi", "Size of the training-data PVC (a quantity).")
    checkpoint_volume_size: str = key(
        "checkpointVolumeSize", "20Gi", "Size of the checkpoint/model PVC (a quantity)."
    )
    checkpoint_volume_retain: bool = key(
        "checkpointVolumeRetain",
        True,
        "Keep the checkpoint PVC, and the namespace it lives in when the stack creates it, in the "
        "cluster when the stack is destroyed (retainOnDelete).",
    )
    reattach_retained: bool = key(
        "reattachRetained",
        False,
        "Adopt the namespace and checkpoint PVC an earlier destroy of this stack left behind "
        "(checkpointVolumeRetain) instead of creating them (Pulumi import).",
    )

    # --- S3 / MinIO --------------------------------------------------------------------------
    minio_endpoint: str = key(
        "minioEndpoint", "", "S3/MinIO endpoint as host[:port]; empty when no object store is used."
    )
    minio_tls: bool = key("minioTls", True, "Reach the endpoint over https (true) or http (false).")
    minio_bucket: str = key("minioBucket", "mnist", "Bucket holding the MNIST files.")
    minio_prefix: str = key(
        "minioPrefix",
        "mnist",
        "Key prefix inside the bucket: the MNIST files, and models/<job>/ when jobModelExport is on.",
    )
    minio_region: str = key("minioRegion", "us-east-1", "Region name sent to the S3 API.")
    minio_egress_port: int = key(
        "minioEgressPort",
        0,
        "TCP port the NetworkPolicies (job and seed Job) let pods reach the S3/MinIO endpoint on: the "
        "MinIO pods' port, since a NetworkPolicy port is a port on the peer pod (a Service mapping port "
        "80 to MinIO's 9000 needs 9000 here); 0 uses minioEndpoint's port.",
        ge=0,
        le=65535,
    )
    minio_existing_secret: str = key(
        "minioExistingSecret",
        "",
        "Name of an existing Secret with keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the "
        "namespace, instead of minioAccessKey/minioSecretKey; only with createNamespace false (the "
        "Secret must exist before the first `pulumi up`, so its namespace must too).",
    )

    # --- training operator -------------------------------------------------------------------
    operator_install: bool = key(
        "operatorInstall", True, "Install the Kubeflow training operator; false assumes it is present."
    )
    operator_version: str = key(
        "operatorVersion", "v1.9.4", "Pinned training-operator release tag (vMAJOR.MINOR.PATCH)."
    )
    operator_source: str = key(
        "operatorSource",
        "",
        "Kustomize source of the operator (a mirror for air-gapped clusters): a local path (absolute, or "
        "./ or ../ relative to the directory of Pulumi.yaml) or a git URL with ?ref=<tag or commit>; "
        "empty uses the upstream standalone overlay at operatorVersion.",
    )

    operator_image: str = key(
        "operatorImage",
        "",
        "Image of the operator's controller (a mirror for air-gapped clusters), pinned; empty keeps the "
        "overlay's own image.",
    )
    operator_init_container_image: str = key(
        "operatorInitContainerImage",
        OPERATOR_INIT_IMAGE,
        "Image of the init container the installed operator adds to PyTorchJob Worker pods (it waits "
        "for the master's DNS name; needs sh and getent, as alpine's musl-utils); pinned by digest. "
        "Point it at a mirror on air-gapped clusters.",
    )
    operator_init_container_restricted: bool = key(
        "operatorInitContainerRestricted",
        False,
        "With operatorInstall false: declare that the operator already present configures its PyTorchJob "
        "init container to meet Pod Security 'restricted' (as this project's install does). Required for "
        "a multi-node PyTorchJob in a namespace enforcing 'restricted'.",
    )

    # --- post-install smoke check (platform and 'all' stacks) ---------------------------------
    operator_smoke_check: bool = key(
        "operatorSmokeCheck",
        True,
        "After installing the training operator (and Kubeflow Trainer v2), `pulumi up` runs a tiny "
        "PyTorchJob (a Master and one Worker; and a two-node TrainJob) in the namespace ddp-mnist-smoke, "
        "which it creates enforcing Pod Security 'restricted', and fails with one line naming the cause "
        "unless it succeeds (Worker refused by admission, image not pullable, ...). Needs no GPU; the "
        "pods run operatorInitContainerImage. Ignored by job stacks.",
    )

    # --- Kubeflow Trainer v2 (TrainJob) -------------------------------------------------------
    trainer_install: bool = key(
        "trainerInstall",
        False,
        "Install Kubeflow Trainer v2 (TrainJob, TrainingRuntime) with the JobSet controller it brings, "
        "from the pinned upstream overlay manifests/overlays/manager; needed by jobKind trainjob unless "
        "trainerPresent declares it installed.",
    )
    trainer_present: bool = key(
        "trainerPresent",
        False,
        "With trainerInstall false: declare that Kubeflow Trainer v2 and JobSet are already in the "
        "cluster (e.g. installed by the cluster's platform stack), so jobKind trainjob may be used.",
    )
    trainer_version: str = key(
        "trainerVersion", "v2.3.0", "Pinned Kubeflow Trainer release tag (vMAJOR.MINOR.PATCH)."
    )
    trainer_source: str = key(
        "trainerSource",
        "",
        "Kustomize source of Trainer v2 (a mirror for air-gapped clusters): a local path (absolute, or "
        "./ or ../ relative to the directory of Pulumi.yaml) or a git URL with ?ref=<tag or commit>; "
        "empty uses the upstream manifests/overlays/manager at trainerVersion (which pulls JobSet's "
        "release manifests from GitHub).",
    )
    trainer_image: str = key(
        "trainerImage",
        "",
        "Image of the Trainer v2 controller manager (a mirror for air-gapped clusters), pinned; empty "
        "keeps the overlay's own (ghcr.io/kubeflow/trainer/trainer-controller-manager at the tag).",
    )
    trainer_jobset_image: str = key(
        "trainerJobSetImage",
        "",
        "Image of the JobSet controller the Trainer v2 overlay installs (a mirror for air-gapped "
        "clusters), pinned; empty keeps the overlay's own (registry.k8s.io/jobset/jobset:v0.12.0).",
    )
    allow_both_operators: bool = key(
        "allowBothOperators",
        False,
        "Allow one stack to install both the training operator v1 (operatorInstall) and Kubeflow "
        "Trainer v2 (trainerInstall): two controllers, two webhooks, two sets of CRDs; off by default.",
    )
    operator_adopt_crds: bool = key(
        "operatorAdoptCrds",
        False,
        "With operatorInstall: adopt the training operator's CRDs a destroy left in the cluster (Pulumi "
        "import of each CRD of the overlay) instead of creating them; every CRD must be there.",
    )
    trainer_adopt_crds: bool = key(
        "trainerAdoptCrds",
        False,
        "With trainerInstall: adopt Trainer v2's (and JobSet's) CRDs a destroy left in the cluster "
        "(Pulumi import of each CRD of the overlay) instead of creating them; every CRD must be there.",
    )

    # --- training job ------------------------------------------------------------------------
    job_kind: Literal["pytorchjob", "indexed-job", "trainjob"] = key(
        "jobKind",
        "pytorchjob",
        "Kubeflow PyTorchJob, a plain Indexed Job with a headless Service, or a Kubeflow Trainer v2 "
        "TrainJob with a TrainingRuntime of its own.",
    )
    job_name: str = key("jobName", "mnist", "Base name of the job; the run id is appended.")
    job_run_id: str = key(
        "jobRunId",
        "r1",
        "Run id: part of the job's name and checkpoint directory; change it to start a new run.",
    )
    job_nodes: int = key("jobNodes", 2, "Number of pods (nodes) in the job.", ge=1, le=512)
    job_procs_per_node: int = key(
        "jobProcsPerNode", 1, "Training processes per pod (one per GPU on GPU pools).", ge=1, le=16
    )
    job_gpus_per_node: int = key(
        "jobGpusPerNode", 0, "nvidia.com/gpu requested per pod; 0 trains on CPU.", ge=0, le=16
    )
    job_image: str = key(
        "jobImage",
        "ghcr.io/ddp-mnist/trainer:0.1.0",
        "Trainer image, pinned by tag or digest (':latest' and untagged are rejected).",
    )
    job_image_pull_policy: Literal["IfNotPresent", "Always", "Never"] = key(
        "jobImagePullPolicy", "IfNotPresent", "imagePullPolicy of the trainer container."
    )
    job_backend: Literal["auto", "nccl", "gloo"] = key(
        "jobBackend", "auto", "torch.distributed backend; auto picks nccl with GPUs, else gloo."
    )
    job_epochs: int = key("jobEpochs", 3, "Training epochs.", ge=1, le=1000)
    job_batch_size: int = key(
        "jobBatchSize",
        256,
        "Batch size: global under strong scaling, per process under weak.",
        ge=1,
        le=65536,
    )
    job_scaling: Literal["strong", "weak"] = key(
        "jobScaling", "strong", "strong: global batch fixed; weak: per-process batch fixed."
    )
    job_learning_rate: float = key(
        "jobLearningRate", 0.01, "Base learning rate (a decimal string in config).", gt=0, le=10
    )
    job_lr_scaling: Literal["none", "linear", "sqrt"] = key(
        "jobLrScaling", "none", "Scale the learning rate with the world size."
    )
    job_data_source: Literal["pvc", "s3"] = key(
        "jobDataSource", "pvc", "Read MNIST from the data PVC, or from the S3/MinIO bucket."
    )
    seed_source: Literal["https", "s3", "none"] = key(
        "seedSource",
        "https",
        "Where the seed Job (run before the training job, when jobDataSource is pvc) takes MNIST from: "
        "'https' the seedMirrors, 's3' the stack's bucket (minioBucket/minioPrefix), 'none' renders no "
        "seed Job (the data PVC is filled by other means).",
    )
    seed_mirrors: list[str] = key(
        "seedMirrors",
        ["https://ossci-datasets.s3.amazonaws.com/mnist/"],
        "HTTPS base URLs holding the four MNIST .gz files, tried in order; every file is checked against "
        "the canonical sha256 of its raw content.",
    )
    seed_backoff_limit: int = key(
        "seedBackoffLimit",
        4,
        "Retries of the seed Job after an unreachable source (bad input and bad data fail at once).",
        ge=0,
        le=20,
    )
    job_model_export: bool = key(
        "jobModelExport",
        False,
        "At the end of a successful run rank 0 uploads model.pt, metrics.json and their SHA256SUMS to "
        "s3://<minioBucket>/<minioPrefix>/models/<job>/ (the PVC copy stays).",
    )
    job_checkpoint_every: int = key(
        "jobCheckpointEvery", 1, "Checkpoint every N epochs (0: only at the end).", ge=0, le=1000
    )
    job_seed: int = key("jobSeed", 0, "Random seed.", ge=0)
    job_cpu_request: str = key("jobCpuRequest", "2", "CPU request per pod (a quantity).")
    job_cpu_limit: str = key("jobCpuLimit", "", "CPU limit per pod (a quantity); empty sets none.")
    job_memory_request: str = key("jobMemoryRequest", "2Gi", "Memory request per pod (a quantity).")
    job_memory_limit: str = key("jobMemoryLimit", "4Gi", "Memory limit per pod (a quantity).")
    job_shm_size: str = key("jobShmSize", "1Gi", "Size of the memory-backed /dev/shm (a quantity).")
    job_node_selector: list[str] = key(
        "jobNodeSelector", [], "Node labels the pods require, each 'key=value'."
    )
    job_tolerations: list[str] = key(
        "jobTolerations",
        [],
        "Taints tolerated, each 'key[=value]:Effect'; GPU stacks always tolerate nvidia.com/gpu.",
    )
    job_node_affinity: list[str] = key(
        "jobNodeAffinity",
        [],
        "Required node affinity, each 'key in a,b', 'key notin a,b', 'key exists' or 'key doesnotexist'.",
    )
    job_one_pod_per_node: bool = key(
        "jobOnePodPerNode", False, "Anti-affinity: never place two pods of the job on one node."
    )
    job_priority_class_name: str = key("jobPriorityClassName", "", "priorityClassName of the pods.")
    job_ttl_seconds_after_finished: int = key(
        "jobTtlSecondsAfterFinished",
        -1,
        "Delete the finished job after N seconds (opt-in); -1 keeps it.",
        ge=-1,
    )
    job_active_deadline_seconds: int = key(
        "jobActiveDeadlineSeconds", 0, "Fail the job after N seconds of running; 0 sets no deadline.", ge=0
    )
    job_backoff_limit: int = key(
        "jobBackoffLimit",
        3,
        "Retries: PyTorchJob backoffLimit, or the Indexed Job's backoff per index.",
        ge=0,
        le=100,
    )
    job_restart_policy: Literal["OnFailure", "Never", "ExitCode"] = key(
        "jobRestartPolicy",
        "OnFailure",
        "PyTorchJob replica restart policy: OnFailure restarts failed containers in place (jobBackoffLimit "
        "incidents survived), bad input included; ExitCode fails at once on exit codes 1-127 (bad input) "
        "and retries 128 and above (signals, the trainer's 2xx: lost peer, S3, master, export) with new "
        "pods, which only "
        "jobActiveDeadlineSeconds bounds (required with it).",
    )
    job_clean_pod_policy: Literal["None", "Running", "All"] = key(
        "jobCleanPodPolicy", "None", "PyTorchJob cleanPodPolicy: which pods to delete when the job ends."
    )
    job_wait: bool = key(
        "jobWait",
        False,
        "Make `pulumi up` wait until the job has ended, either way (its success condition, Succeeded or "
        "Complete, or Failed; at most jobWaitTimeoutSeconds), then fail `pulumi up` if it Failed.",
    )
    job_wait_timeout_seconds: int = key(
        "jobWaitTimeoutSeconds", 3600, "How long `pulumi up` waits for the job (jobWait).", ge=60
    )
    job_queue_name: str = key(
        "jobQueueName",
        "",
        "Kueue LocalQueue the job is submitted to (the stack creates it in its namespace); empty submits "
        "directly.",
    )
    job_cluster_queue: str = key(
        "jobClusterQueue",
        "",
        "Kueue ClusterQueue the stack's LocalQueue (jobQueueName) points at; it must exist in the cluster.",
    )
    kueue_api_version: Literal["v1beta2", "v1beta1"] = key(
        "kueueApiVersion",
        "v1beta2",
        "API version of the LocalQueue (jobQueueName): v1beta2 (Kueue >= v0.15; its stored version from "
        "v0.16, where v1beta1 is deprecated), or v1beta1 for Kueue before v0.15.",
    )
    kueue_pytorchjob_integration: bool = key(
        "kueuePyTorchJobIntegration",
        False,
        "Declare that the cluster's Kueue manages PyTorchJobs ('kubeflow.org/pytorchjob' in its "
        "integrations.frameworks): required for jobKind pytorchjob with jobQueueName, as Kueue from "
        "v0.19 no longer enables it by default and would let the job run outside the queue.",
    )
    job_master_port: int = key(
        "jobMasterPort",
        DEFAULT_MASTER_PORT,
        "Rendezvous port of the master (node rank 0). With jobKind trainjob the torch plugin fixes it "
        "at 29500, which the default then stands for.",
        ge=1024,
        le=65535,
    )
    job_master_wait_seconds: int = key(
        "jobMasterWaitSeconds",
        300,
        "How long a worker waits for the master's port before failing.",
        ge=1,
        le=3600,
    )
    job_dist_timeout_seconds: int = key(
        "jobDistTimeoutSeconds",
        600,
        "Collective timeout; a hung rank fails the job after this.",
        ge=30,
        le=86400,
    )
    job_network_policy_peer_ports: Literal["all", "rendezvous-and-ephemeral"] = key(
        "jobNetworkPolicyPeerPorts",
        "all",
        "Ports the job's pods may use with each other: every TCP port (the policy's selector already "
        "confines it to the job), or only the rendezvous port and 32768-60999 (an endPort rule, which "
        "some network plugins do not support).",
    )
    job_dns_egress_cidrs: list[str] = key(
        "jobDnsEgressCidrs",
        ["169.254.20.10/32", "169.254.169.254/32"],
        "Addresses (CIDRs) besides kube-system pods the job may send DNS to: node-local caches such as "
        "NodeLocal DNSCache (169.254.20.10) and GKE Cloud DNS (169.254.169.254).",
    )
    job_network_policy: bool = key(
        "jobNetworkPolicy",
        True,
        "A NetworkPolicy that limits the job's pods to each other, DNS and the S3 endpoint; false "
        "leaves their traffic unrestricted (for CNIs or DNS setups the policy does not fit).",
    )
    job_run_as_user: int = key(
        "jobRunAsUser", 1000, "uid/gid the trainer runs as (the image's user).", ge=1, le=2147483647
    )

    # --- serving -----------------------------------------------------------------------------
    serve_kind: Literal["none", "kserve", "deployment"] = key(
        "serveKind",
        "none",
        "Serve the trained model once the training job succeeded: 'kserve' a KServe InferenceService "
        "(Standard deployment mode: a plain Deployment, no Knative), 'deployment' a Deployment and a "
        "Service, 'none' no server. Needs jobWait true (the server waits for the job's success).",
    )
    serve_model_source: Literal["pvc", "s3"] = key(
        "serveModelSource",
        "pvc",
        "Where the server loads the model from: 'pvc' the run's checkpoint directory on the checkpoint "
        "PVC (mounted read-only), 's3' the run's export under models/<job>/ (needs jobModelExport).",
    )
    serve_replicas: int = key(
        "serveReplicas",
        2,
        "Server pods; with more than one a PodDisruptionBudget keeps at least one serving.",
        ge=1,
        le=100,
    )
    serve_wait_timeout_seconds: int = key(
        "serveWaitTimeoutSeconds",
        600,
        "How long `pulumi up` waits for the server to be Ready (a new run's pods too, during the rollout).",
        ge=60,
        le=3600,
    )
    serve_port: int = key("servePort", 8080, "Port the server listens on in its pod.", ge=1024, le=65535)
    serve_max_batch: int = key(
        "serveMaxBatch", 256, "Most inputs the server accepts in one request.", ge=1, le=65536
    )
    serve_cpu_request: str = key("serveCpuRequest", "500m", "CPU request per server pod (a quantity).")
    serve_cpu_limit: str = key("serveCpuLimit", "1", "CPU limit per server pod (a quantity).")
    serve_memory_request: str = key(
        "serveMemoryRequest", "512Mi", "Memory request per server pod (a quantity)."
    )
    serve_memory_limit: str = key("serveMemoryLimit", "1Gi", "Memory limit per server pod (a quantity).")
    serve_ingress_namespaces: list[str] = key(
        "serveIngressNamespaces",
        [],
        "Namespaces besides the stack's own whose pods may call the server (its NetworkPolicy lets in "
        "nobody else).",
    )
    kserve_install: bool = key(
        "kserveInstall",
        False,
        "Install KServe (its release manifest kserve.yaml at kserveVersion, CRDs kept on destroy, default "
        "deployment mode Standard) in namespace kserve; cert-manager must already be in the cluster. "
        "A platform or 'all' stack only.",
    )
    kserve_present: bool = key(
        "kservePresent",
        False,
        "With kserveInstall false: declare that KServe (with its CRDs and webhook) is already in the "
        "cluster, e.g. from the platform stack, so serveKind kserve may be used.",
    )
    kserve_version: str = key(
        "kserveVersion", "v0.20.0", "Pinned KServe release tag (vMAJOR.MINOR.PATCH) kserveInstall applies."
    )

    # --- field rules -------------------------------------------------------------------------
    @model_validator(mode="before")
    @classmethod
    def _trainjob_master_port(cls, data: Any) -> Any:
        """Under jobKind trainjob the default jobMasterPort (the v1 operator's 23456) stands for the
        torch plugin's fixed 29500. The Pulumi CLI hands a program every key's default as if set, so
        the default cannot be told apart from an explicit 23456; any other port is refused by a check."""
        if not isinstance(data, dict) or data.get("jobKind", data.get("job_kind")) != "trainjob":
            return data
        port = data.get("jobMasterPort", data.get("job_master_port"))
        if port is not None and str(port) != str(DEFAULT_MASTER_PORT):
            return data
        rest = {k: v for k, v in data.items() if k not in ("jobMasterPort", "job_master_port")}
        return {**rest, "jobMasterPort": TRAINER_MASTER_PORT}

    @field_validator("namespace", "job_run_id")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        return _dns(value, DNS_LABEL, "DNS-1123 label")

    @field_validator("seed_mirrors")
    @classmethod
    def _https_mirrors(cls, value: list[str]) -> list[str]:
        import re

        for url in value:
            if not re.fullmatch(r"https://[A-Za-z0-9.-]+(:\d{1,5})?(/[^\s?#]*)?", url):
                raise ValueError(f"a list of https:// base URLs ({url!r} is not one)")
        return value

    @field_validator("job_dns_egress_cidrs")
    @classmethod
    def _cidrs(cls, value: list[str]) -> list[str]:
        import ipaddress

        for cidr in value:
            try:
                ipaddress.ip_network(cidr)
            except ValueError:
                raise ValueError(f"a list of CIDRs such as 169.254.20.10/32 ({cidr!r} is not one)") from None
        return value

    @field_validator(
        "job_queue_name", "job_cluster_queue", "job_priority_class_name", "minio_existing_secret"
    )
    @classmethod
    def _optional_dns_label(cls, value: str) -> str:
        return value and _dns(value, DNS_LABEL, "DNS-1123 label (or empty)")

    @field_validator("serve_ingress_namespaces")
    @classmethod
    def _namespace_list(cls, value: list[str]) -> list[str]:
        for name in value:
            if len(name) > 63 or not DNS_LABEL.match(name):
                raise ValueError(f"a list of namespace names, DNS-1123 labels ({name!r} is not one)")
        return value

    @field_validator("storage_class_name")
    @classmethod
    def _dns_subdomain(cls, value: str) -> str:
        return _dns(value, DNS_SUBDOMAIN, "DNS-1123 subdomain", 253)

    @field_validator("job_name")
    @classmethod
    def _dns_1035(cls, value: str) -> str:
        return _dns(value, DNS_1035, "DNS-1035 label starting with a letter")

    @field_validator(
        "data_volume_size",
        "checkpoint_volume_size",
        "job_cpu_request",
        "job_memory_request",
        "job_memory_limit",
        "job_shm_size",
        "serve_cpu_request",
        "serve_cpu_limit",
        "serve_memory_request",
        "serve_memory_limit",
    )
    @classmethod
    def _quantity(cls, value: str) -> str:
        if not QUANTITY.match(value) or parse_quantity(value) <= 0:
            raise ValueError("a positive Kubernetes quantity such as 500m, 2, 10Gi")
        return value

    @field_validator(
        "job_cpu_limit",
        "namespace_cpu_quota",
        "namespace_memory_quota",
        "namespace_default_cpu_request",
        "namespace_default_memory_request",
    )
    @classmethod
    def _optional_quantity(cls, value: str) -> str:
        return value and cls._quantity(value)

    @field_validator("operator_version", "trainer_version", "kserve_version")
    @classmethod
    def _release_tag(cls, value: str) -> str:
        if not re.fullmatch(r"v\d+\.\d+\.\d+", value):
            raise ValueError("a release tag vMAJOR.MINOR.PATCH such as v1.9.4")
        return value

    @field_validator("job_image")
    @classmethod
    def _pinned_image(cls, value: str) -> str:
        return check_pinned_image(value)

    @field_validator("operator_image", "trainer_image", "trainer_jobset_image")
    @classmethod
    def _optional_pinned_image(cls, value: str) -> str:
        return value and check_pinned_image(value)

    @field_validator("operator_init_container_image")
    @classmethod
    def _digest_pinned_image(cls, value: str) -> str:
        check_pinned_image(value)
        if "@sha256:" not in value:
            raise ValueError("an image pinned by digest, such as registry/alpine:3.20@sha256:<64 hex>")
        return value

    @property
    def backend(self) -> Literal["nccl", "gloo"]:
        """The effective backend: nccl with GPUs, gloo without, unless set explicitly."""
        if self.job_backend != "auto":
            return self.job_backend
        return "nccl" if self.job_gpus_per_node > 0 else "gloo"

    @property
    def seeds_data(self) -> bool:
        """Whether the stack renders the seed Job: the trainer reads the data PVC and a source is set."""
        return self.job_data_source == "pvc" and self.seed_source != "none"

    @property
    def world_size(self) -> int:
        return self.job_nodes * self.job_procs_per_node


_SUFFIX = {
    "": 1,
    "m": 0.001,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "n": 1e-9,
    "u": 1e-6,
}


def parse_quantity(value: str) -> float:
    """A Kubernetes quantity as a number (bytes or cores); 0 when it cannot be read."""
    match = re.fullmatch(r"([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)([a-zA-Z]*)", value)
    if not match or match.group(2) not in _SUFFIX:
        return 0.0
    return float(match.group(1)) * _SUFFIX[match.group(2)]


_IMAGE = re.compile(
    r"^(?P<repo>[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?$"
)


def check_pinned_image(value: str) -> str:
    """Accept `repo:tag`, `repo@sha256:...` or both; reject untagged and `:latest`."""
    match = _IMAGE.match(value)
    if not match:
        raise ValueError("an image reference such as registry/repo:1.2.3 or registry/repo@sha256:<64 hex>")
    if match.group("digest"):
        return value
    if not match.group("tag"):
        raise ValueError("a pinned image: add a version tag or an @sha256 digest (untagged means latest)")
    if match.group("tag") == "latest":
        raise ValueError("a pinned image: ':latest' moves; use a version tag or an @sha256 digest")
    return value


def config_key(field: str) -> str:
    """The full config key (`ddp-mnist:jobNodes`) of a model field name."""
    alias = Settings.model_fields[field].alias or field
    return f"{PROJECT}:{alias}"
