"""Bad stack config: each fails with its exact one-line message, before any resource is registered."""

from __future__ import annotations

from pathlib import Path

import pulumi
import pytest

from infra.program.checks import ConfigError
from infra.program.common.config import settings_from_raw
from infra.review.manifest import RecordingMocks, run_program
from tests.infra.conftest import BASE, stack_config

BAD_CONFIGS = [
    ({"jobNodes": 0}, "config ddp-mnist:jobNodes=0 is invalid: must be >= 1"),
    ({"jobNodes": "two"}, "config ddp-mnist:jobNodes=two is invalid: must be an integer"),
    (
        {"jobKind": "mpijob"},
        "config ddp-mnist:jobKind=mpijob is invalid: must be one of 'pytorchjob', 'indexed-job' or 'trainjob'",
    ),
    (
        {"jobImage": "ghcr.io/acme/trainer:latest"},
        "config ddp-mnist:jobImage=ghcr.io/acme/trainer:latest is invalid: must be a pinned image: ':latest' moves; use a version tag or an @sha256 digest",
    ),
    (
        {"jobImage": "ghcr.io/acme/trainer"},
        "config ddp-mnist:jobImage=ghcr.io/acme/trainer is invalid: must be a pinned image: add a version tag or an @sha256 digest (untagged means latest)",
    ),
    (
        {"jobImage": "GHCR.io/Acme/trainer:1.0"},
        "config ddp-mnist:jobImage=GHCR.io/Acme/trainer:1.0 is invalid: must be an image reference such as registry/repo:1.2.3 or registry/repo@sha256:<64 hex>",
    ),
    (
        {"jobBackend": "nccl"},
        "config ddp-mnist:jobBackend=nccl is invalid: must be gloo or auto when jobGpusPerNode is 0 (nccl needs GPUs)",
    ),
    (
        {"jobGpusPerNode": 2, "jobProcsPerNode": 4},
        "config ddp-mnist:jobProcsPerNode=4 is invalid: must be <= jobGpusPerNode (2): one process per GPU",
    ),
    (
        {"jobNodes": 3, "jobBatchSize": 100},
        "config ddp-mnist:jobBatchSize=100 is invalid: must be divisible by the world size 3 (jobNodes x jobProcsPerNode) under strong scaling",
    ),
    (
        {"namespace": "Bad_NS"},
        "config ddp-mnist:namespace=Bad_NS is invalid: must be a DNS-1123 label (lowercase letters, digits and '-', at most 63 characters)",
    ),
    (
        {"jobName": "1mnist"},
        "config ddp-mnist:jobName=1mnist is invalid: must be a DNS-1035 label starting with a letter (lowercase letters, digits and '-', at most 63 characters)",
    ),
    (
        {"jobRunId": "a-very-long-run-identifier-of-many-words"},
        "config ddp-mnist:jobRunId=a-very-long-run-identifier-of-many-words is invalid: must be short enough that 'mnist-a-very-long-run-identifier-of-many-words' (jobName-jobRunId) has at most 40 characters",
    ),
    (
        {"dataVolumeSize": "ten gigs"},
        "config ddp-mnist:dataVolumeSize=ten gigs is invalid: must be a positive Kubernetes quantity such as 500m, 2, 10Gi",
    ),
    (
        {"stackRole": "platform", "kserveInstall": True, "kserveSource": "http://mirror.example/kserve.yaml"},
        "config ddp-mnist:kserveSource=http://mirror.example/kserve.yaml is invalid: must be a local file (/..., ./..., ../...) or an https URL of KServe's release manifest (kserve.yaml)",
    ),
    (
        {"jobMemoryRequest": "8Gi", "jobMemoryLimit": "4Gi"},
        "config ddp-mnist:jobMemoryRequest=8Gi is invalid: must be <= jobMemoryLimit (4Gi)",
    ),
    (
        {"jobCpuRequest": "4", "jobCpuLimit": "2"},
        "config ddp-mnist:jobCpuRequest=4 is invalid: must be <= jobCpuLimit (2)",
    ),
    (
        {"jobShmSize": "4Gi", "jobMemoryLimit": "4Gi"},
        "config ddp-mnist:jobShmSize=4Gi is invalid: must be < jobMemoryLimit (4Gi): /dev/shm counts against it",
    ),
    (
        {"storageProvider": "ceph"},
        "config ddp-mnist:storageProvider=ceph is invalid: must be one of 'nfs-csi', 'gke-filestore', 'azure-files', 'aws-efs' or 'existing'",
    ),
    (
        {"nfsServer": ""},
        'config ddp-mnist:nfsServer="" is invalid: must be the NFS server\'s address when storageProvider is nfs-csi',
    ),
    (
        {"storageProvider": "aws-efs", "efsFileSystemId": "vol-123"},
        "config ddp-mnist:efsFileSystemId=vol-123 is invalid: must be an EFS id such as fs-0123456789abcdef0 when storageProvider is aws-efs",
    ),
    (
        {"storageProvider": "gke-filestore"},
        "config ddp-mnist:dataVolumeSize=10Gi is invalid: must be from 100Gi to 63.9Ti for filestoreTier standard "
        "(the Filestore driver rounds a smaller claim up to 100Gi, billed as such, and refuses a larger one)",
    ),
    (
        {"storageProvider": "azure-files", "azureFilesSkuName": "Standard_LRS"},
        "config ddp-mnist:azureFilesSkuName=Standard_LRS is invalid: must be Premium_LRS or Premium_ZRS with azureFilesProtocol nfs",
    ),
    (
        {"jobDataSource": "s3"},
        'config ddp-mnist:minioEndpoint="" is invalid: must be set when jobDataSource is s3',
    ),
    (
        {"jobDataSource": "s3", "minioEndpoint": "minio:9000"},
        "config ddp-mnist:minioAccessKey=(unset) is invalid: must be set (with minioSecretKey, both --secret) or minioExistingSecret given when jobDataSource is s3",
    ),
    (
        {"minioEndpoint": "http://minio:9000"},
        "config ddp-mnist:minioEndpoint=http://minio:9000 is invalid: must be host[:port] without a scheme, such as minio.minio.svc:9000 (minioTls picks https)",
    ),
    (
        {"minioBucket": "My_Bucket"},
        "config ddp-mnist:minioBucket=My_Bucket is invalid: must be a bucket name: 3-63 lowercase letters, digits, '.', '-'",
    ),
    (
        {
            "operatorSource": "https://github.com/kubeflow/trainer.git//manifests/overlays/standalone?ref=master"
        },
        "config ddp-mnist:operatorSource=https://github.com/kubeflow/trainer.git//manifests/overlays/standalone?ref=master is invalid: must be a local path (/..., ./..., ../...), or a git URL pinned with ?ref=<release tag vX.Y.Z or 40-hex commit> (never a branch)",
    ),
    (
        {"operatorVersion": "1.9.4"},
        "config ddp-mnist:operatorVersion=1.9.4 is invalid: must be a release tag vMAJOR.MINOR.PATCH such as v1.9.4",
    ),
    (
        {"jobTolerations": ["nvidia.com/gpu:NoSchedul"]},
        "config ddp-mnist:jobTolerations=nvidia.com/gpu:NoSchedul is invalid: must be entries 'key[=value]:Effect' with Effect one of NoSchedule, PreferNoSchedule, NoExecute",
    ),
    (
        {"jobNodeSelector": ["gpu"]},
        "config ddp-mnist:jobNodeSelector=gpu is invalid: must be entries 'label-key=label-value'",
    ),
    (
        {"jobNodeAffinity": ["zone in"]},
        "config ddp-mnist:jobNodeAffinity=zone in is invalid: must be entries 'key in a,b', 'key notin a,b', 'key exists' or 'key doesnotexist'",
    ),
    (
        {"jobNodeSelector": "gpu=true"},
        "config ddp-mnist:jobNodeSelector=gpu=true is invalid: must be a list of strings (in YAML a list, on the CLI --path 'key[0]')",
    ),
    (
        {"jobNode": 2},
        "config ddp-mnist:jobNode=2 is invalid: must be a key of this project (did you mean jobNodes?)",
    ),
    (
        {"kubernetesVersion": "1.20"},
        "config ddp-mnist:kubernetesVersion=1.20 is invalid: must be one of '1.29', '1.30', '1.31', '1.32', '1.33', '1.34', '1.35', '1.36' or '1.37'",
    ),
    ({"jobMasterPort": 80}, "config ddp-mnist:jobMasterPort=80 is invalid: must be >= 1024"),
    (
        {"jobTerminationGracePeriodSeconds": 2},
        "config ddp-mnist:jobTerminationGracePeriodSeconds=2 is invalid: must be >= 5",
    ),
    (
        {"jobTerminationGracePeriodSeconds": 3600},
        "config ddp-mnist:jobTerminationGracePeriodSeconds=3600 is invalid: must be <= 600",
    ),
    ({"jobLearningRate": "fast"}, "config ddp-mnist:jobLearningRate=fast is invalid: must be a number"),
    (
        {"createNamespace": "maybe"},
        "config ddp-mnist:createNamespace=maybe is invalid: must be true or false",
    ),
    (
        {"jobRestartPolicy": "Always"},
        "config ddp-mnist:jobRestartPolicy=Always is invalid: must be one of 'OnFailure', 'Never' or 'ExitCode'",
    ),
    (
        {"jobTtlSecondsAfterFinished": -5},
        "config ddp-mnist:jobTtlSecondsAfterFinished=-5 is invalid: must be >= -1",
    ),
    # --- namespace budget and isolation ---
    ({"namespaceGpuQuota": -1}, "config ddp-mnist:namespaceGpuQuota=-1 is invalid: must be >= 0"),
    ({"namespaceGpuQuota": "four"}, "config ddp-mnist:namespaceGpuQuota=four is invalid: must be an integer"),
    (
        {"jobGpusPerNode": 2, "jobProcsPerNode": 2, "namespaceGpuQuota": 3},
        "config ddp-mnist:namespaceGpuQuota=3 is invalid: must be >= the job's 4 GPUs (jobNodes x jobGpusPerNode), or its pods can never all start",
    ),
    (
        {"namespaceMaxGpusPerContainer": 17},
        "config ddp-mnist:namespaceMaxGpusPerContainer=17 is invalid: must be <= 16",
    ),
    (
        {"jobGpusPerNode": 4, "jobProcsPerNode": 4, "namespaceMaxGpusPerContainer": 2},
        "config ddp-mnist:jobGpusPerNode=4 is invalid: must be <= namespaceMaxGpusPerContainer (2)",
    ),
    (
        {"namespaceCpuQuota": "lots"},
        "config ddp-mnist:namespaceCpuQuota=lots is invalid: must be a positive Kubernetes quantity such as 500m, 2, 10Gi",
    ),
    (
        {"namespaceCpuQuota": "3"},
        "config ddp-mnist:namespaceCpuQuota=3 is invalid: must be >= jobNodes x jobCpuRequest (2 x 2), or its pods can never all start",
    ),
    (
        {"namespaceMemoryQuota": "3Gi"},
        "config ddp-mnist:namespaceMemoryQuota=3Gi is invalid: must be >= jobNodes x jobMemoryRequest (2 x 2Gi), or its pods can never all start",
    ),
    (
        {"namespaceDefaultCpuRequest": "0"},
        "config ddp-mnist:namespaceDefaultCpuRequest=0 is invalid: must be a positive Kubernetes quantity such as 500m, 2, 10Gi",
    ),
    (
        {"namespaceDefaultMemoryRequest": "-1Gi"},
        "config ddp-mnist:namespaceDefaultMemoryRequest=-1Gi is invalid: must be a positive Kubernetes quantity such as 500m, 2, 10Gi",
    ),
    (
        {"jobNetworkPolicy": "sometimes"},
        "config ddp-mnist:jobNetworkPolicy=sometimes is invalid: must be true or false",
    ),
    # --- day two: roles, retention, Kueue, retries, network ---
    (
        {"stackRole": "platform", "operatorInstall": False},
        "config ddp-mnist:operatorInstall=false is invalid: must be true when stackRole is platform (the platform stack installs the operator)",
    ),
    (
        {"stackRole": "job"},
        "config ddp-mnist:operatorInstall=true is invalid: must be false when stackRole is job: the cluster's platform stack installs the operator and owns its CRDs (stackRole all installs both in one stack)",
    ),
    (
        {"stackRole": "cluster"},
        "config ddp-mnist:stackRole=cluster is invalid: must be one of 'all', 'platform', 'job' or 'prerequisites'",
    ),
    (
        {"reattachRetained": True, "checkpointVolumeRetain": False},
        "config ddp-mnist:reattachRetained=true is invalid: must be false unless checkpointVolumeRetain is true (nothing was retained)",
    ),
    (
        {"operatorAdoptCrds": True, "operatorInstall": False, "operatorInitContainerRestricted": True},
        "config ddp-mnist:operatorAdoptCrds=true is invalid: must be false unless operatorInstall is true (nothing is installed)",
    ),
    (
        {"trainerAdoptCrds": True},
        "config ddp-mnist:trainerAdoptCrds=true is invalid: must be false unless trainerInstall is true (nothing is installed)",
    ),
    (
        {"jobQueueName": "team-a"},
        'config ddp-mnist:jobClusterQueue="" is invalid: must be the Kueue ClusterQueue that LocalQueue team-a (jobQueueName) points at: the stack creates that LocalQueue in its namespace, and without one Kueue keeps the job suspended',
    ),
    (
        {"jobQueueName": "team-a", "jobClusterQueue": "gpus"},
        "config ddp-mnist:kueuePyTorchJobIntegration=false is invalid: must be true with jobKind pytorchjob and jobQueueName, once 'kubeflow.org/pytorchjob' is in the integrations.frameworks of Kueue's Configuration: Kueue from v0.19 leaves it out by default and then lets the PyTorchJob run at once, outside the ClusterQueue's quota (or use jobKind indexed-job, which Kueue always manages)",
    ),
    (
        {"kueueApiVersion": "v1alpha1"},
        "config ddp-mnist:kueueApiVersion=v1alpha1 is invalid: must be one of 'v1beta2' or 'v1beta1'",
    ),
    (
        {"jobKind": "trainjob", "trainerPresent": True, "kubernetesVersion": "1.30"},
        "config ddp-mnist:kubernetesVersion=1.30 is invalid: must be 1.31 or later with jobKind trainjob: Kubeflow Trainer v2 (v2.3.0) supports Kubernetes >= 1.31 only (use jobKind pytorchjob or indexed-job on older clusters)",
    ),
    (
        {
            "stackRole": "platform",
            "operatorInstall": False,
            "trainerInstall": True,
            "kubernetesVersion": "1.29",
        },
        "config ddp-mnist:kubernetesVersion=1.29 is invalid: must be 1.31 or later with trainerInstall true: Kubeflow Trainer v2 (v2.3.0) supports Kubernetes >= 1.31 only (use jobKind pytorchjob or indexed-job on older clusters)",
    ),
    (
        {"jobRestartPolicy": "ExitCode", "jobActiveDeadlineSeconds": 0},
        "config ddp-mnist:jobActiveDeadlineSeconds=0 is invalid: must be > 0 with jobRestartPolicy ExitCode: the operator retries retryable exit codes with new pods and its backoffLimit never counts them, so only a deadline bounds the retries",
    ),
    (
        {"jobDnsEgressCidrs": ["169.254.20.10/33"]},
        """config ddp-mnist:jobDnsEgressCidrs=["169.254.20.10/33"] is invalid: must be a list of CIDRs such as 169.254.20.10/32 ('169.254.20.10/33' is not one)""",
    ),
    (
        {"jobNetworkPolicyPeerPorts": "some"},
        "config ddp-mnist:jobNetworkPolicyPeerPorts=some is invalid: must be one of 'all' or 'rendezvous-and-ephemeral'",
    ),
    # --- Pod Security and the operator's init container ---
    (
        {"namespacePodSecurity": "strict"},
        "config ddp-mnist:namespacePodSecurity=strict is invalid: must be one of 'restricted', 'baseline' or 'privileged'",
    ),
    (
        {"operatorInstall": False},
        "config ddp-mnist:operatorInitContainerRestricted=false is invalid: must be true when operatorInstall is false and a multi-node PyTorchJob runs in a namespace enforcing Pod Security 'restricted' (the operator adds an init container to every Worker pod, upstream's without a securityContext, and the namespace refuses those pods): configure that operator's init container template to be restricted-compliant (as operatorInstall true does) and set this key, or set namespacePodSecurity to baseline",
    ),
    (
        {"operatorInitContainerImage": "alpine:3.20"},
        "config ddp-mnist:operatorInitContainerImage=alpine:3.20 is invalid: must be an image pinned by digest, such as registry/alpine:3.20@sha256:<64 hex>",
    ),
    (
        {"operatorImage": "mirror.example.com/training-operator"},
        "config ddp-mnist:operatorImage=mirror.example.com/training-operator is invalid: must be a pinned image: add a version tag or an @sha256 digest (untagged means latest)",
    ),
    # --- serving ---
    (
        {"serveKind": "knative"},
        "config ddp-mnist:serveKind=knative is invalid: must be one of 'none', 'kserve' or 'deployment'",
    ),
    (
        {"serveKind": "kserve", "jobWait": True},
        "config ddp-mnist:serveKind=kserve is invalid: must be deployment or none unless KServe is in the cluster: set kservePresent true (KServe installed by the platform stack) or kserveInstall true (stackRole all)",
    ),
    (
        {"serveKind": "deployment"},
        "config ddp-mnist:jobWait=false is invalid: must be true when serveKind is deployment: the server is created only after the training job succeeded, which only a waited job tells",
    ),
    (
        {"serveKind": "deployment", "jobWait": True, "serveModelSource": "s3"},
        "config ddp-mnist:serveModelSource=s3 is invalid: must be pvc unless jobModelExport is true (the server reads the run's export, which only jobModelExport writes)",
    ),
    (
        {
            "stackRole": "job",
            "operatorInstall": False,
            "operatorInitContainerRestricted": True,
            "kserveInstall": True,
        },
        "config ddp-mnist:kserveInstall=true is invalid: must be false when stackRole is job: the cluster's platform stack installs KServe and owns its CRDs (set kservePresent true here; stackRole all installs both in one stack)",
    ),
    (
        {"stackRole": "platform", "serveKind": "deployment"},
        "config ddp-mnist:serveKind=deployment is invalid: must be none when stackRole is platform (it runs no job to serve)",
    ),
    (
        {"serveKind": "deployment", "jobWait": True, "serveMemoryRequest": "2Gi"},
        "config ddp-mnist:serveMemoryRequest=2Gi is invalid: must be <= serveMemoryLimit (1Gi)",
    ),
    (
        {"serveKind": "deployment", "jobWait": True, "serveCpuRequest": "2"},
        "config ddp-mnist:serveCpuRequest=2 is invalid: must be <= serveCpuLimit (1)",
    ),
    (
        {"serveKind": "deployment", "jobWait": True, "namespaceCpuQuota": "5"},
        "config ddp-mnist:namespaceCpuQuota=5 is invalid: must be >= jobNodes x jobCpuRequest + (serveReplicas + 1) x serveCpuRequest (2 x 2 + 3 x 500m): the server runs while the next run trains, one pod more during its rollout",
    ),
    (
        {"serveReplicas": 0},
        "config ddp-mnist:serveReplicas=0 is invalid: must be >= 1",
    ),
    (
        {"serveIngressNamespaces": ["Apps"]},
        """config ddp-mnist:serveIngressNamespaces=["Apps"] is invalid: must be a list of namespace names, DNS-1123 labels ('Apps' is not one)""",
    ),
    (
        {"kserveVersion": "0.20"},
        "config ddp-mnist:kserveVersion=0.20 is invalid: must be a release tag vMAJOR.MINOR.PATCH such as v1.9.4",
    ),
    (
        {"mlflowTrackingUri": "file:///mlruns"},
        "config ddp-mnist:mlflowTrackingUri=file:///mlruns is invalid: must be an http(s)://host[:port][/path] URL "
        "without credentials, query or fragment (credentials go in mlflowExistingSecret)",
    ),
    (
        {"mlflowTrackingUri": "http://ann:CANARY-pw@mlflow:5000"},
        "config ddp-mnist:mlflowTrackingUri=[secret] is invalid: must be an http(s)://host[:port][/path] URL "
        "without credentials, query or fragment (credentials go in mlflowExistingSecret)",
    ),
    (
        {"mlflowExistingSecret": "mlflow-token"},
        "config ddp-mnist:mlflowExistingSecret=mlflow-token is invalid: must be empty without mlflowTrackingUri",
    ),
    (
        {"mlflowEgressPort": 5000},
        "config ddp-mnist:mlflowEgressPort=5000 is invalid: must be 0 without mlflowTrackingUri",
    ),
]


