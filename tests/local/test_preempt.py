"""The local rehearsal of a spot node's preemption (`--preempt POD@STEP`): SIGTERM at the chosen step
or time, SIGKILL after the pod's grace period, and the job kind's rule for a disrupted pod. Small
scripts stand in for the trainer where only the rules are under test; the slow tier preempts a real
2-node run of each kind mid-epoch and compares its end with an uninterrupted run's."""

from __future__ import annotations

import hashlib
import io
import json
import signal
import sys
import threading
from pathlib import Path

import pytest

from infra.local import supervisor as supervisor_module
from infra.local.cli import main
from infra.local.plan import JobPlan, PlanError
from infra.local.preempt import Preempter, Preemption, parse_preemption
from infra.local.stack import check_preemptions, report, run_plan
from infra.local.supervisor import PodRun, Supervisor
from infra.local.workloads import plan_stack
from tests.infra.conftest import render_config
from tests.local.seeding import seed_data_volume
from tests.runcount import COUNT_THIS_RUN, STAND_IN_FLAGS

SMALL = {"jobCpuRequest": "1", "jobMemoryRequest": "1Gi", "jobMemoryLimit": "2Gi", "jobShmSize": "256Mi"}
KINDS = {
    "pytorchjob": ({}, "mnist-r1-worker-0", "(a new pod: the operator counts no restarts of it)"),
    "indexed-job": (
        {"jobKind": "indexed-job"},
        "mnist-r1-1",
        "(DisruptionTarget: the podFailurePolicy ignores it, not counted)",
    ),
    "trainjob": (
        {"jobKind": "trainjob", "trainerInstall": True, "operatorInstall": False},
        "mnist-r1-node-0-1",
        "(DisruptionTarget: the podFailurePolicy ignores it, not counted)",
    ),
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mnist-r1-1@30", Preemption("mnist-r1-1", step=30)),
        ("mnist-r1-master-0@2.5s", Preemption("mnist-r1-master-0", seconds=2.5)),
    ],
)
def test_a_preemption_is_a_pod_and_a_step_or_a_time(text, expected):
    assert parse_preemption(text) == expected
    assert str(expected) == text


@pytest.mark.parametrize(
    "text", ["mnist-r1-1", "mnist-r1-1@", "@3", "mnist-r1-1@0", "mnist-r1-1@1.5", "Pod@3"]
)
def test_a_bad_preemption_is_one_line_and_exit_2(text, capsys):
    with pytest.raises(ValueError, match="expected POD@STEP|the step must be a whole number"):
        parse_preemption(text)
    with pytest.raises(SystemExit) as exited:
        main(["--stack", "dev", "--preempt", text])
    assert exited.value.code == 2
    assert f"argument --preempt: {text!r}" in capsys.readouterr().err


def test_a_preemption_of_a_pod_the_job_lacks_names_its_pods(tmp_path):
    job = plan_stack(render_config({**SMALL, "jobNodes": 2}), tmp_path, {})
    with pytest.raises(PlanError) as error:
        check_preemptions(job, (Preemption("mnist-r1-9", step=3),))
    assert str(error.value) == (
        "--preempt mnist-r1-9@3: job mnist-r1 has no pod mnist-r1-9; "
        "its pods: mnist-r1-master-0, mnist-r1-worker-0"
    )


def test_the_step_is_read_from_the_trainers_progress_lines():
    preempter = Preempter([Preemption("a", step=12), Preemption("b", seconds=5)])
    preempter.observe("[W] trainer: progress step  9/40  22.5% epoch 1/2 loss=0.7 lr=0.01 samples/s=9 eta=1s")
    assert preempter.due(1.0) == []
    preempter.observe("trainer: epoch 1/2 loss=1.4 test_loss=0.7 test_acc=87.45%")  # no step: ignored
    preempter.observe("trainer: progress step 13/40  32.5% epoch 2/2 loss=0.7 lr=0.01 samples/s=9 eta=1s")
    assert preempter.due(1.0) == [Preemption("a", step=12)]
    assert preempter.due(6.0) == [Preemption("b", seconds=5)]
    assert preempter.due(60.0) == []  # each once


