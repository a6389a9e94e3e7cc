"""Concrete rendered values a platform reviewer checks: storage, GPUs, placement, torchrun, security."""

from __future__ import annotations

import pytest

from infra.program.common.vendored import MANIFESTS
from infra.review.cluster import cluster_view
from infra.review.podenv import container_env, node_argv
from tests.infra.conftest import by_kind, one, pod_templates, render_config, shipped

GPU_STACKS = ["gke-gpu", "eks-gpu", "aks-gpu"]


def _container(template):
    (container,) = template["spec"]["containers"]
    return container


def _torchrun_flags(argv):
    """The torchrun flags (between the launcher's `--` and `-m trainer`) as a dict."""
    start, end = argv.index("--") + 1, argv.index("-m", argv.index("--"))
    return dict(a[2:].split("=", 1) for a in argv[start:end])


@pytest.mark.parametrize("name", ["dev", *GPU_STACKS])
def test_both_claims_are_read_write_many(name):
    claims = by_kind(shipped(name), "PersistentVolumeClaim")
    assert sorted(c["metadata"]["name"] for c in claims) == ["ddp-mnist-checkpoints", "ddp-mnist-data"]
    assert all(c["spec"]["accessModes"] == ["ReadWriteMany"] for c in claims)


@pytest.mark.parametrize(
    ("provider", "extra", "provisioner", "parameters"),
    [
        ("nfs-csi", {}, "nfs.csi.k8s.io", {"server": "nfs.example.internal", "share": "/"}),
        (
            "gke-filestore",
            {"dataVolumeSize": "1Ti", "checkpointVolumeSize": "2Ti"},
            "filestore.csi.storage.gke.io",
            {"tier": "standard", "network": "default"},
        ),
        ("azure-files", {}, "file.csi.azure.com", {"skuName": "Premium_LRS", "protocol": "nfs"}),
        (
            "aws-efs",
            {"efsFileSystemId": "fs-0123456789abcdef0"},
            "efs.csi.aws.com",
            {
                "provisioningMode": "efs-ap",
                "fileSystemId": "fs-0123456789abcdef0",
                "directoryPerms": "770",
                "uid": "1000",
                "gid": "1000",
                "basePath": "/ddp-mnist",
                "subPathPattern": "${.PVC.namespace}/${.PVC.name}",
                "ensureUniqueDirectory": "false",
            },
        ),
    ],
)
def test_storage_class_presets(provider, extra, provisioner, parameters):
    rendering = render_config({"storageProvider": provider, **extra})
    classes = {c["metadata"]["name"]: c for c in by_kind(rendering, "StorageClass")}
    checkpoints, data = classes.pop("ddp-mnist-rwx"), classes.pop("ddp-mnist-rwx-data")
    assert classes == {}
    for storage_class in (checkpoints, data):
        assert storage_class["provisioner"] == provisioner
        assert storage_class["parameters"] == parameters
    # A destroy frees the re-seedable data's storage and keeps the checkpoints'.
    assert (checkpoints["reclaimPolicy"], data["reclaimPolicy"]) == ("Retain", "Delete")
    claims = {
        c["metadata"]["name"]: c["spec"]["storageClassName"]
        for c in by_kind(rendering, "PersistentVolumeClaim")
    }
    assert claims == {"ddp-mnist-checkpoints": "ddp-mnist-rwx", "ddp-mnist-data": "ddp-mnist-rwx-data"}
    assert {k: v for k, v in checkpoints.items() if k not in ("metadata", "reclaimPolicy")} == {
        k: v for k, v in data.items() if k not in ("metadata", "reclaimPolicy")
    }


def test_each_claims_reclaim_policy_is_its_own_setting():
    rendering = render_config({"storageReclaimPolicy": "Delete", "dataReclaimPolicy": "Retain"})
    policies = {c["metadata"]["name"]: c["reclaimPolicy"] for c in by_kind(rendering, "StorageClass")}
    assert policies == {"ddp-mnist-rwx": "Delete", "ddp-mnist-rwx-data": "Retain"}
    assert rendering.outputs["dataStorageClass"] == "ddp-mnist-rwx-data"
    assert rendering.outputs["storageClass"] == "ddp-mnist-rwx"


def test_existing_storage_class_is_used_not_created():
    rendering = render_config({"storageProvider": "existing", "storageClassName": "shared-rwx"})
    assert by_kind(rendering, "StorageClass") == []
    assert {c["spec"]["storageClassName"] for c in by_kind(rendering, "PersistentVolumeClaim")} == {
        "shared-rwx"
    }