def _fails_before_registering(config):
    mocks = RecordingMocks()
    with pytest.raises(ConfigError) as raised:
        run_program(config, mocks)
    assert mocks.registrations == [], "resources were registered before the config was rejected"
    return str(raised.value)


def test_table_is_large_and_distinct():
    assert len(BAD_CONFIGS) >= 25
    assert len({m for _, m in BAD_CONFIGS}) == len(BAD_CONFIGS)


@pytest.mark.parametrize(
    ("values", "message"), BAD_CONFIGS, ids=[m.split("=")[0][7:] for _, m in BAD_CONFIGS]
)
def test_bad_config_is_rejected_with_its_message(values, message):
    assert _fails_before_registering(stack_config({**BASE, **values})) == message


SECRET_KEY_CASES = [
    (
        {},
        {"minioAccessKey": "AKIACANARY"},
        "config ddp-mnist:minioSecretKey=(unset) is invalid: must be set too: "
        "minioAccessKey and minioSecretKey go together",
    ),
    (
        {"minioExistingSecret": "minio-creds"},
        {"minioAccessKey": "AKIACANARY", "minioSecretKey": "s3cr3t"},
        "config ddp-mnist:minioExistingSecret=minio-creds is invalid: must be empty when "
        "minioAccessKey/minioSecretKey are set (choose one source)",
    ),
]


