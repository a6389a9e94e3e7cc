"""`pulumi up` waits for a job's run here, in the program, so it can fail fast with the cause.

The provider's own wait (`pulumi.com/waitFor`) can only end on the awaited object's condition: a
claim that never binds or a pod that can never be scheduled leaves no condition on the Job, so that
wait would run out its whole timeout (`jobWaitTimeoutSeconds`, an hour by default) and end with
"timed out waiting for the condition". A failed step does not end the other in-flight steps either:
the engine waits for every step it started (`pkg/resource/deploy/deployment_executor.go` Execute and
`step_executor.go` cancelDueToError, pulumi v3.274.1: "we do not want the failure of a single step to
cause other steps to fail"). So the job is created with a wait satisfied at once
(`infra.program.job.jobs.no_wait_annotations`), and the program then polls the job, its pods, their
claims and the namespace's events through the same kubeconfig and context as the provider, logging
progress on the job's row, with one line for each container that fails (its exit code and the last
line it printed: `placement.failures`), and ending on the first of:
- the job's success condition (the outcome, as `failure_gate` gives it);
- `Failed` (one line with the pods' logs command, as `failure_gate` raises it, and what the failed
  container of the pod the condition names said, else the last failed container);
- a pod unschedulable, a claim unbound, a container that cannot start, or no pod at all for longer
  than `jobPlacementTimeoutSeconds` (`infra/program/job/placement.py` names the object, the reason and the
  command that shows more); the job is left in place, and the next `up` waits for it again;
- `jobWaitTimeoutSeconds`.
In a preview the watch reads the job once and waits for nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import pulumi

from infra.program.common.meta import JOB_LABEL
from infra.program.common.outcome import DONE_CONDITION, job_outcome
from infra.program.job.kubeapi import ReadError
from infra.program.job.placement import Failure, Snapshot, claim_names, diagnose, failures, progress

# Where each kind is served: (group/version, plural).
RESOURCES = {
    "Job": ("batch/v1", "jobs"),
    "PyTorchJob": ("kubeflow.org/v1", "pytorchjobs"),
    "TrainJob": ("trainer.kubeflow.org/v1alpha1", "trainjobs"),
}
POLL_SECONDS = float(os.environ.get("DDP_MNIST_WATCH_POLL_SECONDS", "5"))
HEARTBEAT_SECONDS = 300.0  # a progress line at least this often, even when nothing changed
UNREACHABLE_SECONDS = 300.0  # consecutive failed reads before the wait gives up
NOT_FOUND = "not found (deleted after it ended?)"


class ClusterReader(Protocol):
    """GETs against the API server: an object (None when it does not exist) or a list's items."""

    def get(self, path: str) -> Mapping[str, Any] | None: ...

    def items(self, path: str, query: Mapping[str, str] | None = None) -> list[Mapping[str, Any]]: ...


@dataclass(frozen=True)
class Target:
    """The run to wait for."""

    kind: str
    name: str
    namespace: str
    logs: str  # the command that prints its pods' logs, for the failure line
    pods: int = 1  # how many pods it runs at once

    @property
    def path(self) -> str:
        group_version, plural = RESOURCES[self.kind]
        prefix = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        return f"{prefix}/namespaces/{self.namespace}/{plural}/{self.name}"