def test_checkpoint_claim_survives_destroy_and_data_claim_does_not():
    claims = {
        r.name: r
        for r in render_config({}).registrations
        if r.type == "kubernetes:core/v1:PersistentVolumeClaim"
    }
    assert {n: c.retain_on_delete for n, c in claims.items()} == {
        "storage-data": False,
        "storage-checkpoints": True,
    }
    claims = {
        r.name: r
        for r in render_config({"checkpointVolumeRetain": False}).registrations
        if r.type == "kubernetes:core/v1:PersistentVolumeClaim"
    }
    assert not claims["storage-checkpoints"].retain_on_delete


def test_training_job_depends_on_the_operator_install():
    for kind, job_type in (
        ("pytorchjob", "kubernetes:kubeflow.org/v1:PyTorchJob"),
        ("indexed-job", "kubernetes:batch/v1:Job"),
    ):
        (job,) = [r for r in render_config({"jobKind": kind}).registrations if r.type == job_type]
        assert "training-operator-manifests" in job.dependencies  # the component, expanded
    (job,) = [
        r
        for r in render_config(
            {"operatorInstall": False, "operatorInitContainerRestricted": True}
        ).registrations
        if r.custom and r.type.endswith(":PyTorchJob")
    ]
    assert not any(d.startswith("training-operator") for d in job.dependencies)


@pytest.mark.parametrize("name", GPU_STACKS)
def test_gpu_limits_equal_processes_per_node(name):
    rendering = shipped(name)
    job = by_kind(rendering, "PyTorchJob") + by_kind(rendering, "Job")
    for template in pod_templates(rendering):
        resources = _container(template)["resources"]
        gpus = resources["limits"]["nvidia.com/gpu"]
        assert gpus == resources["requests"]["nvidia.com/gpu"]
        nproc = job[0]["spec"].get("nprocPerNode") or next(
            e["value"] for e in _container(template)["env"] if e["name"] == "PET_NPROC_PER_NODE"
        )
        assert gpus == nproc
        assert "--backend=nccl" in _container(template)["args"]


def test_cpu_stack_requests_no_gpu_and_uses_gloo():
    for template in pod_templates(shipped("dev")):
        container = _container(template)
        assert "nvidia.com/gpu" not in container["resources"]["limits"]
        assert "--backend=gloo" in container["args"]


@pytest.mark.parametrize(
    ("name", "selector", "toleration"),
    [
        (
            "gke-gpu",
            {"cloud.google.com/gke-accelerator": "nvidia-l4"},
            {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
        ),
        (
            "eks-gpu",
            {"node.kubernetes.io/instance-type": "g5.12xlarge"},
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        ),
        (
            "aks-gpu",
            {"agentpool": "gpunp"},
            {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
        ),
    ],
)
def test_gpu_stacks_are_placed_on_gpu_pools(name, selector, toleration):
    for template in pod_templates(shipped(name)):
        spec = template["spec"]
        assert spec["nodeSelector"] == selector
        assert toleration in spec["tolerations"]
        # GPU pools are tainted nvidia.com/gpu: the stack's own toleration, or the one always added.
        assert any(t["key"] == "nvidia.com/gpu" for t in spec["tolerations"])
        anti = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        assert anti["topologyKey"] == "kubernetes.io/hostname"


def test_node_affinity_expressions():
    template = pod_templates(
        render_config(
            {
                "jobNodeAffinity": [
                    "cloud.google.com/gke-accelerator in nvidia-l4,nvidia-a100",
                    "spot doesnotexist",
                ],
            }
        )
    )[0]
    terms = template["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "cloud.google.com/gke-accelerator", "operator": "In", "values": ["nvidia-l4", "nvidia-a100"]},
        {"key": "spot", "operator": "DoesNotExist"},
    ]


def _node_argvs(rendering):
    """Each effective pod's main-container command, as the kubelet expands it."""
    pods = cluster_view(rendering.objects, rendering.settings).effective.pods
    argvs = []
    for pod in pods:
        container = _container(pod.manifest)
        argvs.append(node_argv(container, container_env(container, pod.manifest)))
    return pods, argvs


def test_pytorchjob_torchrun_arguments_per_node():
    rendering = render_config({"jobNodes": 3, "jobProcsPerNode": 2, "jobBatchSize": 240})
    job = one(rendering, "PyTorchJob")
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 2)
    assert job["spec"]["nprocPerNode"] == "2"
    pods, argvs = _node_argvs(rendering)
    assert [p.name for p in pods] == ["mnist-r1-master-0", "mnist-r1-worker-0", "mnist-r1-worker-1"]
    for rank, argv in enumerate(argvs):
        assert argv[:3] == ["python", "-m", "trainer.launch"]
        assert _torchrun_flags(argv) == {
            "nnodes": "3",
            "node-rank": str(rank),
            "nproc-per-node": "2",
            "master-addr": "mnist-r1-master-0",
            "master-port": "23456",
            "max-restarts": "0",
        }


def test_indexed_job_torchrun_arguments_per_node():
    rendering = render_config(
        {"jobKind": "indexed-job", "jobNodes": 3, "jobBatchSize": 240, "jobMasterPort": 29500}
    )
    job, service = one(rendering, "Job"), one(rendering, "Service")
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 3)
    assert spec["template"]["spec"]["subdomain"] == service["metadata"]["name"] == "mnist-r1"
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == spec["template"]["metadata"]["labels"]
    pods, argvs = _node_argvs(rendering)
    assert [p.spec["hostname"] for p in pods] == ["mnist-r1-0", "mnist-r1-1", "mnist-r1-2"]
    for index, argv in enumerate(argvs):
        assert _torchrun_flags(argv) == {
            "nnodes": "3",
            "node-rank": str(index),
            "nproc-per-node": "1",
            "master-addr": "mnist-r1-0.mnist-r1",
            "master-port": "29500",
            "max-restarts": "0",
        }