@pytest.mark.parametrize(("values", "secrets", "message"), SECRET_KEY_CASES)
def test_bad_secret_config(values, secrets, message):
    assert _fails_before_registering(stack_config({**BASE, **values}, secrets)) == message
    assert "AKIACANARY" not in message and "s3cr3t" not in message


def test_plaintext_credentials_are_refused_without_echoing_them():
    config = stack_config({**BASE, "minioAccessKey": "AKIACANARY", "minioSecretKey": "s3cr3t"})
    message = _fails_before_registering(config)
    assert message == (
        "config ddp-mnist:minioAccessKey=[secret] is invalid: must be set as a secret: "
        "pulumi config set --secret minioAccessKey <value>"
    )


def test_program_reports_bad_config_as_a_run_error_without_trace(monkeypatch):
    """`pulumi up` shows RunError messages alone, with no Python stack trace."""
    from infra.program import stack

    def bad():
        raise ConfigError("jobNodes", "0", ">= 1")

    monkeypatch.setattr("infra.program.common.config.load_settings", bad)
    with pytest.raises(pulumi.RunError, match=r"^config ddp-mnist:jobNodes=0 is invalid: must be >= 1$"):
        stack.main()


EMPTY_AND_UNPINNED = [
    (
        {"namespace": ""},
        "config ddp-mnist:namespace=\"\" is invalid: must be a DNS-1123 label (lowercase letters, digits and '-', at most 63 characters)",
    ),
    (
        {"jobRunId": ""},
        "config ddp-mnist:jobRunId=\"\" is invalid: must be a DNS-1123 label (lowercase letters, digits and '-', at most 63 characters)",
    ),
    (
        {"operatorSource": "gitlab.example.com/mirror/trainer//manifests/overlays/standalone?ref=main"},
        "config ddp-mnist:operatorSource=gitlab.example.com/mirror/trainer//manifests/overlays/standalone?ref=main is invalid: must be a local path (/..., ./..., ../...), or a git URL pinned with ?ref=<release tag vX.Y.Z or 40-hex commit> (never a branch)",
    ),
]