def test_each_training_pod_waits_its_grace_period_from_the_stack(tmp_path):
    job = plan_stack(
        render_config({**SMALL, "jobNodes": 2, "jobTerminationGracePeriodSeconds": 45}), tmp_path, {}
    )
    assert [pod.grace_seconds for pod in job.pods] == [45, 45]


def _stepping_pods(job: JobPlan, tmp_path: Path, ignore_sigterm: bool = False) -> None:
    """Each pod prints a progress line every 20 ms up to step 40 and exits 0; the first run of each
    pod stops at nothing but a signal (SIGTERM exits 143 unless ignored)."""
    for pod in job.pods:
        counter = tmp_path / f"{pod.name}.runs"
        script = (
            "import os, signal, sys, time\n"
            f"{COUNT_THIS_RUN}\n"
            f"if {ignore_sigterm}: signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "for step in range(1, 41):\n"
            "    print(f'trainer: progress step {step:>2}/40', flush=True); time.sleep(0.02)\n"
            "while n == 0 and sys.argv[2] == 'first-runs-forever': time.sleep(0.05)\n"
        )
        first = "first-runs-forever" if pod.index else "-"
        pod.argv = [sys.executable, *STAND_IN_FLAGS, "-c", script, str(counter), first]
        pod.init = []


def _preempted(values: dict, pod: str, tmp_path: Path, at: Preemption | None = None, grace: float = 5):
    job = plan_stack(render_config({**SMALL, "jobNodes": 2, **values}), tmp_path / "root", {})
    for planned in job.pods:
        planned.grace_seconds = grace
    _stepping_pods(job, tmp_path, ignore_sigterm=grace < 5)
    out = io.StringIO()
    result = Supervisor(job, out, restart_delay=0.05, preemptions=(at or Preemption(pod, step=5),)).run(60)
    report(job, result, out)
    return result, out.getvalue()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_preempted_pod_is_replaced_without_counting_against_the_backoff(kind, tmp_path):
    values, pod, count = KINDS[kind]
    result, output = _preempted({**values, "jobBackoffLimit": 0}, pod, tmp_path)
    assert result.succeeded, output
    assert (result.restarts, result.disrupted) == (0, 1)
    assert f"[local] preempting pod {pod} (--preempt {pod}@5, at step 5): SIGTERM to its process" in output
    line = next(x for x in output.splitlines() if x.startswith(f"[local] pod {pod} preempted"))
    assert line.startswith(f"[local] pod {pod} preempted at step 5 (DisruptionTarget): exited with 143 ")
    assert line.endswith(f"within its 5s grace period; restarting in 0s {count}")
    assert "(0 pod restarts after failures, 1 after a preemption)" in output


@pytest.mark.parametrize(("stop", "code"), [("terminate", 143), ("kill", 137)])
def test_a_signal_sent_while_the_pods_process_starts_reaches_it(stop, code, tmp_path, monkeypatch):
    """A preemption (SIGTERM) or the job's end (SIGKILL) that comes while the pod's process is being
    started, as it can when the pod starts late on a loaded machine: the process gets the signal once
    it exists. Lost, the pod ran on, and the job waited for it (`Popen` is made slow to open the window)."""
    job = plan_stack(render_config({**SMALL, "jobNodes": 1}), tmp_path, {})
    pod = job.pods[0]
    pod.argv, pod.init = [sys.executable, *STAND_IN_FLAGS, "-c", "import time; time.sleep(60)"], []
    starting, popen = threading.Event(), supervisor_module.subprocess.Popen

    def slow_popen(*args, **kwargs):
        starting.set()
        threading.Event().wait(0.3)
        return popen(*args, **kwargs)

    monkeypatch.setattr(supervisor_module.subprocess, "Popen", slow_popen)
    run = PodRun(pod, Supervisor(job, io.StringIO()))
    assert starting.wait(10)
    try:
        run.terminate() if stop == "terminate" else run.kill(signal.SIGKILL)
        run.wait(timeout=10)
        assert run.poll() == code
    finally:
        if run.proc is not None and run.proc.poll() is None:
            run.proc.kill()
        run.wait(timeout=10)


