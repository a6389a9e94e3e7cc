# Training image for the Pulumi + Kubernetes DDP bundle. The pods run it as
#   command: ["python", "-m", "trainer.launch"]   args: [--master-wait-timeout=..., --, <torchrun args>]
# with runAsUser/runAsGroup/fsGroup 1000, a read-only root filesystem, and writable emptyDirs at
# /tmp, /cache and /dev/shm. Nothing here holds data or secrets: MNIST comes from a volume or S3,
# S3 keys from a Kubernetes Secret at run time. The serving pods run the same image as
#   command: ["python", "-m", "trainer.serve"]   args: [--model-uri=..., --port=8080, ...]
# (the Open Inference Protocol over the standard library's HTTP server: torch and, for s3://
# models, boto3 are all it needs, so nothing more is installed for it; it writes no files).

# The official PyTorch CUDA runtime image: torch 2.13.0 (the version the trainer is tested with;
# pyproject pins torch==2.13.0) with CUDA 12.6 and cuDNN 9, so the image never pip-installs a
# second, multi-GiB torch. Its conda environment also ships numpy (torch warns at import without
# it), so numpy is not reinstalled below. Pinned by tag and digest, so the base cannot change
# under the tag. The digest is the one several public repositories pin for this tag (it was not
# pulled from here); before promoting a build, re-check that the tag still resolves to it with
#   docker buildx imagetools inspect pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime --format '{{json .Manifest.Digest}}'
# BASE_IMAGE is a build argument only so that a machine without that registry can put in a base of its
# own with the same contract (python and pip on PATH, torch 2.13.0 and numpy installed, getent,
# groupadd and useradd): the local cluster's real node builds this file on Debian with torch from PyPI
# (infra/localcluster/node/images.py). Releases build with the default.
ARG BASE_IMAGE=pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime@sha256:6acf597eeb8e376a96580dde4952f37cc017fef732bb40bfc73f28f25e3f64b4
FROM ${BASE_IMAGE}

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/tmp \
    XDG_CACHE_HOME=/tmp/.cache \
    PYTHONPATH=/app

# The trainer's dependencies beyond torch, each with its whole dependency closure pinned so a rebuild
# installs the same code (the versions the tests ran with, constraints.txt's): boto3 (imported only
# for s3:// data and the export), and tensorboard: the protos of the run's curves (trainer/curves.py)
# and the `tensorboard` command the stack's optional TensorBoard Deployment runs. tensorboard adds
# about 80 MB installed: tensorboard, tensorboard-data-server, protobuf, grpcio, absl-py, markdown, werkzeug,
# markupsafe and pillow (packaging comes with the base image), and setuptools 81.0.0, the last with the
# pkg_resources that the `tensorboard` command of 2.20.0 imports (tensorboard/default.py).
RUN pip install --no-cache-dir boto3==1.44.5 botocore==1.44.8 s3transfer==0.19.3 jmespath==1.1.0 \
        python-dateutil==2.9.0.post0 urllib3==2.8.0 six==1.17.0 \
        tensorboard==2.20.0 tensorboard-data-server==0.7.2 protobuf==5.29.6 grpcio==1.85.3 \
        absl-py==2.5.1 markdown==3.11.3 werkzeug==3.1.9 markupsafe==3.0.4 pillow==13.0.0 \
        setuptools==81.0.0

# uid/gid 1000 as the pods' securityContext expects (reuse them if the base already has them).
RUN if ! getent group 1000 >/dev/null; then groupadd --gid 1000 trainer; fi \
    && if ! getent passwd 1000 >/dev/null; then \
         useradd --uid 1000 --gid 1000 --no-create-home --home-dir /tmp \
                 --shell /usr/sbin/nologin trainer; \
       fi

WORKDIR /app
COPY trainer/ /app/trainer/
# Bytecode compiled at build time: the root filesystem is read-only at run time.
RUN python -m compileall -q /app/trainer

# What the image was built from: `make image` (release/image.py) and the release workflow pass the
# commit and the build time. They are the OCI labels and, in the env, what the trainer writes into each
# run's lineage.json (trainer/lineage.py); "unknown" when a build passes none.
ARG SOURCE_COMMIT=unknown
ARG BUILD_TIME=unknown
LABEL org.opencontainers.image.revision="${SOURCE_COMMIT}" \
      org.opencontainers.image.created="${BUILD_TIME}"
ENV DDP_MNIST_SOURCE_COMMIT="${SOURCE_COMMIT}" \
    DDP_MNIST_BUILD_TIME="${BUILD_TIME}"

USER 1000:1000

# No ENTRYPOINT: the pod's command is `python -m trainer.launch`. Running the image bare shows help.
CMD ["python", "-m", "trainer", "--help"]
