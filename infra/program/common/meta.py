"""Names and labels shared by every component, derived from the settings alone."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from infra.program.settings import PROJECT, Settings

JOB_LABEL = f"{PROJECT}.io/job"
CONTAINER = "pytorch"  # the training operator finds the container by this name
PORT_NAME = "pytorchjob-port"  # ...and the rendezvous port by this one
# The trainer's retry rule (trainer/errors.py, kept equal by a test): 1-127 are permanent (a bug or
# bad input), 128 and above are retried (signals, and the trainer's transient 2xx codes).
RETRYABLE_FROM = 128
PERMANENT_EXIT_CODES = tuple(range(1, RETRYABLE_FROM))
# The trainer's code for a rank stopped with the job because another pod was preempted (201,
# trainer/errors.py IGNORED_EXIT_CODES): a training Job's podFailurePolicy ignores it.
STOPPED_WITH_PEERS_EXIT_CODES = (201,)
DATA_MOUNT = "/data"
CHECKPOINT_MOUNT = "/checkpoints"
# The S3 key pair's Secret keys (the names the AWS SDKs read from the environment), and the CA bundle's
# ConfigMap and key: what the credentials component writes and every pod spec that reaches the store reads.
ACCESS_KEY_ID = "AWS_ACCESS_KEY_ID"
SECRET_ACCESS_KEY = "AWS_SECRET_ACCESS_KEY"
S3_CA_CONFIG_MAP = f"{PROJECT}-s3-ca"
S3_CA_KEY = "ca.crt"


def labels(settings: Settings, component: str) -> dict[str, str]:
    """The app.kubernetes.io labels every object of the stack carries."""
    del settings  # one bundle per namespace; the stack name tells instances apart
    return {
        "app.kubernetes.io/name": PROJECT,
        "app.kubernetes.io/instance": pulumi.get_stack(),
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": PROJECT,
        "app.kubernetes.io/managed-by": "pulumi",
    }


@dataclass(frozen=True)
class JobNames:
    """Every name the training job's objects use, fixed by jobName and jobRunId."""

    job: str
    service: str
    checkpoint_dir: str

    @property
    def master_host(self) -> str:
        """The Indexed Job's rank-0 pod as its headless Service publishes it."""
        return f"{self.job}-0.{self.service}"


def job_names(settings: Settings) -> JobNames:
    job = f"{settings.job_name}-{settings.job_run_id}"
    return JobNames(job=job, service=job, checkpoint_dir=f"{CHECKPOINT_MOUNT}/{job}")


# Kubeflow Trainer v2's controller (infra/program/platform/trainer_v2.py installs it): where it serves the
# status endpoint: its pods (the Deployment's selector labels) and port (vendored
# `controller_manager_config.yaml`, `statusServer.port`); the job's NetworkPolicy lets its pods reach them
# with trainerProgress.
TRAINER_NAMESPACE = "kubeflow-system"
TRAINER_POD_LABELS = {
    "app.kubernetes.io/component": "manager",
    "app.kubernetes.io/name": "trainer",
    "app.kubernetes.io/part-of": "kubeflow",
}
STATUS_SERVER_PORT = 10443


def pod_security_labels(level: str) -> dict[str, str]:
    """A Namespace's labels that enforce, warn and audit Pod Security at `level`."""
    return {f"pod-security.kubernetes.io/{mode}": level for mode in ("enforce", "warn", "audit")}