def read_snapshot(reader: ClusterReader, target: Target) -> Snapshot:
    """The job, its pods (by the job label every pod of ours carries), their claims and classes, and the
    namespace's events."""
    ns = target.namespace
    workload = reader.get(target.path)
    pods = reader.items(f"/api/v1/namespaces/{ns}/pods", {"labelSelector": f"{JOB_LABEL}={target.name}"})
    claims: dict[str, Mapping[str, Any] | None] = {}
    classes: dict[str, Mapping[str, Any] | None] = {}
    for name in sorted({c for pod in pods for c in claim_names(pod)}):
        claim = claims[name] = reader.get(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{name}")
        class_name = ((claim or {}).get("spec") or {}).get("storageClassName")
        if class_name and class_name not in classes:
            # No right to read classes: the line names the class without its provisioner.
            with contextlib.suppress(ReadError):
                classes[class_name] = reader.get(f"/apis/storage.k8s.io/v1/storageclasses/{class_name}")
    events = reader.items(f"/api/v1/namespaces/{ns}/events") if workload is not None else []
    return Snapshot(target.kind, target.name, ns, workload, pods, claims, classes, events, target.pods)


def _ended(workload: Mapping[str, Any], target: Target, failed: list[Failure]) -> str | None:
    """The success condition's name once it holds; raises pulumi.RunError once Failed holds, naming
    what a container of the pod the condition's message names said (a Job's pod failure policy names
    the pod whose exit code matched), else the last of the `failed` containers: a pod that failed first
    ends its peers, and theirs are the last lines, not the cause."""
    try:
        outcome = job_outcome(workload.get("status") or {}, target.kind, target.name, target.logs)
    except pulumi.RunError as error:
        if not failed:
            raise
        named = [f for f in failed if re.search(rf"(?<![\w.-]){re.escape(f.pod)}(?![\w.-])", str(error))]
        if named:
            raise pulumi.RunError(f"{error}; the named {named[-1].line(target.namespace)}") from None
        raise pulumi.RunError(f"{error}; the last failed {failed[-1].line(target.namespace)}") from None
    return outcome if outcome == DONE_CONDITION[target.kind] else None


@dataclass
class RunWatch:
    """Waits for runs with a reader of the cluster; `wait` False (a preview) reads once."""

    reader: ClusterReader
    wait: bool
    placement_seconds: float
    poll_seconds: float = POLL_SECONDS
    log: Callable[[str, pulumi.Resource | None], None] = lambda msg, resource: pulumi.log.info(msg, resource)
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], datetime] = lambda: datetime.now(UTC)  # what the API's timestamps are compared with

    def outcome(
        self, resource: pulumi.Resource, target: Target, timeout_seconds: float
    ) -> pulumi.Output[str]:
        """The run's outcome, once the job resource exists; fails (and `pulumi up` with it) as
        `until_ended` does."""
        created: pulumi.Output[str] = resource.id  # type: ignore[attr-defined]
        return created.apply(lambda _: self.until_ended(resource, target, timeout_seconds))

    async def until_ended(
        self, resource: pulumi.Resource | None, target: Target, timeout_seconds: float
    ) -> str:
        """Polls until the run ended, its placement failed, or the timeout; see the module's docstring."""
        start = self.clock()
        last_line, last_logged, unreachable_since = "", start, None
        failed: dict[tuple[str, str, str], Failure] = {}  # every failed run seen, by pod, container, end
        if self.wait:
            # What a person can run in another terminal while `pulumi up` waits (the stack's logsCommand
            # output exists only once `up` has ended).
            self.log(
                f"waiting for {target.kind} {target.namespace}/{target.name}; its logs: {target.logs}",
                resource,
            )
        while True:
            try:
                snapshot = await asyncio.to_thread(read_snapshot, self.reader, target)
                unreachable_since = None
            except ReadError as error:
                if not self.wait:
                    return f"unknown (the cluster was not read: {error})"
                unreachable_since = unreachable_since or self.clock()
                if self.clock() - unreachable_since >= UNREACHABLE_SECONDS:
                    raise pulumi.RunError(
                        f"cannot read {target.kind} {target.namespace}/{target.name} from the cluster: "
                        f"{error}"
                    ) from None
                await asyncio.sleep(self.poll_seconds)
                continue
            if snapshot.workload is None:
                self.log(f"{target.kind} {target.name} is not in the cluster any more", resource)
                return NOT_FOUND
            for failure in failures(snapshot):
                key = (failure.pod, failure.container, failure.finished)
                if key not in failed:
                    failed[key] = failure
                    if self.wait:
                        self.log(failure.line(target.namespace), resource)
            ended = _ended(snapshot.workload, target, list(failed.values()))
            if ended:
                return ended
            line = progress(snapshot)
            if not self.wait:
                return f"running: {line}"
            problem = diagnose(snapshot, self.wall(), self.placement_seconds)
            if problem:
                raise pulumi.RunError(
                    f"{problem} (jobPlacementTimeoutSeconds={self.placement_seconds:.0f}; the "
                    f"{target.kind} is left in place: fix the cause and run `pulumi up` again to wait for it)"
                )
            elapsed = self.clock() - start
            if elapsed >= timeout_seconds:
                raise pulumi.RunError(
                    f"{target.kind} {target.name} did not end within "
                    f"jobWaitTimeoutSeconds={timeout_seconds:.0f} ({line}); its pods' logs: {target.logs}"
                )
            if line != last_line or self.clock() - last_logged >= HEARTBEAT_SECONDS:
                self.log(f"{line} ({elapsed:.0f}s)", resource)
                last_line, last_logged = line, self.clock()
            await asyncio.sleep(self.poll_seconds)
