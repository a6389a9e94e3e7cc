"""The stacks the cluster tier deploys, as config mappings (the same keys as `stacks/Pulumi.*.yaml`).

Built from the `dev` stack's file, so the job stack is its twin: the same storage (NFS CSI against the
in-cluster NFS server), MinIO endpoint, bucket and trainer settings, with four differences a fresh
throwaway cluster needs: its own namespace, role `job` (the operator comes from the platform stack),
S3 keys as secret config (the stack makes the Secret) instead of a pre-made Secret, and
`jobImagePullPolicy: IfNotPresent` (an image loaded into kind has no registry to pull from). The
cluster's prerequisites are the `dev-prereqs` stack's, with the tier's trainer image and keys
(tests/e2e/fixtures/cluster.py). tests/e2e_static renders each of them offline and validates every
object.
"""

from __future__ import annotations

from infra.stackconfig import StackConfig, from_mapping, load_stack

PROJECT = "ddp-mnist"
SECRET_KEYS = frozenset({f"{PROJECT}:minioAccessKey", f"{PROJECT}:minioSecretKey"})
JOB_NAMESPACE = "ddp-mnist-e2e"
INDEXED_NAMESPACE = "ddp-mnist-e2e-indexed"
SEED_NAMESPACE = "ddp-mnist-e2e-seed"
QUEUE = "e2e"
CLUSTER_QUEUE = "e2e-cluster-queue"
WAIT_S = 1800


def _key(name: str) -> str:
    return f"{PROJECT}:{name}"


def platform_config(image: str) -> dict[str, str]:
    """The cluster's platform stack: the training operator v1.9.4 with its restricted init container."""
    return {
        _key("stackRole"): "platform",
        _key("operatorInstall"): "true",
        _key("operatorVersion"): "v1.9.4",
        _key("jobImage"): image,
    }


def prerequisites_config(image: str, access_key: str, secret_key: str) -> dict[str, str]:
    """The `dev-prereqs` stack with the tier's trainer image (its fill Job) and MinIO's root keys."""
    config = dict(load_stack("dev-prereqs").values)
    config.update(
        {
            _key("jobImage"): image,
            # A kind-loaded image: a tag and no registry digest (see job_config).
            _key("jobImagePullPolicy"): "IfNotPresent",
            _key("minioAccessKey"): access_key,
            _key("minioSecretKey"): secret_key,
        }
    )
    return config


def job_config(image: str, access_key: str, secret_key: str, **overrides: str) -> dict[str, str]:
    """The dev stack's twin as a job stack (see the module docstring); `overrides` by key name."""
    config = dict(load_stack("dev").values)
    config.pop(_key("minioExistingSecret"), None)  # the stack creates its Secret from the keys below
    config.update(
        {
            _key("stackRole"): "job",
            _key("namespace"): JOB_NAMESPACE,
            _key("operatorInstall"): "false",
            _key("operatorInitContainerRestricted"): "true",
            _key("minioAccessKey"): access_key,
            _key("minioSecretKey"): secret_key,
            _key("jobImage"): image,
            # A kind-loaded image has a tag and no registry digest, so the automatic policy would be
            # Always and every pull would fail; the tag is the loaded image's own ID, which cannot move.
            _key("jobImagePullPolicy"): "IfNotPresent",
            _key("jobWait"): "true",
            _key("jobWaitTimeoutSeconds"): str(WAIT_S),
            _key("serveKind"): "none",  # scenario 7 serves; the others test the job alone
        }
    )
    config.update({_key(k): v for k, v in overrides.items()})
    return config


def indexed_config(image: str, access_key: str, secret_key: str, **overrides: str) -> dict[str, str]:
    """An Indexed Job stack, not awaited (`jobWait: false`), submitted through Kueue."""
    return job_config(
        image,
        access_key,
        secret_key,
        namespace=INDEXED_NAMESPACE,
        storageClassName="ddp-mnist-nfs-indexed",
        jobKind="indexed-job",
        jobWait="false",
        jobQueueName=QUEUE,
        jobClusterQueue=CLUSTER_QUEUE,
        **overrides,
    )


def seed_config(image: str, access_key: str, secret_key: str, bucket: str) -> dict[str, str]:
    """A job stack whose seed reads `bucket` (a wrong one makes the seed Job fail), one short epoch."""
    return job_config(
        image,
        access_key,
        secret_key,
        namespace=SEED_NAMESPACE,
        storageClassName="ddp-mnist-nfs-seed",
        minioBucket=bucket,
        jobEpochs="1",
        jobWait="false",
        jobModelExport="false",
    )


def as_stack(name: str, config: dict[str, str]) -> StackConfig:
    """The config as the offline render takes it (the keys that are secret marked so)."""
    stack = from_mapping(name, config)
    return StackConfig(stack.name, stack.values, frozenset(SECRET_KEYS & set(config)))