def test_indexed_job_failure_rules():
    spec = one(render_config({"jobKind": "indexed-job", "jobBackoffLimit": 4}), "Job")["spec"]
    assert spec["backoffLimitPerIndex"] == 4
    # First match wins: a disruption is never counted, nor a pod stopped with the job (201) because
    # another was preempted; then 1-127 fail the Job, the rest is retried.
    ignore, stopped, fail = spec["podFailurePolicy"]["rules"]
    assert ignore == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert stopped == {
        "action": "Ignore",
        "onExitCodes": {"containerName": "pytorch", "operator": "In", "values": [201]},
    }
    assert fail == {
        "action": "FailJob",
        "onExitCodes": {"containerName": "pytorch", "operator": "In", "values": list(range(1, 128))},
    }


def test_trainer_arguments_follow_config():
    args = _container(
        pod_templates(
            render_config(
                {
                    "jobEpochs": 5,
                    "jobBatchSize": 128,
                    "jobScaling": "weak",
                    "jobLearningRate": "0.05",
                    "jobLrScaling": "linear",
                    "jobCheckpointEvery": 2,
                    "jobSeed": 7,
                    "jobRunId": "exp2",
                }
            )
        )[0]
    )["args"]
    trainer = args[args.index("trainer") + 1 :]
    assert trainer == [
        "--data=/data/mnist",
        "--cache-dir=/cache",
        "--checkpoint-dir=/checkpoints/mnist-exp2",
        "--epochs=5",
        "--batch-size=128",
        "--scaling=weak",
        "--lr=0.05",
        "--lr-scaling=linear",
        "--checkpoint-every=2",
        "--backend=gloo",
        "--seed=7",
        "--dist-timeout=600",
    ]


