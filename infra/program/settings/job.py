"""Settings: the training job's kind, name, size, image and training parameters, and its outputs."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from infra.program.settings.base import (
    SettingsGroup,
    check_pinned_image,
    dns_1035,
    dns_label,
    key,
    pinned_by_digest,
)

PullPolicy = Literal["IfNotPresent", "Always", "Never"]


class JobSettings(SettingsGroup):
    """What runs: the job kind, its name, its size, its image and how it trains."""

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
        "Trainer image, pinned by tag or digest (':latest' and untagged are rejected). The training, seed, "
        "model-server and TensorBoard containers run it, and a prerequisites stack's bucket fill; the "
        "default is the release image (docs/RELEASE.md): until one is published, build and set your own.",
    )
    job_image_digest_required: bool = key(
        "jobImageDigestRequired",
        False,
        "Refuse a jobImage without an @sha256 digest: a tag can be re-pushed, so the same config could run "
        "other code on the next pod. The shipped cloud job stacks set it; a release's notes name the "
        "digest to set (docs/RELEASE.md).",
    )
    job_image_pull_policy: Literal["auto", "IfNotPresent", "Always", "Never"] = key(
        "jobImagePullPolicy",
        "auto",
        "imagePullPolicy of the trainer, seed and model-server containers. auto: IfNotPresent when jobImage "
        "has an @sha256 digest (its content cannot change), Always when it has a tag alone (a tag can be "
        "re-pushed, and IfNotPresent would keep running whatever image a node pulled first).",
    )
    job_backend: Literal["auto", "nccl", "gloo"] = key(
        "jobBackend", "auto", "torch.distributed backend; auto picks nccl with GPUs, else gloo."
    )
    # The trainer's own recipe (trainer/cli.py's defaults, docs/BENCHMARKS.md): one epoch at a global
    # batch of 128 reaches 99%; tests/infra/test_recipe.py holds every trainer flag's default equal.
    job_epochs: int = key("jobEpochs", 1, "Training epochs.", ge=1, le=1000)
    job_batch_size: int = key(
        "jobBatchSize",
        128,
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

    @field_validator("job_run_id")
    @classmethod
    def _run_id_dns_label(cls, value: str) -> str:
        return dns_label(value)

    @field_validator("job_name")
    @classmethod
    def _job_name_dns_1035(cls, value: str) -> str:
        return dns_1035(value)

    @field_validator("job_image")
    @classmethod
    def _pinned_image(cls, value: str) -> str:
        return check_pinned_image(value)

    @property
    def backend(self) -> Literal["nccl", "gloo"]:
        """The effective backend: nccl with GPUs, gloo without, unless set explicitly."""
        if self.job_backend != "auto":
            return self.job_backend
        return "nccl" if self.job_gpus_per_node > 0 else "gloo"

    @property
    def image_pull_policy(self) -> PullPolicy:
        """The containers' imagePullPolicy: jobImagePullPolicy, or for auto, by whether jobImage can move."""
        if self.job_image_pull_policy != "auto":
            return self.job_image_pull_policy
        return "IfNotPresent" if pinned_by_digest(self.job_image) else "Always"

    @property
    def world_size(self) -> int:
        return self.job_nodes * self.job_procs_per_node


class JobOutputSettings(SettingsGroup):
    """What a run leaves behind: the S3 export, checkpoints, and its random seed."""

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