@pytest.mark.parametrize(
    ("kind", "why"),
    [("indexed-job", "(backoff limit reached)"), ("trainjob", "(JobSet maxRestarts reached)")],
)
def test_the_same_exit_without_a_disruption_fails_a_job_with_no_retries_left(kind, why, tmp_path):
    """The contrast: with jobBackoffLimit 0, the pod ending with 143 at step 5 by itself (no
    DisruptionTarget) is counted, and nothing is left to retry it."""
    values, pod, _ = KINDS[kind]
    job = plan_stack(render_config({**SMALL, "jobNodes": 2, **values, "jobBackoffLimit": 0}), tmp_path, {})
    _stepping_pods(job, tmp_path)
    target = next(p for p in job.pods if p.name == pod)
    script = target.argv.index("-c") + 1
    target.argv[script] = (
        target.argv[script]
        .replace(
            "time.sleep(0.02)\n", "time.sleep(0.02)\n    if step == 5 and n == 0: os.kill(os.getpid(), 15)\n"
        )
        .replace("import pathlib,", "import os, pathlib,")
    )
    out = io.StringIO()
    result = Supervisor(job, out, restart_delay=0.05).run(60)
    assert not result.succeeded
    assert f"pod {pod} exited with 143 {why}" in result.reason, out.getvalue()


def test_a_pytorchjob_that_never_restarts_fails_on_a_preempted_pod(tmp_path):
    result, output = _preempted({"jobRestartPolicy": "Never"}, "mnist-r1-worker-0", tmp_path)
    assert not result.succeeded
    assert "(restartPolicy Never: a failed pod fails the PyTorchJob, disrupted or not)" in result.reason
    assert "[local] pod mnist-r1-worker-0 preempted at step 5 (DisruptionTarget): exited with 143" in output


def test_a_pod_still_running_after_its_grace_period_is_killed(tmp_path):
    result, output = _preempted(
        {"jobKind": "indexed-job"}, "mnist-r1-1", tmp_path, Preemption("mnist-r1-1", seconds=0.3), grace=1
    )
    assert result.succeeded, output
    assert "[local] pod mnist-r1-1: still running 1s after SIGTERM: SIGKILL" in output
    assert "[local] pod mnist-r1-1 preempted at step " in output
    assert "(DisruptionTarget): exited with 137 SIGKILLed after its 1s grace period; restarting" in output


def _seeded_plan(values: dict, root: Path) -> JobPlan:
    """The training job over a seeded data volume, 2 nodes, 2 epochs of 20 steps (5120 images at a
    global batch of 256), a progress line per step."""
    seed_data_volume(root)
    recipe = {"jobNodes": 2, "jobEpochs": 2, "jobBatchSize": 256}
    job = plan_stack(render_config({**SMALL, **recipe, **values}), root, {})
    for pod in job.pods:
        # 5120 images at a global batch of 256: 20 steps an epoch; the ranks agree every 10th, so
        # a stop lands mid-epoch
        pod.argv += ["--train-limit=5120", "--progress-seconds=0", "--log-every=1"]
        pod.env["OMP_NUM_THREADS"] = "1"
    return job


