"""The environment of the trainer's containers: S3 and its CA, experiment tracking, lineage, and the
user's own entries (`jobEnv`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pulumi
import pulumi_kubernetes as k8s

from infra.program.common.meta import (
    ACCESS_KEY_ID,
    S3_CA_CONFIG_MAP,
    S3_CA_KEY,
    SECRET_ACCESS_KEY,
    JobNames,
)
from infra.program.settings import PROJECT, Settings, parse_quantity
from infra.program.settings.interconnect import split_pair

core = k8s.core.v1

S3_CA_MOUNT = f"/etc/{PROJECT}/s3-ca"


def trainer_env(settings: Settings, secret_name: pulumi.Input[str] | None) -> list[core.EnvVarArgs]:
    env = [core.EnvVarArgs(name="OMP_NUM_THREADS", value=str(threads_per_process(settings)))]
    env += base_env()
    if settings.backend == "nccl":
        env += [
            core.EnvVarArgs(name="TORCH_NCCL_ASYNC_ERROR_HANDLING", value="1"),
            core.EnvVarArgs(name="NCCL_DEBUG", value="WARN"),
        ]
    return env + s3_env(settings, secret_name) + tracking_env(settings)


# What the trainer's MLflow client reads for credentials (trainer/mlflow_rest.py).
TRACKING_SECRET_KEYS = ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")


def tracking_env(settings: Settings) -> list[core.EnvVarArgs]:
    """MLFLOW_TRACKING_URI (mlflowTrackingUri), and the credentials as optional references to the keys
    of mlflowExistingSecret: a token, or a username and password, whichever the Secret holds."""
    if not settings.mlflow_tracking_uri:
        return []
    env = [core.EnvVarArgs(name="MLFLOW_TRACKING_URI", value=settings.mlflow_tracking_uri)]
    if settings.mlflow_existing_secret:
        env += [
            core.EnvVarArgs(
                name=var,
                value_from=core.EnvVarSourceArgs(
                    secret_key_ref=core.SecretKeySelectorArgs(
                        name=settings.mlflow_existing_secret, key=var, optional=True
                    )
                ),
            )
            for var in TRACKING_SECRET_KEYS
        ]
    return env


def lineage_env(settings: Settings, names: JobNames) -> list[core.EnvVarArgs]:
    """What the trainer records in lineage.json about where it ran (trainer/lineage.py reads these
    names): the stack, the job and the image as the pod names it (by digest when jobImage pins one)."""
    return [
        core.EnvVarArgs(name="DDP_MNIST_STACK", value=pulumi.get_stack()),
        core.EnvVarArgs(name="DDP_MNIST_JOB", value=names.job),
        core.EnvVarArgs(name="DDP_MNIST_IMAGE", value=settings.job_image),
    ]


def with_user_env(env: list[core.EnvVarArgs], entries: Sequence[str]) -> list[core.EnvVarArgs]:
    """`env` with jobExtraEnv's `NAME=value` entries appended, each replacing a variable of the same name
    (NCCL_DEBUG; the checks refuse the names the bundle derives from other keys)."""
    extra = dict(split_pair(e) for e in entries)
    kept = [e for e in env if e.name not in extra]
    return kept + [core.EnvVarArgs(name=name, value=value) for name, value in extra.items()]


def base_env() -> list[core.EnvVarArgs]:
    """What every container of ours needs on a read-only root: unbuffered output, HOME on /tmp."""
    return [core.EnvVarArgs(name="PYTHONUNBUFFERED", value="1"), core.EnvVarArgs(name="HOME", value="/tmp")]


def s3_env(settings: Settings, secret_name: pulumi.Input[str] | None) -> list[core.EnvVarArgs]:
    """The S3 endpoint and region, the CA bundle that verifies it (minioCaBundle), and the key pair as
    references to the stack's Secret."""
    env: list[core.EnvVarArgs] = []
    if settings.minio_endpoint:
        scheme = "https" if settings.minio_tls else "http"
        env += [
            core.EnvVarArgs(name="AWS_ENDPOINT_URL", value=f"{scheme}://{settings.minio_endpoint}"),
            core.EnvVarArgs(name="AWS_REGION", value=settings.minio_region),
        ]
        if settings.minio_ca_bundle:
            # botocore reads it for every https connection (and only those).
            env.append(core.EnvVarArgs(name="AWS_CA_BUNDLE", value=f"{S3_CA_MOUNT}/{S3_CA_KEY}"))
    if secret_name is not None:
        env += s3_key_env(secret_name)
    return env


def s3_ca_volumes(settings: Settings) -> tuple[list[core.VolumeArgs], list[core.VolumeMountArgs]]:
    """The CA bundle's ConfigMap as a read-only volume, for a pod that reaches the store (none without
    minioCaBundle)."""
    if not (settings.minio_ca_bundle and settings.minio_endpoint):
        return [], []
    source = core.ConfigMapVolumeSourceArgs(
        name=S3_CA_CONFIG_MAP, items=[core.KeyToPathArgs(key=S3_CA_KEY, path=S3_CA_KEY)]
    )
    return (
        [core.VolumeArgs(name="s3-ca", config_map=source)],
        [core.VolumeMountArgs(name="s3-ca", mount_path=S3_CA_MOUNT, read_only=True)],
    )


def s3_key_env(secret_name: pulumi.Input[str]) -> list[core.EnvVarArgs]:
    """The S3 key pair as references to Secret `secret_name`'s keys of the same names."""
    return [
        core.EnvVarArgs(
            name=var,
            value_from=core.EnvVarSourceArgs(
                secret_key_ref=core.SecretKeySelectorArgs(name=secret_name, key=var)
            ),
        )
        for var in (ACCESS_KEY_ID, SECRET_ACCESS_KEY)
    ]


def threads_per_process(settings: Settings) -> int:
    """CPU cores requested per training process, at least 1 (OMP_NUM_THREADS)."""
    return max(1, math.floor(parse_quantity(settings.job_cpu_request) / settings.job_procs_per_node))
