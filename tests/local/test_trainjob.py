"""A TrainJob stack run by the local scheduler: its pods as JobSet and the Job controller make them,
trained for real on 2 nodes, and restarts counted as JobSet v0.12.0 counts them (a failed node Job
restarts every pod; the JobSet fails once failurePolicy.maxRestarts restarts are used up)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from infra.local.plan import JobPlan, RestartRule
from infra.local.stack import run_plan
from infra.local.supervisor import Supervisor
from infra.local.workloads import plan_stack
from infra.review.manifest import Rendering
from tests.infra.conftest import render_config
from tests.local.seeding import REAL_ACCURACY_IMAGES, seed_data_volume
from tests.runcount import COUNT_THIS_RUN, STAND_IN_FLAGS, runs

SMALL = {"jobCpuRequest": "1", "jobMemoryRequest": "1Gi", "jobMemoryLimit": "2Gi", "jobShmSize": "256Mi"}
TRAINJOB = {"jobKind": "trainjob", "trainerInstall": True, "operatorInstall": False, **SMALL}


def _plan(rendering: Rendering, root: Path) -> JobPlan:
    """The TrainJob, planned over a data volume already seeded (what the seed Job does)."""
    seed_data_volume(root)
    return plan_stack(rendering, root, {})


@pytest.mark.slow
def test_two_node_trainjob_trains_to_a_real_accuracy(tmp_path):
    job = _plan(render_config({**TRAINJOB, "jobNodes": 2, "jobEpochs": 1}), tmp_path)
    assert (job.kind, [p.name for p in job.pods]) == ("trainjob", ["mnist-r1-node-0-0", "mnist-r1-node-0-1"])
    for pod in job.pods:
        pod.argv.append(f"--train-limit={REAL_ACCURACY_IMAGES}")  # as the other kinds' two-node run
    out = io.StringIO()
    _, result = run_plan(job, 300, out)
    output = out.getvalue()
    assert result.succeeded, f"{result.reason}\n{output[-3000:]}"
    assert "[local] trainjob mnist-r1: pod mnist-r1-node-0-1, node rank 1" in output
    metrics = json.loads((job.output_dir / "metrics.json").read_text())
    assert metrics["world_size"] == 2
    assert metrics["final_test_accuracy"] >= 0.97
    assert job.output_dir == (tmp_path / "pvc" / "ddp-mnist-checkpoints" / "mnist-r1").resolve()
    assert (job.output_dir / "model.pt").stat().st_size > 10_000
    assert "[local] job mnist-r1 Succeeded" in output


def test_each_node_gets_the_torch_plugins_env_with_the_master_here(tmp_path):
    values = {
        **TRAINJOB,
        "jobNodes": 3,
        "jobBatchSize": 255,
        "jobBackoffLimit": 2,
        "jobActiveDeadlineSeconds": 900,
    }
    job = plan_stack(render_config(values), tmp_path, {})
    assert job.restart == RestartRule(
        "trainjob",
        "Never",
        2,
        tuple(range(1, 128)),
        job_backoff_limit=0,
        ignores_disruption=True,
        ignored_codes=(201,),
    )
    assert job.active_deadline == 900
    first, last = job.pods[0], job.pods[2]
    assert [p.index for p in job.pods] == [0, 1, 2]
    assert first.dns_names == ("mnist-r1-node-0-0.mnist-r1",)
    assert first.env["PET_MASTER_ADDR"] == last.env["PET_MASTER_ADDR"] == "127.0.0.1"
    assert first.env["PET_MASTER_PORT"] == last.env["PET_MASTER_PORT"] != "29500"
    assert (last.env["PET_NODE_RANK"], last.env["JOB_COMPLETION_INDEX"], last.env["HOSTNAME"]) == (
        "2",
        "2",
        "mnist-r1-node-0-2",
    )
    assert (
        "--node-rank=2" in last.argv and "--nnodes=3" in last.argv and "--master-addr=127.0.0.1" in last.argv
    )
    assert last.argv[0] == sys.executable


def _scripted(job: JobPlan, tmp_path: Path, incidents: int, code: int) -> None:
    """Node 0 fails `incidents` times with `code`, then exits 0; the other nodes exit 0 after a moment.
    Every run of every pod is counted in a file named after it; node 0 ends a run only once every other
    node has counted the same run (on a loaded machine a peer's interpreter may still be starting when
    node 0 exits, and the restart would stop it before it counted)."""
    counters = [tmp_path / f"{pod.name}.runs" for pod in job.pods]
    for pod, counter in zip(job.pods, counters, strict=True):
        fails = incidents if pod.index == 0 else 0
        peers = [str(c) for c in counters if c != counter] if pod.index == 0 else []
        script = (
            f"import os, sys, time; {COUNT_THIS_RUN}; "
            "deadline = time.monotonic() + 30\n"
            f"while any({runs('q')} < n + 1 for q in sys.argv[2:])"
            " and time.monotonic() < deadline:\n"
            "    time.sleep(0.01)\n"
            f"time.sleep(0.3 if {pod.index} else 0); sys.exit({code} if n < {fails} else 0)"
        )
        pod.argv = [sys.executable, *STAND_IN_FLAGS, "-c", script, str(counter), *peers]


def _run_scripted(values: dict, tmp_path: Path, incidents: int, code: int = 137):
    job = plan_stack(render_config({**TRAINJOB, **values}), tmp_path / "root", {})
    _scripted(job, tmp_path, incidents, code)
    out = io.StringIO()
    result = Supervisor(job, out, restart_delay=0.05).run(120)
    counted = {p.name: (tmp_path / f"{p.name}.runs").stat().st_size for p in job.pods}
    return result, out.getvalue(), counted


@pytest.mark.parametrize("restarts", [1, 2])
def test_a_failed_node_restarts_every_pod_up_to_max_restarts_and_fails_at_the_next(tmp_path, restarts):
    ok, output, runs = _run_scripted({"jobBackoffLimit": restarts}, tmp_path / "a", incidents=restarts)
    assert ok.succeeded, output
    for attempt in range(1, restarts + 1):
        assert f"JobSet restarts every pod in 0s ({attempt}/{restarts} restarts of the JobSet)" in output
    assert runs == {"mnist-r1-node-0-0": restarts + 1, "mnist-r1-node-0-1": restarts + 1}  # both, each time
    failed, output, _ = _run_scripted({"jobBackoffLimit": restarts}, tmp_path / "b", incidents=restarts + 1)
    assert not failed.succeeded
    assert failed.reason.startswith("pod mnist-r1-node-0-0 exited with 137 (JobSet maxRestarts reached)")
    assert f"({restarts + 1}/{restarts} " not in output


def test_bad_input_fails_the_jobset_at_once_and_no_retries_means_the_first_failure_is_final(tmp_path):
    failed, output, runs = _run_scripted({"jobBackoffLimit": 3}, tmp_path / "a", incidents=1, code=3)
    assert not failed.succeeded
    assert "exited with 3 (no retry for this exit code)" in failed.reason
    assert "restarts" not in output and runs["mnist-r1-node-0-0"] == 1
    failed, output, _ = _run_scripted({"jobBackoffLimit": 0}, tmp_path / "b", incidents=1, code=200)
    assert not failed.succeeded and "(JobSet maxRestarts reached)" in failed.reason