def test_s3_credentials_only_by_reference():
    rendering = render_config(
        {"jobDataSource": "s3", "minioEndpoint": "minio.minio.svc:9000", "minioTls": False},
        secrets={"minioAccessKey": "AKIAEXAMPLE", "minioSecretKey": "wJalrEXAMPLE"},
    )
    secret = one(rendering, "Secret")
    assert secret["metadata"]["name"] == "ddp-mnist-s3"
    container = _container(pod_templates(rendering)[0])
    env = {e["name"]: e for e in container["env"]}
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert env[var] == {"name": var, "valueFrom": {"secretKeyRef": {"name": "ddp-mnist-s3", "key": var}}}
    assert env["AWS_ENDPOINT_URL"]["value"] == "http://minio.minio.svc:9000"
    assert "--data=s3://mnist/mnist" in container["args"]
    assert all("value" not in env[v] for v in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"))


@pytest.mark.parametrize("name", ["dev", *GPU_STACKS])
def test_pods_are_restricted_with_memory_backed_shm(name):
    for template in pod_templates(shipped(name)):
        spec = template["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert spec["automountServiceAccountToken"] is False
        container = _container(template)
        assert container["name"] == "pytorch"
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
        }
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert mounts["/dev/shm"] == "dshm" and mounts["/tmp"] == "tmp"
        assert template["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
        assert ":latest" not in container["image"]


def test_wait_annotations_and_run_policy():
    job = one(
        render_config(
            {
                "jobWait": True,
                "jobWaitTimeoutSeconds": 900,
                "jobTtlSecondsAfterFinished": 60,
                "jobActiveDeadlineSeconds": 3600,
                "jobQueueName": "team-a",
                "jobClusterQueue": "gpu",
                "kueuePyTorchJobIntegration": True,
            }
        ),
        "PyTorchJob",
    )
    # The program waits for the run (infra/program/job/runwatch.py); the provider only for the create (and
    # for a deletion), with jobWait as without.
    assert job["metadata"]["annotations"] == {"pulumi.com/waitFor": "jsonpath={.metadata.uid}"}
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert job["spec"]["runPolicy"] == {
        "cleanPodPolicy": "None",
        "backoffLimit": 7,  # 3 incidents survived x 2 nodes restarting each, + 1
        "activeDeadlineSeconds": 3600,
        "ttlSecondsAfterFinished": 60,
    }
    no_wait = one(render_config({}), "PyTorchJob")
    assert no_wait["metadata"]["annotations"] == {"pulumi.com/waitFor": "jsonpath={.metadata.uid}"}


def test_single_node_job_has_no_workers():
    replicas = one(render_config({"jobNodes": 1}), "PyTorchJob")["spec"]["pytorchReplicaSpecs"]
    assert list(replicas) == ["Master"]


def test_operator_install_is_pinned_and_optional():
    rendering = render_config({})
    (install,) = rendering.external
    assert install.inputs["directory"] == str(MANIFESTS / "training-operator")  # vendored, checked by sha256
    assert render_config({"operatorInstall": False, "operatorInitContainerRestricted": True}).external == []


def test_stack_outputs():
    outputs = shipped("dev").outputs
    assert outputs["namespace"] == "ddp-mnist-dev"
    assert outputs["jobName"] == "mnist-r1"
    assert (outputs["dataClaim"], outputs["checkpointClaim"]) == ("ddp-mnist-data", "ddp-mnist-checkpoints")
    assert outputs["logsCommand"] == (
        "kubectl -n ddp-mnist-dev logs -f -l ddp-mnist.io/job=mnist-r1 --prefix --max-log-requests=3"
    )
    assert outputs["statusCommand"] == "kubectl -n ddp-mnist-dev get pytorchjob mnist-r1 -o wide"
    assert outputs["s3SecretName"] == "ddp-mnist-s3"  # the stack's own, from its --secret keys
    assert outputs["modelExport"] == "s3://mnist/mnist/models/mnist-r1"
    assert "s3SecretName" not in render_config({}).outputs


def test_labels_everywhere():
    for obj in shipped("eks-gpu").objects:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "ddp-mnist"
        assert labels["app.kubernetes.io/instance"] == "eks-gpu"
        assert labels["app.kubernetes.io/managed-by"] == "pulumi"


def test_the_retry_rule_is_the_trainers():
    """The podFailurePolicy's FailJob codes and the trainer's exit codes are one contract: 1-127 are
    permanent, 128 and above (the training operator's ExitCode rule) retryable."""
    from infra.program.common.meta import PERMANENT_EXIT_CODES, RETRYABLE_FROM, STOPPED_WITH_PEERS_EXIT_CODES
    from trainer import errors

    assert (PERMANENT_EXIT_CODES, RETRYABLE_FROM) == (errors.PERMANENT_EXIT_CODES, errors.RETRYABLE_FROM)
    assert STOPPED_WITH_PEERS_EXIT_CODES == errors.IGNORED_EXIT_CODES == (errors.EXIT_STOPPED_WITH_PEERS,)
    assert all(errors.is_retryable(c) for c in STOPPED_WITH_PEERS_EXIT_CODES)
    assert set(errors.BAD_INPUT_EXIT_CODES) | {errors.EXIT_INTERNAL} <= set(PERMANENT_EXIT_CODES)
    assert min(errors.RETRYABLE_EXIT_CODES) > 192  # above every 128 + signal (SIGRTMAX is 64)
    assert all(errors.is_retryable(c) for c in errors.RETRYABLE_EXIT_CODES)
    assert not any(errors.is_retryable(c) for c in PERMANENT_EXIT_CODES)
    assert len(PERMANENT_EXIT_CODES) <= 255  # the Job API's limit on onExitCodes.values


def test_operator_env_matches_the_documented_injection():
    """What the training operator v1.9 injects (../shared/DESIGN-NOTES.md), for a 3-node, 2-process job."""
    rendering = render_config({"jobNodes": 3, "jobProcsPerNode": 2, "jobBatchSize": 240})
    master, _, worker = cluster_view(rendering.objects, rendering.settings).effective.pods
    injected = worker.spec["containers"][0]["env"][-10:]
    assert {e["name"]: e["value"] for e in injected} == {
        "PYTHONUNBUFFERED": "1",
        "MASTER_ADDR": "mnist-r1-master-0",
        "MASTER_PORT": "23456",
        "PET_MASTER_ADDR": "mnist-r1-master-0",
        "PET_MASTER_PORT": "23456",
        "WORLD_SIZE": "6",
        "RANK": "2",
        "PET_NODE_RANK": "2",
        "PET_NNODES": "3",
        "PET_NPROC_PER_NODE": "2",
    }
    assert {e["name"]: e["value"] for e in master.spec["containers"][0]["env"][-10:]}["RANK"] == "0"


def test_azure_files_over_nfs_mounts_with_the_drivers_options():
    rendering = render_config({"storageProvider": "azure-files"})
    for storage_class in by_kind(rendering, "StorageClass"):
        assert storage_class["mountOptions"] == ["nconnect=4", "noresvport", "actimeo=30"]


@pytest.mark.parametrize(
    ("mode", "reserved", "parameters"),
    [
        ("DIRECT_PEERING", "", {}),
        ("DIRECT_PEERING", "10.10.0.0/24", {"reserved-ipv4-cidr": "10.10.0.0/24"}),
        ("PRIVATE_SERVICE_ACCESS", "", {"connect-mode": "PRIVATE_SERVICE_ACCESS"}),
        (
            "PRIVATE_SERVICE_ACCESS",
            "filestore-range",
            {"connect-mode": "PRIVATE_SERVICE_ACCESS", "reserved-ip-range": "filestore-range"},
        ),
    ],
)
def test_filestore_joins_a_shared_vpc_as_the_driver_reads_it(mode, reserved, parameters):
    values = {"storageProvider": "gke-filestore", "dataVolumeSize": "1Ti", "checkpointVolumeSize": "1Ti"}
    rendering = render_config({**values, "filestoreConnectMode": mode, "filestoreReservedIpRange": reserved})
    for storage_class in by_kind(rendering, "StorageClass"):
        assert storage_class["parameters"] == {"tier": "standard", "network": "default", **parameters}


@pytest.mark.parametrize("kind", ["pytorchjob", "indexed-job", "trainjob"])
def test_a_runs_failed_container_leaves_its_last_lines_in_its_status(kind):
    """The training pods and the seed Job's (with HTTPS mirrors, as the prerequisites' fill Job has:
    tests/infra/test_prerequisites.py) fall back to their log for the termination message, which the
    run's watch shows when a container fails."""
    trainer = {"trainerInstall": True, "operatorInstall": False} if kind == "trainjob" else {}
    rendering = render_config(
        {"jobKind": kind, **trainer, "seedSource": "https", "seedMirrors": ["https://m.example/"]}
    )
    seeds = [
        j["spec"]["template"] for j in by_kind(rendering, "Job") if j["metadata"]["name"] == "ddp-mnist-seed"
    ]
    assert len(seeds) == 1
    for template in [*pod_templates(rendering), *seeds]:
        for container in template["spec"]["containers"]:
            assert container["terminationMessagePolicy"] == "FallbackToLogsOnError", container["name"]


def test_the_offline_render_builds_no_stack_trace_and_the_sdk_gets_its_own_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The SDK builds a stack trace per resource, a file URI per frame, which nothing reads under
    mocks (infra.review.manifest._no_stack_traces); after the render the SDK's own is in place again."""
    from pulumi.runtime import resource as sdk_resource

    built: list[int] = []
    own = sdk_resource._get_stack_trace

    def counted() -> object:
        built.append(1)
        return own()

    monkeypatch.setattr(sdk_resource, "_get_stack_trace", counted)
    rendering = render_config({})
    assert len(rendering.registrations) > 10
    assert built == []
    assert sdk_resource._get_stack_trace is counted
