"""What a job's controller does when one of its pods ends in a local run: the job succeeds, the pod is
started again after a back-off, every pod is (a TrainJob's JobSet), or the job fails.

Counted as the training operator, the Job controller and JobSet count; the limits and exit codes are
the rendered object's own (`infra.local.plan.RestartRule`). Deciding only: the processes are
started and stopped by `infra.local.supervisor`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from infra.local.plan import JobPlan, LocalPod


@dataclass(frozen=True)
class FailJob:
    """The job fails: `why` is what ended it, for the pod's failure line."""

    why: str


@dataclass(frozen=True)
class RestartPod:
    """The pod is started again after its back-off; `count` says what the retry counts against
    (`counted` False: nothing, as for a disrupted pod the controller replaces)."""

    count: str
    counted: bool = True


@dataclass(frozen=True)
class RestartJobSet:
    """A TrainJob's node Job failed: JobSet deletes every Job and recreates them all."""


Decision = FailJob | RestartPod | RestartJobSet


@dataclass
class Restarts:
    """The restarts made so far, as the controllers count them."""

    per_pod: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    jobset: int = 0  # TrainJob: restarts of the whole JobSet
    disrupted: int = 0  # pods started again after a disruption (preempted)
    pods: int = 0  # pods started again after a failure, whatever each counts against

    @property
    def total(self) -> int:
        return sum(self.per_pod.values())


def job_succeeded(job: JobPlan, pod: LocalPod, succeeded: set[str]) -> bool:
    """Whether `pod`'s success ends the job: a PyTorchJob's Master's does, else the last pod's."""
    return (job.kind == "pytorchjob" and pod.index == 0) or len(succeeded) == len(job.pods)


def after_failure(job: JobPlan, pod: LocalPod, code: int, restarts: Restarts) -> Decision:
    """What the job's controller does once `pod` exited with `code` (not 0)."""
    rule = job.restart
    if rule.fails_job_at_once(code):
        return FailJob("no retry for this exit code")
    if code in rule.ignored_codes:
        return RestartPod(f"the podFailurePolicy ignores exit code {code}, not counted", counted=False)
    if job.kind == "trainjob" and restarts.total >= rule.job_backoff_limit:
        # Its node Job has failed: JobSet recreates every Job (every pod), or fails.
        if rule.exhausted(0, restarts.jobset):
            return FailJob("JobSet maxRestarts reached")
        return RestartJobSet()
    if job.kind != "trainjob" and rule.exhausted(restarts.per_pod[pod.name], restarts.total):
        return FailJob("backoff limit reached")
    return RestartPod(retry_count(job, pod, restarts))


def after_disruption(job: JobPlan, pod: LocalPod, code: int, restarts: Restarts) -> Decision:
    """What the job's controller does once `pod` ended disrupted (its DisruptionTarget condition set:
    preempted, evicted, its node shut down), with `code` (143 after SIGTERM, 137 after SIGKILL); the
    rule per kind is `RestartRule.after_disruption`'s."""
    rule = job.restart.after_disruption()
    if rule == "fail":
        return FailJob("restartPolicy Never: a failed pod fails the PyTorchJob, disrupted or not")
    if rule == "counted":
        return after_failure(job, pod, code, restarts)
    if job.kind == "pytorchjob":
        return RestartPod("a new pod: the operator counts no restarts of it", counted=False)
    return RestartPod("DisruptionTarget: the podFailurePolicy ignores it, not counted", counted=False)


def retry_count(job: JobPlan, pod: LocalPod, restarts: Restarts) -> str:
    """The coming retry as the job's controller counts it, and against which limit."""
    rule = job.restart
    if job.kind == "trainjob":
        return f"{restarts.total + 1}/{rule.job_backoff_limit} pod retries of its Job"
    if job.kind == "indexed-job":
        return f"{restarts.per_pod[pod.name] + 1}/{rule.backoff_limit}"
    if job.kind == "job":
        return f"{restarts.total + 1}/{rule.backoff_limit} retries of the Job"
    if rule.policy == "ExitCode":
        return "a new pod: the operator does not count it"
    return f"{restarts.total + 1}/{rule.backoff_limit} container restarts of the job"


def backoff(base: float, restarts: int) -> float:
    """Seconds before a pod's `restarts`-th restart: the Job controller's pod back-off (base, doubling)."""
    return base * 2 ** (restarts - 1)