@pytest.mark.parametrize(("values", "message"), EMPTY_AND_UNPINNED)
def test_empty_names_and_unpinned_mirrors_are_rejected(values, message):
    assert _fails_before_registering(stack_config({**BASE, **values})) == message


ROOT = Path(__file__).resolve().parents[2]  # the directory of Pulumi.yaml


@pytest.mark.parametrize(
    ("key", "source", "directory"),
    [
        (
            "operatorSource",
            "./vendor/trainer/manifests/overlays/standalone",
            str(ROOT / "vendor/trainer/manifests/overlays/standalone"),
        ),
        ("operatorSource", "../mirror/standalone", str(ROOT.parent / "mirror/standalone")),
        ("operatorSource", "/srv/mirror/standalone", "/srv/mirror/standalone"),
        (
            "operatorSource",
            "gitlab.example.com/mirror/trainer//manifests/overlays/standalone?ref=v1.9.4",
            "gitlab.example.com/mirror/trainer//manifests/overlays/standalone?ref=v1.9.4",
        ),
        (
            "trainerSource",
            "./vendor/trainer/manifests/overlays/manager",
            str(ROOT / "vendor/trainer/manifests/overlays/manager"),
        ),
    ],
)
def test_pinned_mirror_and_local_checkout_are_accepted(key, source, directory, monkeypatch):
    """Pulumi runs the program and the provider in infra/ (`main: infra/`): a relative local path is
    read from the project root, whatever the working directory, and reaches kustomize absolute."""
    monkeypatch.chdir(ROOT / "infra")
    values = {**BASE, key: source}
    if key == "trainerSource":
        values.update({"trainerInstall": True, "allowBothOperators": True})
    mocks = RecordingMocks()
    run_program(stack_config(values), mocks)
    installs = [r for r in mocks.registrations if r.type.startswith("kubernetes:kustomize")]
    assert directory in [r.inputs["directory"] for r in installs]