def _end(job: JobPlan) -> tuple[str, float]:
    assert job.output_dir is not None
    metrics = json.loads((job.output_dir / "metrics.json").read_text())
    return hashlib.sha256((job.output_dir / "model.pt").read_bytes()).hexdigest(), metrics[
        "final_test_accuracy"
    ]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> tuple[str, float]:
    job = _seeded_plan(KINDS["indexed-job"][0], tmp_path_factory.mktemp("uninterrupted"))
    out = io.StringIO()
    _, result = run_plan(job, 300, out, restart_delay=2)
    assert result.succeeded, out.getvalue()[-3000:]
    return _end(job)


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_run_preempted_in_its_second_epoch_ends_with_the_uninterrupted_model(kind, tmp_path, uninterrupted):
    """Preempted at step 23 (the 3rd of epoch 2): the ranks stop together at step 30, rank 0
    checkpoints it mid-epoch, the preempted pod exits 143 and the other 201, and the restarted
    pods end with the uninterrupted run's model.pt, bit for bit."""
    values, pod, count = KINDS[kind]
    if kind == "pytorchjob":
        pod = "mnist-r1-master-0"  # rank 0 itself, where the checkpoints are written
    job = _seeded_plan(values, tmp_path)
    out = io.StringIO()
    _, result = run_plan(job, 300, out, (Preemption(pod, step=23),), restart_delay=2)
    output = out.getvalue()
    assert result.succeeded, output[-4000:]
    preempted = output.index(f"[local] preempting pod {pod} (--preempt {pod}@23, at step 23)")
    assert output.index("trainer: epoch 1/2 ") < preempted < output.index("trainer: epoch 2/2 ")
    assert "trainer: stop at step 10/20 of epoch 2: SIGTERM on a rank" in output
    assert f"[local] pod {pod} preempted at step 23 (DisruptionTarget): exited with 143 " in output
    other = next(p.name for p in job.pods if p.name != pod)
    assert f"[local] pod {other} exited with 201" in output, output[-4000:]
    assert "(epoch 1/2, step 10/20 of epoch 2)" in output  # the restart resumed mid-epoch
    summary = output.splitlines()[-1]
    assert f"test accuracy {100 * uninterrupted[1]:.2f}%" in summary, summary
    assert _end(job) == uninterrupted  # bitwise the same model.pt


@pytest.mark.parametrize("kind", ["indexed-job", "trainjob"])
def test_a_pod_stopped_with_the_job_for_a_preempted_peer_is_replaced_uncounted(kind, tmp_path):
    """Exit 201 (its ranks stopped at the step the job agreed on because another pod was preempted) is
    ignored by the training Job's podFailurePolicy: with jobBackoffLimit 0 the pod is replaced and the
    job goes on, where 143 without a disruption fails it (above)."""
    values, pod, _ = KINDS[kind]
    job = plan_stack(render_config({**SMALL, "jobNodes": 2, **values, "jobBackoffLimit": 0}), tmp_path, {})
    assert job.restart.ignored_codes == (201,)
    _stepping_pods(job, tmp_path)
    target = next(p for p in job.pods if p.name == pod)
    script = target.argv.index("-c") + 1
    target.argv[script] = target.argv[script].replace(
        "time.sleep(0.02)\n", "time.sleep(0.02)\n    if step == 5 and n == 0: sys.exit(201)\n"
    )
    out = io.StringIO()
    result = Supervisor(job, out, restart_delay=0.05).run(60)
    assert result.succeeded, out.getvalue()
    assert "the podFailurePolicy ignores exit code 201, not counted" in out.getvalue()
    assert result.restarts == 0


def test_a_pod_whose_command_cannot_start_fails_with_128_at_once(tmp_path):
    """As the kubelet's StartError: the pod ends with 128 and the job's rules apply (here no retry), the
    same moment, not at the job's deadline (the pod counted as running)."""
    job = plan_stack(render_config({**SMALL, "jobNodes": 1, "jobRestartPolicy": "Never"}), tmp_path, {})
    job.pods[0].argv, job.pods[0].init = [str(tmp_path / "no-such-command")], []
    out = io.StringIO()
    result = Supervisor(job, out, restart_delay=0.05).run(30)
    assert not result.succeeded
    assert result.reason.startswith("pod mnist-r1-master-0 exited with 128 "), result.reason
    assert result.seconds < 10
    line = "[local] pod mnist-r1-master-0: its container could not start: [Errno 2] No such file"
    assert line in out.getvalue()
