"""A job's end as its controller records it: the condition that says it succeeded, those that say it
failed, and the outcome the program reports (what the job kinds and the run's watch both read)."""

from __future__ import annotations

from typing import Any

import pulumi

DONE_CONDITION = {"PyTorchJob": "Succeeded", "Job": "Complete", "TrainJob": "Complete"}
# A batch/v1 Job that has failed says so first with FailureTarget, then Failed only once every pod has
# ended (kubernetes v1.33.13 `pkg/controller/job/job_controller.go`: newFailureCondition and
# delayTerminalCondition; the other pods' grace period can take a minute). Either ends the wait.
FAILED_CONDITIONS = {"PyTorchJob": ("Failed",), "Job": ("Failed", "FailureTarget"), "TrainJob": ("Failed",)}


def status_field(obj: Any, name: str) -> Any:
    """A field of a status as the provider returns it: a dict (custom resources) or a typed output."""
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def job_outcome(status: Any, kind: str, name: str, logs: str) -> str:
    """The job's final condition; raises (failing `pulumi up` with one line that ends with the command
    printing its pods' logs) when it is Failed."""
    for condition in status_field(status, "conditions") or []:
        if status_field(condition, "status") != "True":
            continue
        if status_field(condition, "type") in FAILED_CONDITIONS[kind]:
            reason, message = (
                status_field(condition, "reason") or "",
                status_field(condition, "message") or "",
            )
            raise pulumi.RunError(
                f"{kind} {name} failed ({reason}): {message}".rstrip(": ") + f"; its pods' logs: {logs}"
            )
        if status_field(condition, "type") == DONE_CONDITION[kind]:
            return DONE_CONDITION[kind]
    return "unknown (not awaited)"
