"""A stack's workloads run here, one after another in dependency order, each to its end: the seed
Job, then the training job (stopping at the first failure), then the model server if the stack has
one. Each workload's pods are listed as it starts and its result is said in one line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TextIO

from infra.local.adjust import check_gpus, limit_training, on_cpu
from infra.local.plan import JobPlan, PlanError
from infra.local.preempt import Preemption
from infra.local.serve import server_pods
from infra.local.serve_stack import ServeOptions, serve_model
from infra.local.services import local_services
from infra.local.supervisor import JobResult, Supervisor
from infra.local.workloads import admitted, plan_workloads
from infra.review.manifest import Rendering, render
from infra.stackconfig import load_stack


def run_stack(
    stack_name: str,
    workdir: Path,
    timeout: float,
    overrides: dict[str, str],
    out: TextIO = sys.stdout,
    cpu: bool = False,
    serving: ServeOptions | None = None,
    train_limit: int = 0,
    preemptions: tuple[Preemption, ...] = (),
) -> tuple[JobPlan, JobResult]:
    """Every workload of the stack, in dependency order, each to its end; stops at the first failure.
    Then the model server, if the stack has one. `train_limit` > 0: the trainer uses only the first
    `train_limit` training images; `preemptions`: pods of the training job preempted on the way."""
    rendering = render(load_stack(stack_name))
    if not cpu:
        check_gpus(stack_name, rendering.settings)
    return run_rendering(
        rendering, workdir / stack_name, timeout, overrides, out, cpu, serving, train_limit, preemptions
    )


def run_rendering(
    rendering: Rendering,
    root: Path,
    timeout: float,
    overrides: dict[str, str],
    out: TextIO = sys.stdout,
    cpu: bool = False,
    serving: ServeOptions | None = None,
    train_limit: int = 0,
    preemptions: tuple[Preemption, ...] = (),
) -> tuple[JobPlan, JobResult]:
    """`run_stack` for a rendering already made (tests render edited configs through here). Raises
    ServeFailed when the job succeeded but its server did not serve the trainer's accuracy."""
    view = admitted(rendering)  # admission first: a refused pod starts nothing
    with local_services(rendering, root, overrides, out) as service_env:
        plans = plan_workloads(rendering, root, {**service_env, **overrides})
        if cpu:
            on_cpu(plans[-1], rendering.settings, out)
        if train_limit:
            limit_training(plans[-1], train_limit, out)
        check_preemptions(plans[-1], preemptions)
        for job in plans:
            job, result = run_plan(job, timeout, out, preemptions if job is plans[-1] else ())
            if not result.succeeded:
                break
        if result.succeeded and server_pods(view.admission.pods):
            serve_model(rendering, view.admission.pods, root, {**service_env, **overrides}, job, out, serving)
    if result.succeeded:
        say_curves(job, rendering.settings.tensorboard_deploy, out)
    return job, result


def say_curves(job: JobPlan, board: bool, out: TextIO) -> None:
    """The last line of a successful run: the command that opens its training curves. With
    tensorboardDeploy, that command is the local stand-in for the stack's TensorBoard Deployment,
    which does not run here."""
    curves = job.curves_dir
    if curves is None or not curves.is_dir():
        return
    tensorboard = Path(sys.executable).with_name("tensorboard")
    command = tensorboard if tensorboard.is_file() else Path("tensorboard")
    stand_in = " (the local stand-in for the stack's TensorBoard Deployment)" if board else ""
    print(
        f"[local] curves{stand_in}: {command} --logdir {curves} --host 127.0.0.1 --port 6006, "
        "then open http://127.0.0.1:6006",
        file=out,
        flush=True,
    )


def check_preemptions(job: JobPlan, preemptions: tuple[Preemption, ...]) -> None:
    """Each preemption names a pod of the training job (PlanError: the pods it has)."""
    names = [pod.name for pod in job.pods]
    for preemption in preemptions:
        if preemption.pod not in names:
            raise PlanError(
                f"--preempt {preemption}: job {job.job_name} has no pod {preemption.pod}; "
                f"its pods: {', '.join(names)}"
            )


def run_plan(
    job: JobPlan,
    timeout: float,
    out: TextIO = sys.stdout,
    preemptions: tuple[Preemption, ...] = (),
    restart_delay: float = 10.0,
) -> tuple[JobPlan, JobResult]:
    """Runs an already planned workload (tests plan edited renderings through here), preempting its
    pods as `preemptions` say."""
    for pod in job.pods:
        init = ", ".join(c.name for c in pod.init)
        line = f"[local] {job.kind} {job.job_name}: pod {pod.name}, node rank {pod.index}"
        if init:
            line += f"; init containers {init} first (their DNS lookups: a local stand-in for cluster DNS)"
        print(line, file=out, flush=True)
    check_preemptions(job, preemptions)
    result = Supervisor(job, out, restart_delay, preemptions).run(timeout)
    report(job, result, out)
    return job, result


def report(job: JobPlan, result: JobResult, out: TextIO) -> None:
    """One line: the job's status and time; its failure, or its test accuracy and model file."""
    status = "Succeeded" if result.succeeded else "Failed"
    line = f"[local] job {job.job_name} {status} after {result.seconds:.1f}s"
    if result.disrupted or result.restarts:
        plural = "" if result.restarts == 1 else "s"
        line += (
            f" ({result.restarts} pod restart{plural} after failures, {result.disrupted} after a preemption)"
        )
    if not result.succeeded:
        print(f"{line}: {result.reason}", file=out, flush=True)
        return
    output = job.output_dir
    if output is not None and (output / "metrics.json").is_file():
        metrics = json.loads((output / "metrics.json").read_text())
        accuracy = metrics.get("final_test_accuracy")
        if isinstance(accuracy, float) and accuracy <= 1:
            accuracy *= 100
        line += f": test accuracy {accuracy:.2f}%, model {output / 'model.pt'}"
    print(line, file=out, flush=True)
