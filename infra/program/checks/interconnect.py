"""Rules for what fast networking adds to the training pods: what the namespace's Pod Security level
allows (Pod Security Standards, kubernetes `staging/src/k8s.io/pod-security-admission/policy`:
`check_hostPathVolumes.go` forbids hostPath from baseline up; `check_capabilities_baseline.go` allows
the default set below, `check_capabilities_restricted.go` NET_BIND_SERVICE alone), and what the bundle
sets itself."""

from __future__ import annotations

from collections.abc import Iterator

from infra.program.checks.errors import ConfigError
from infra.program.common.meta import CHECKPOINT_MOUNT, DATA_MOUNT
from infra.program.settings import Settings
from infra.program.settings.interconnect import host_mounts, split_pair

BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
        "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
    }
)  # fmt: skip
RESTRICTED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
# What the trainer container's env holds already (infra/program/job/podspec.py rendezvous_env,
# infra/program/job/env.py s3_env and lineage_env).
BUNDLE_ENV = frozenset(
    {
        "OMP_NUM_THREADS", "PYTHONUNBUFFERED", "HOME", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "AWS_ENDPOINT_URL",
        "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "MASTER_ADDR", "MASTER_PORT",
        "NNODES", "NODE_RANK", "WORLD_SIZE", "RANK", "LOCAL_RANK", "PET_NNODES", "PET_NODE_RANK",
        "PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_NPROC_PER_NODE",
        "DDP_MNIST_STACK", "DDP_MNIST_JOB", "DDP_MNIST_IMAGE",
    }
)  # fmt: skip
# Where the container's own volumes are mounted (a host path may not shadow them).
BUNDLE_MOUNTS = (DATA_MOUNT, CHECKPOINT_MOUNT, "/tmp", "/dev/shm")


def interconnect(s: Settings, _: bool) -> Iterator[ConfigError]:
    level = s.namespace_pod_security
    if s.job_host_path_mounts and level != "privileged":
        yield ConfigError(
            "jobHostPathMounts",
            s.job_host_path_mounts,
            f"empty when namespacePodSecurity is {level}: Pod Security baseline and restricted forbid "
            "hostPath volumes; set namespacePodSecurity privileged (a namespace of its own) to mount them",
        )
    allowed = {"restricted": RESTRICTED_CAPABILITIES, "baseline": BASELINE_CAPABILITIES}.get(level)
    if allowed is not None:
        refused = [cap for cap in s.job_add_capabilities if cap not in allowed]
        if refused:
            yield ConfigError(
                "jobAddCapabilities",
                s.job_add_capabilities,
                f"capabilities Pod Security {level} allows ({', '.join(sorted(allowed))}): "
                f"{', '.join(refused)} needs namespacePodSecurity privileged",
            )
    ours = sorted(n for n in (split_pair(e)[0] for e in s.job_extra_env) if n in BUNDLE_ENV)
    if ours:
        yield ConfigError(
            "jobExtraEnv",
            s.job_extra_env,
            f"variables the bundle does not set itself: {', '.join(ours)} is set from other keys",
        )
    for _host, mount, _ro in host_mounts(s.job_host_path_mounts):
        if any(mount == m or mount.startswith(m + "/") or m.startswith(mount + "/") for m in BUNDLE_MOUNTS):
            yield ConfigError(
                "jobHostPathMounts",
                s.job_host_path_mounts,
                f"mount paths apart from the container's own volumes ({', '.join(BUNDLE_MOUNTS)}): {mount}",
            )
