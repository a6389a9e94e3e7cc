"""The local scheduler counts restarts exactly as each job kind's controller does: a job fails after
exactly the right number of incidents and survives one fewer. An incident is every pod of the job
failing once (a lost rank breaks the collective for all); the pods here are small scripts that fail
a given number of times and then succeed, so only the counting is under test."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from infra.local.plan import JobPlan
from infra.local.supervisor import Supervisor
from infra.local.workloads import plan_stack, plan_workloads
from tests.infra.conftest import rendered
from tests.runcount import COUNT_THIS_RUN, STAND_IN_FLAGS

SMALL = {"jobCpuRequest": "1", "jobMemoryRequest": "1Gi", "jobMemoryLimit": "2Gi", "jobShmSize": "256Mi"}


def _failing_pods(job: JobPlan, tmp_path: Path, incidents: int, code: int) -> None:
    """Each pod fails `incidents` times with `code`, then exits 0."""
    for pod in job.pods:
        counter = tmp_path / f"{pod.name}.runs"
        script = f"import os, sys; {COUNT_THIS_RUN}; sys.exit({code} if n < {incidents} else 0)"
        pod.argv = [sys.executable, *STAND_IN_FLAGS, "-c", script, str(counter)]
        pod.init = []


def _run(values: dict, tmp_path: Path, incidents: int, code: int = 1):
    job = plan_stack(rendered({**SMALL, **values}), tmp_path / "root", {})
    _failing_pods(job, tmp_path, incidents, code)
    out = io.StringIO()
    result = Supervisor(job, out, restart_delay=0.05).run(120)
    return result, out.getvalue()


@pytest.mark.parametrize(("nodes", "survived"), [(2, 1), (3, 2)])
def test_pytorchjob_on_failure_survives_its_incidents_and_fails_at_the_next(tmp_path, nodes, survived):
    values = {
        "jobNodes": nodes,
        "jobBackoffLimit": survived,
        "jobBatchSize": 252,
        "jobRestartPolicy": "OnFailure",
    }
    ok, output = _run(values, tmp_path / "a", incidents=survived)
    assert ok.succeeded, output
    failed, output = _run(values, tmp_path / "b", incidents=survived + 1)
    assert not failed.succeeded
    assert "(backoff limit reached)" in failed.reason
    limit = survived * nodes + 1
    assert f"({survived * nodes}/{limit} container restarts of the job)" in output
    assert f"({limit}/{limit} " not in output


def test_indexed_job_counts_retries_per_index(tmp_path):
    values = {"jobKind": "indexed-job", "jobNodes": 2, "jobBackoffLimit": 2}
    ok, output = _run(values, tmp_path / "a", incidents=2, code=200)
    assert ok.succeeded, output
    assert output.count("(2/2)") == 2  # each index retried twice
    failed, output = _run(values, tmp_path / "b", incidents=3, code=200)
    assert not failed.succeeded and "(backoff limit reached)" in failed.reason


def test_exit_code_policy_retries_signals_uncounted_and_fails_bad_input_at_once(tmp_path):
    values = {"jobRestartPolicy": "ExitCode", "jobBackoffLimit": 1, "jobActiveDeadlineSeconds": 600}
    ok, output = _run(values, tmp_path / "a", incidents=3, code=137)
    assert ok.succeeded, output
    assert "(a new pod: the operator does not count it)" in output
    failed, output = _run(values, tmp_path / "b", incidents=1, code=3)
    assert not failed.succeeded
    assert "exited with 3 (no retry for this exit code)" in failed.reason
    assert "restarting" not in output


# One retry rule for every job kind that can tell exit codes apart (trainer/errors.py): 1-127 are
# permanent (a bug, bad input), 128 and above retryable (signals: 134 SIGABRT, 137 the OOM killer or a
# preemption's SIGKILL, 143 SIGTERM; the trainer's 200 peer lost, 205 S3 unreachable, 206 master
# unreachable, 207 export failed).
PERMANENT = (1, 2, 3, 4, 127)
RETRYABLE = (128, 134, 137, 143, 200, 205, 206, 207, 255)
KINDS = {
    "pytorchjob": {"jobRestartPolicy": "ExitCode", "jobActiveDeadlineSeconds": 600},
    "indexed-job": {"jobKind": "indexed-job"},
    "trainjob": {"jobKind": "trainjob", "trainerInstall": True, "operatorInstall": False},
}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("code", PERMANENT)
def test_a_permanent_exit_code_fails_every_kind_at_once(tmp_path, kind, code):
    failed, output = _run(
        {**KINDS[kind], "jobNodes": 2, "jobBackoffLimit": 2}, tmp_path, incidents=1, code=code
    )
    assert not failed.succeeded
    assert f"exited with {code} (no retry for this exit code)" in failed.reason, failed.reason
    assert "restart" not in output


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("code", RETRYABLE)
def test_a_retryable_exit_code_is_retried_by_every_kind(tmp_path, kind, code):
    ok, output = _run({**KINDS[kind], "jobNodes": 2, "jobBackoffLimit": 2}, tmp_path, incidents=1, code=code)
    assert ok.succeeded, output
    assert f"exited with {code}" in output and "restart" in output


@pytest.mark.parametrize(("code", "retried"), [(3, False), (127, False), (137, True), (205, True)])
def test_the_seed_job_follows_the_same_rule(tmp_path, code, retried):
    job = plan_workloads(
        rendered({**SMALL, "seedSource": "https", "seedBackoffLimit": 2}), tmp_path / "root", {}
    )[0]
    assert job.job_name == "ddp-mnist-seed"
    _failing_pods(job, tmp_path, incidents=1, code=code)
    out = io.StringIO()
    result = Supervisor(job, out, restart_delay=0.05).run(120)
    assert result.succeeded is retried, out.getvalue()
    assert ("restarting" in out.getvalue()) is retried