@pytest.mark.parametrize(
    "values",
    [
        {"jobQueueName": "team-a", "jobClusterQueue": "gpus", "kueuePyTorchJobIntegration": True},
        {"jobQueueName": "team-a", "jobClusterQueue": "gpus", "jobKind": "indexed-job"},
        {"jobKind": "trainjob", "trainerPresent": True, "kubernetesVersion": "1.31"},
        {"jobKind": "pytorchjob", "kubernetesVersion": "1.29"},
    ],
)
def test_kueue_and_kubernetes_version_combinations_that_work_are_accepted(values):
    run_program(stack_config({**BASE, **values}), RecordingMocks())


@pytest.mark.parametrize(
    ("tier", "size", "accepted"),
    [
        ("standard", "100Gi", True),
        ("standard", "99Gi", False),
        ("premium", "2Ti", False),
        ("premium", "2.5Ti", True),
        ("enterprise", "11Ti", False),
        ("zonal", "100Ti", True),
        ("zonal", "101Ti", False),
    ],
)
def test_filestore_sizes_are_the_pinned_drivers_per_tier(tier, size, accepted):
    values = {"storageProvider": "gke-filestore", "filestoreTier": tier}
    values |= {"dataVolumeSize": size, "checkpointVolumeSize": size}
    if accepted:
        settings_of(values)
    else:
        with pytest.raises(
            ConfigError, match=f"dataVolumeSize={size} is invalid: must be from .* for filestoreTier {tier}"
        ):
            settings_of(values)


@pytest.mark.parametrize(
    ("mode", "reserved", "message"),
    [
        ("PRIVATE_SERVICE_ACCESS", "10.0.0.0/29", "the name of an allocated address range"),
        ("DIRECT_PEERING", "filestore-range", "a CIDR such as 10.10.0.0/24"),
    ],
)
def test_a_reserved_range_must_fit_the_connect_mode(mode, reserved, message):
    values = {"storageProvider": "gke-filestore", "dataVolumeSize": "1Ti", "checkpointVolumeSize": "1Ti"}
    with pytest.raises(
        ConfigError, match=f"filestoreReservedIpRange={reserved} is invalid: must be {message}"
    ):
        settings_of({**values, "filestoreConnectMode": mode, "filestoreReservedIpRange": reserved})


def settings_of(values: dict) -> object:
    stack = stack_config({**BASE, **values})
    return settings_from_raw(stack.values, set(stack.secret_keys))
