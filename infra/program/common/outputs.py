"""Every stack output the program can export: its name, what it holds, and the stack roles that export it.

`infra.program.stack` (and `infra.program.prerequisites.install`, `infra.program.platform.smoke`) export them;
this registry is what docs/reference/outputs.md is generated from (`python -m infra.reference`), and
tests/docs/test_reference.py checks that every shipped stack exports registered outputs of its role only,
and that each registered output is exported by some configuration. No output holds a secret.
"""

from __future__ import annotations

from dataclasses import dataclass

ALL, PLATFORM, JOB, PREREQUISITES = "all", "platform", "job", "prerequisites"
JOB_ROLES = (ALL, JOB)
PLATFORM_ROLES = (ALL, PLATFORM)
NFS_STORAGE = "`prerequisitesStorage` is nfs"
S3_KEYS = "the S3 key pair or `minioExistingSecret` is set"


@dataclass(frozen=True)
class StackOutput:
    description: str
    roles: tuple[str, ...]
    when: str = ""  # the condition under which it is exported; empty: always, for its roles
    # Its type in the component package's schema (infra/component/schema.py): string, object or array
    # (of strings).
    type: str = "string"


OUTPUTS: dict[str, StackOutput] = {
    "stackRole": StackOutput("The stack's role (`stackRole`).", (ALL, PLATFORM, JOB, PREREQUISITES)),
    "platform": StackOutput(
        "What the stack installed (operator, Trainer v2, KServe versions and facts), read by job stacks "
        "that name it in `platformStack`; exported once its smoke checks passed.",
        PLATFORM_ROLES,
        "it installs or patches an operator, or declares the platform's facts",
        type="object",
    ),
    # The job and where its data and results are.
    "jobOutcome": StackOutput("How the training run ended (`pulumi up` waits for it).", JOB_ROLES),
    "seedOutcome": StackOutput(
        "How the seed Job that fills the data volume ended.", JOB_ROLES, "it seeds data"
    ),
    "modelExport": StackOutput(
        "The S3 URI the run's model, metrics and SHA256SUMS are uploaded to.", JOB_ROLES, "`jobModelExport`"
    ),
    "namespace": StackOutput("The namespace the job runs in.", JOB_ROLES),
    "jobKind": StackOutput("The job kind (`jobKind`).", JOB_ROLES),
    "jobName": StackOutput("The training job's name (`jobName`-`jobRunId`).", JOB_ROLES),
    "dataClaim": StackOutput("The PersistentVolumeClaim holding MNIST.", JOB_ROLES),
    "checkpointClaim": StackOutput("The PersistentVolumeClaim holding checkpoints and the model.", JOB_ROLES),
    "storageClass": StackOutput("The StorageClass of the checkpoint volume.", JOB_ROLES),
    "dataStorageClass": StackOutput("The StorageClass of the data volume.", JOB_ROLES),
    "s3SecretName": StackOutput(
        "The name of the Secret with the S3 key pair (never its values).", JOB_ROLES, S3_KEYS
    ),
    "s3ReadSecretName": StackOutput(
        "The name of the Secret the read-only pods (seed, model server) use (never its values).",
        JOB_ROLES,
        S3_KEYS,
    ),
    "serviceAccount": StackOutput("The ServiceAccount the job's pods run as.", JOB_ROLES),
    "checkpointDir": StackOutput("The run's directory on the checkpoint volume.", JOB_ROLES),
    "curvesDir": StackOutput("Where the run writes its TensorBoard curves.", JOB_ROLES),
    "lineage": StackOutput(
        "Where the run's lineage.json lies: claim, path, and S3 URI when exported.", JOB_ROLES, type="object"
    ),
    "tensorboardCommand": StackOutput(
        "A command that opens the TensorBoard Deployment.", JOB_ROLES, "`tensorboardDeploy`"
    ),
    "logsCommand": StackOutput("A command that follows the training pods' logs.", JOB_ROLES),
    "statusCommand": StackOutput("A command that shows the training job's status.", JOB_ROLES),
    "podsCommand": StackOutput("A command that lists the training job's pods.", JOB_ROLES),
    # Serving.
    "serveKind": StackOutput("How the model is served (`serveKind`).", JOB_ROLES, "`serveKind` is not none"),
    "serveModelVersion": StackOutput(
        "The model version served (the run id).", JOB_ROLES, "`serveKind` is not none"
    ),
    "serveOutcome": StackOutput(
        "Whether the model server became ready (`pulumi up` waits for it).",
        JOB_ROLES,
        "`serveKind` is not none",
    ),
    "serveUrl": StackOutput("The in-cluster URL of the model server.", JOB_ROLES, "`serveKind` is not none"),
    "serveExample": StackOutput(
        "A command that forwards a port and asks the server for its model.",
        JOB_ROLES,
        "`serveKind` is not none",
    ),
    # Platform parts.
    "operatorSource": StackOutput(
        "Where the training operator's manifests come from.", (PLATFORM,), "`operatorInstall`"
    ),
    "operatorInitContainerImage": StackOutput(
        "The init container image the operator gives PyTorchJob workers.",
        (PLATFORM,),
        "`operatorInstall` or `operatorPatchExisting`",
    ),
    "operatorPatched": StackOutput(
        "The existing operator Deployment the stack patched.", (PLATFORM,), "`operatorPatchExisting`"
    ),
    "trainerSource": StackOutput(
        "Where Kubeflow Trainer v2's manifests come from.", (PLATFORM,), "`trainerInstall`"
    ),
    "kserveSource": StackOutput(
        "Where KServe's release manifest comes from.", PLATFORM_ROLES, "`kserveInstall`"
    ),
    "gpuDevicePlugin": StackOutput(
        "The NVIDIA device plugin DaemonSet's name.", (PLATFORM,), "`gpuDevicePlugin` is install"
    ),
    "teamNamespaces": StackOutput(
        "The team namespaces the platform created.", (PLATFORM,), "`teamNamespaces`", type="array"
    ),
    "storageClasses": StackOutput(
        "The StorageClasses the platform created.", (PLATFORM,), "`platformStorageClasses`", type="array"
    ),
    # Smoke checks.
    "operatorSmokeCheck": StackOutput(
        "How the training operator's smoke PyTorchJob ended.", PLATFORM_ROLES, "`operatorSmokeCheck`"
    ),
    "trainerSmokeCheck": StackOutput(
        "How Trainer v2's smoke TrainJob ended.", PLATFORM_ROLES, "`operatorSmokeCheck` and `trainerInstall`"
    ),
    "networkPolicySmokeCheck": StackOutput(
        "How the NetworkPolicy check ended (Complete: the cluster enforces NetworkPolicy).",
        PLATFORM_ROLES,
        "`networkPolicySmokeCheck`",
    ),
    "gpuSmokeCheck": StackOutput(
        "How the GPU smoke pod ended on the GPU nodes.", PLATFORM_ROLES, "`gpuSmokeNodeSelector`"
    ),
    # A prerequisites stack's addresses.
    "nfsServer": StackOutput("The in-cluster NFS server's host.", (PREREQUISITES,), NFS_STORAGE),
    "nfsShare": StackOutput("The NFS share exported.", (PREREQUISITES,), NFS_STORAGE),
    "storageProvisioner": StackOutput(
        "The CSI provisioner of the NFS StorageClass.", (PREREQUISITES,), NFS_STORAGE
    ),
    "nfsCsiChart": StackOutput("The csi-driver-nfs Helm chart installed.", (PREREQUISITES,), NFS_STORAGE),
    "minioEndpoint": StackOutput(
        "The in-cluster MinIO endpoint (`minioEndpoint` of job stacks).", (PREREQUISITES,)
    ),
    "minioTls": StackOutput("Whether that endpoint serves TLS.", (PREREQUISITES,)),
    "mnistBucket": StackOutput("The S3 URI MNIST was put under.", (PREREQUISITES,)),
    "bucketFillOutcome": StackOutput("How the Job that filled the bucket ended.", (PREREQUISITES,)),
}


def outputs_of(role: str) -> set[str]:
    """The outputs a stack of `role` may export."""
    return {name for name, output in OUTPUTS.items() if role in output.roles}
