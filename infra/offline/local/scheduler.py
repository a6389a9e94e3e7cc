"""Local scheduler: `python -m infra.offline.local --stack NAME` runs a stack's rendered workloads here.

A development scheduler (like TorchX's local scheduler): it renders the stack exactly as
`infra.offline.render` does, derives the pods the controllers create and puts them through the
namespace's admission (`infra.offline.cluster`: a pod the API server would refuse is refused here with
the same message), then starts one local process per pod running its init containers and then its own
command, with this project's environment instead of the image. Each gets the env its pod would see,
PVCs map to `.local/<stack>/pvc/<claim>/`, and the job's restart and failure rules are followed.
Kubernetes and the training operator remain the engine on real clusters.

When the stack serves the model (`serveKind: deployment` or `kserve`), the server's pods then run
here too, behind a local stand-in for their Service (`infra.offline.local.serve`): once Ready, the whole
MNIST test set is sent to it over HTTP, its accuracy is checked against the trainer's own metrics.json,
and the server is stopped with SIGTERM (kept running with --keep-serving).

Exit codes: 0 the job succeeded (and the server, if any, served the trainer's accuracy); 1 a workload
failed (the seed Job or the training job), the server never got Ready or served other predictions than
the trainer's, or the API server would refuse its pods; 2 bad stack config, unknown stack, a job that
cannot run locally or a local S3 stand-in's bucket that could not be filled with MNIST; 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from infra.offline.cluster import cluster_view
from infra.offline.local.dns import COMMANDS as DNS_COMMANDS
from infra.offline.local.plan import JobPlan, LocalPod, PlanError, plan, workloads
from infra.offline.local.s3 import LocalS3Error, local_s3
from infra.offline.local.serve import (
    LocalDeployment,
    ServeFailed,
    evaluate,
    find_test_set,
    load_test_set,
    local_service,
    plan_servers,
    server_pods,
)
from infra.offline.manifest import Rendering, render
from infra.offline.stackconfig import ROOT, SECRET_PLACEHOLDER, StackNotFound, load_stack
from infra.program.settings import Settings

EXIT_FAILED, EXIT_CONFIG, EXIT_INTERRUPTED = 1, 2, 130
SHARED_MNIST = ROOT.parent / "shared" / "data" / "mnist"


@dataclass
class JobResult:
    succeeded: bool
    reason: str
    seconds: float


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stack_secret_resolver(rendering: Rendering) -> Any:
    """Secret references resolve to the stack's own Secret values, else to the local environment."""
    known: dict[tuple[str, str], str] = {}
    for reg in rendering.registrations:
        if reg.type == "kubernetes:core/v1:Secret":
            data = reg.inputs.get("stringData", {})
            data = data.get("value", data) if isinstance(data, dict) else {}
            for key, value in data.items():
                if value != SECRET_PLACEHOLDER:
                    known[(reg.inputs["metadata"]["name"], key)] = value

    def resolve(name: str, key: str) -> str:
        if (name, key) in known:
            return known[(name, key)]
        if key in os.environ:
            return os.environ[key]
        raise PlanError(f"Secret {name} key {key}: not known locally; export {key} to run this stack here")

    return resolve


_OWN_ERROR = re.compile(r"^(?:python -m )?(?:trainer[\w.]*|launch)(?::| error:)")
_LAUNCH_SUMMARY = re.compile(r"^launch: worker rank \d+ failed")


def root_cause(lines: Iterable[str]) -> str:
    """The trainer's or launcher's own one-line error, else the last line the pod printed."""
    lines = [line.strip() for line in lines if line.strip()]
    own = [line for line in lines if _OWN_ERROR.match(line) and not _LAUNCH_SUMMARY.match(line)]
    return (own or lines or [""])[-1]


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (from `ps`, which Linux and macOS both have)."""
    listing = subprocess.run(["ps", "-A", "-o", "pid=,ppid="], capture_output=True, text=True).stdout
    children: dict[int, list[int]] = defaultdict(list)
    for line in listing.splitlines():
        child, parent = (int(x) for x in line.split())
        children[parent].append(child)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class PodRun:
    """One pod's run: its init containers in order, each to a successful end, then its main container,
    as the kubelet runs them. `poll()` is None while it runs, else the exit code of the container that
    ended it (an init container's failure ends the pod). Its DNS names resolve while the main runs."""

    def __init__(self, pod: LocalPod, supervisor: Supervisor) -> None:
        self.pod = pod
        self.supervisor = supervisor
        self.proc: subprocess.Popen[str] | None = None
        self.returncode: int | None = None
        self.stopped = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        pod, sup = self.pod, self.supervisor
        for init in pod.init:
            code = self._container(init.argv, sup.init_env(init.env), f"{pod.name}/{init.name}")
            if code != 0:
                sup.say(f"[local] pod {pod.name}: init container {init.name} exited with {code}")
                self.returncode = code
                return
        sup.publish(pod, True)
        try:
            self.returncode = self._container(pod.argv, pod.env, pod.name)
        finally:
            sup.publish(pod, False)

    def _container(self, argv: list[str], env: dict[str, str], prefix: str) -> int:
        if self.stopped:
            return 137
        self.proc = subprocess.Popen(
            argv,
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.supervisor.tails[self.pod.name].append(line.rstrip())
            self.supervisor.say(f"[{prefix}] {line.rstrip()}")
        code = self.proc.wait()
        return code if code >= 0 else 128 - code

    def poll(self) -> int | None:
        return None if self.thread.is_alive() else self.returncode

    def kill(self, sig: int) -> None:
        """Signal every process of the pod, as a container runtime does. torchrun starts its workers in
        sessions of their own, so the pod's process group alone would leave them running."""
        self.stopped = True
        if self.proc is None:
            return
        for pid in [self.proc.pid, *descendants(self.proc.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def wait(self, timeout: float) -> None:
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise subprocess.TimeoutExpired("pod", timeout)


class Supervisor:
    """Runs the planned pods, streams their output prefixed by pod name, applies restart rules."""

    def __init__(self, job: JobPlan, out: TextIO = sys.stdout, restart_delay: float = 10.0) -> None:
        self.job = job
        self.out = out
        # Like the Job controller's pod backoff (10 s, doubling): a failed pod comes back only after
        # its peers have seen the failure too, so the new one never joins the old rendezvous.
        self.restart_delay = restart_delay
        self.lock = threading.Lock()
        self.procs: dict[str, PodRun] = {}
        self.tails: dict[str, deque[str]] = defaultdict(lambda: deque(maxlen=80))
        self.dns_dir = job.dns_dir or Path(tempfile.mkdtemp(prefix="local-dns-"))
        self.dns_dir.mkdir(parents=True, exist_ok=True)
        for stale in self.dns_dir.iterdir():
            stale.unlink()
        self.bin_dir = self.dns_dir.parent / "bin"
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        for command in DNS_COMMANDS:  # the init containers' resolvers, answered from dns_dir
            shim = self.bin_dir / command
            shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m infra.offline.local.dns {command} "$@"\n')
            shim.chmod(0o755)

    def say(self, line: str) -> None:
        with self.lock:
            print(line, file=self.out, flush=True)

    def init_env(self, env: dict[str, str]) -> dict[str, str]:
        """An init container's env here: the host's tools (the image's stand-in), our `getent` and
        `nslookup` first."""
        return {
            **env,
            "PATH": f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            "LOCAL_DNS_DIR": str(self.dns_dir),
            "PYTHONPATH": str(ROOT),
        }

    def publish(self, pod: LocalPod, running: bool) -> None:
        """Cluster DNS answers a pod's names while it runs (headless Services publish running pods)."""
        for name in pod.dns_names:
            entry = self.dns_dir / name
            if running:
                entry.touch()
            else:
                entry.unlink(missing_ok=True)

    def start(self, pod: LocalPod) -> None:
        self.procs[pod.name] = PodRun(pod, self)

    def kill_pod(self, name: str, sig: int = signal.SIGKILL) -> None:
        self.procs[name].kill(sig)

    def stop_all(self) -> None:
        for run in self.procs.values():
            if run.poll() is None:
                run.kill(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for run in self.procs.values():
            try:
                run.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                run.kill(signal.SIGKILL)
                run.wait(timeout=30)

    def _failure(self, pod: LocalPod, code: int, why: str) -> str:
        return f"pod {pod.name} exited with {code} ({why}): {root_cause(self.tails[pod.name])}"

    def run(self, timeout: float) -> JobResult:
        job, rule = self.job, self.job.restart
        started = time.monotonic()
        limit = min(timeout, job.active_deadline or timeout)
        restarts: dict[str, int] = defaultdict(int)
        succeeded: set[str] = set()
        waiting: dict[str, float] = {}  # pod -> when it starts again
        jobset_restarts = 0  # TrainJob: restarts of the whole JobSet
        for pod in job.pods:
            self.start(pod)
        try:
            while True:
                now = time.monotonic()
                if now - started > limit:
                    return JobResult(False, f"deadline of {limit:.0f}s exceeded", now - started)
                for pod in job.pods:
                    if pod.name in waiting:
                        if now >= waiting[pod.name]:
                            del waiting[pod.name]
                            self.start(pod)
                        continue
                    run = self.procs[pod.name]
                    code = run.poll()
                    if pod.name in succeeded or code is None:
                        continue
                    if code == 0:
                        succeeded.add(pod.name)
                        if (job.kind == "pytorchjob" and pod.index == 0) or len(succeeded) == len(job.pods):
                            return self._finish(succeeded, started)
                        continue
                    if rule.fails_job_at_once(code):
                        return JobResult(
                            False,
                            self._failure(pod, code, "no retry for this exit code"),
                            time.monotonic() - started,
                        )
                    if job.kind == "trainjob" and sum(restarts.values()) >= rule.job_backoff_limit:
                        # Its node Job has failed: JobSet recreates every Job (every pod), or fails.
                        if rule.exhausted(0, jobset_restarts):
                            return JobResult(
                                False,
                                self._failure(pod, code, "JobSet maxRestarts reached"),
                                time.monotonic() - started,
                            )
                        jobset_restarts += 1
                        self.say(
                            f"[local] pod {pod.name} exited with {code}: its Job failed; JobSet restarts "
                            f"every pod in {self.restart_delay:.0f}s ({jobset_restarts}/{rule.backoff_limit} "
                            "restarts of the JobSet)"
                        )
                        self.stop_all()  # the old Jobs are deleted, their pods with them
                        restarts.clear()
                        succeeded.clear()
                        waiting = dict.fromkeys((p.name for p in job.pods), now + self.restart_delay)
                        break
                    if job.kind != "trainjob" and rule.exhausted(restarts[pod.name], sum(restarts.values())):
                        return JobResult(
                            False,
                            self._failure(pod, code, "backoff limit reached"),
                            time.monotonic() - started,
                        )
                    if job.kind == "trainjob":
                        count = (
                            f"{sum(restarts.values()) + 1}/{rule.job_backoff_limit} pod retries of its Job"
                        )
                    elif job.kind == "indexed-job":
                        count = f"{restarts[pod.name] + 1}/{rule.backoff_limit}"
                    elif job.kind == "job":
                        count = f"{sum(restarts.values()) + 1}/{rule.backoff_limit} retries of the Job"
                    elif rule.policy == "ExitCode":
                        count = "a new pod: the operator does not count it"
                    else:
                        count = (
                            f"{sum(restarts.values()) + 1}/{rule.backoff_limit} container restarts of the job"
                        )
                    restarts[pod.name] += 1
                    delay = self.restart_delay * 2 ** (restarts[pod.name] - 1)
                    self.say(
                        f"[local] pod {pod.name} exited with {code}; restarting in {delay:.0f}s ({count})"
                    )
                    waiting[pod.name] = now + delay
                time.sleep(0.2)
        finally:
            self.stop_all()

    def _finish(self, succeeded: set[str], started: float) -> JobResult:
        """The job succeeded (all indexes, or the Master): give the others a moment to exit."""
        grace = time.monotonic() + 30
        while time.monotonic() < grace and any(r.poll() is None for r in self.procs.values()):
            time.sleep(0.2)
        return JobResult(True, "succeeded", time.monotonic() - started)


def report(job: JobPlan, result: JobResult, out: TextIO) -> None:
    status = "Succeeded" if result.succeeded else "Failed"
    line = f"[local] job {job.job_name} {status} after {result.seconds:.1f}s"
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


class PodsRefused(Exception):
    """The API server would refuse the job's pods: one line each, in its wording."""

    def __init__(self, job: str, lines: list[str]) -> None:
        self.lines = lines
        super().__init__(f"job {job} cannot start: its pods are refused at admission")


def dependency_order(rendering: Rendering) -> dict[str, int]:
    """Workload object name -> position, so that a workload comes after those it depends on."""
    regs = {r.name: r for r in rendering.registrations if r.custom}

    def depth(name: str, seen: frozenset[str] = frozenset()) -> int:
        deps = [d for d in regs[name].dependencies if d in regs and d not in seen]
        return 1 + max((depth(d, seen | {name}) for d in deps), default=0)

    return {
        r.inputs["metadata"]["name"]: depth(r.name)
        for r in regs.values()
        if r.type
        in (
            "kubernetes:batch/v1:Job",
            "kubernetes:kubeflow.org/v1:PyTorchJob",
            "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob",
        )
    }


def plan_workloads(rendering: Rendering, root: Path, overrides: dict[str, str]) -> list[JobPlan]:
    """Every workload of the stack, in dependency order, planned from its effective pods once
    admission accepts all of them."""
    view = cluster_view(rendering.objects, rendering.settings)
    ordered = workloads(rendering.objects, dependency_order(rendering))
    if view.admission.refusals:
        raise PodsRefused(ordered[-1]["metadata"]["name"], view.admission.refusals)
    stack_secret = stack_secret_resolver(rendering)

    def resolver(name: str, key: str) -> str:
        # An override (a local stand-in's keys, or --env) replaces the variable the Secret would set.
        return overrides[key] if key in overrides else stack_secret(name, key)

    return [
        plan(w, view.admission.pods, root, free_port(), resolver, overrides, rendering.objects)
        for w in ordered
    ]


def plan_stack(rendering: Rendering, root: Path, overrides: dict[str, str]) -> JobPlan:
    """The stack's training job (its last workload), planned."""
    return plan_workloads(rendering, root, overrides)[-1]


def uses_stack_s3(settings: Settings) -> bool:
    return bool(settings.minio_endpoint) and (
        settings.job_data_source == "s3"
        or (settings.seeds_data and settings.seed_source == "s3")
        or settings.job_model_export
    )


@contextlib.contextmanager
def local_services(
    rendering: Rendering, root: Path, overrides: dict[str, str], out: TextIO
) -> Iterator[dict[str, str]]:
    """Stand-ins for the cluster services the stack uses, as env overrides for its pods; says so."""
    settings = rendering.settings
    if not uses_stack_s3(settings) or "AWS_ENDPOINT_URL" in overrides:
        yield {}
        return
    try:
        with local_s3(root / "s3") as s3:
            scheme = "https" if settings.minio_tls else "http"
            print(
                f"[local] S3 endpoint {scheme}://{settings.minio_endpoint} is a local stand-in here: "
                f"SeaweedFS at {s3.endpoint} (data in {root / 's3'}), with keys made for this run in place "
                "of the stack's Secret",
                file=out,
                flush=True,
            )
            if settings.seeds_data and settings.seed_source == "s3" or settings.job_data_source == "s3":
                fill_bucket(settings, s3.env(), out)
            yield s3.env()
    except LocalS3Error as exc:
        raise PlanError(f"the stack's S3 endpoint needs a local stand-in: {exc}") from None


def fill_bucket(settings: Settings, env: dict[str, str], out: TextIO) -> None:
    """Put MNIST in the stand-in's bucket once (what someone does for the cluster's MinIO), from
    ../shared/data/mnist when present, else from the stack's HTTPS mirrors."""
    target = f"s3://{settings.minio_bucket}/{settings.minio_prefix}".rstrip("/")
    if SHARED_MNIST.is_dir():
        source = [f"--from={SHARED_MNIST}"]
    else:
        source = [f"--mirror={url}" for url in settings.seed_mirrors]
    seeded = subprocess.run(
        [sys.executable, "-m", "trainer.seed", *source, f"--to={target}"],
        cwd=ROOT,
        env={**os.environ, **env, "AWS_REGION": settings.minio_region},
        capture_output=True,
        text=True,
    )
    for line in (seeded.stdout + seeded.stderr).splitlines():
        print(f"[local] {line}", file=out, flush=True)
    if seeded.returncode != 0:
        raise PlanError(
            f"could not fill the local S3 bucket {target} (trainer.seed exited {seeded.returncode})"
        )


def visible_gpus() -> int:
    """CUDA devices this project's torch sees (asked in a subprocess: the scheduler never imports torch)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return int(probe.stdout.strip()) if probe.returncode == 0 and probe.stdout.strip().isdigit() else 0


def check_gpus(stack: str, settings: Settings) -> None:
    """A GPU stack runs here only with the GPUs it asks for (else --cpu): one line, before any work."""
    need = settings.job_nodes * settings.job_gpus_per_node
    if need == 0 and settings.backend != "nccl":
        return
    have = visible_gpus()
    if have < max(need, 1):
        raise PlanError(
            f"stack {stack} needs {need} GPUs ({settings.job_nodes} nodes x {settings.job_gpus_per_node}, "
            f"backend {settings.backend}) and this machine has {have}: add --cpu for a wiring check on CPU "
            "with gloo (same nodes and processes, no GPUs)"
        )


def on_cpu(job: JobPlan, settings: Settings, out: TextIO) -> None:
    """--cpu: the same pods and processes, on CPU with gloo and no GPU visible; says so."""
    for pod in job.pods:
        pod.argv = ["--backend=gloo" if a.startswith("--backend=") else a for a in pod.argv]
        pod.env["CUDA_VISIBLE_DEVICES"] = ""
    print(
        f"[local] --cpu: a wiring check on CPU with gloo, not a GPU run: {settings.job_nodes} nodes x "
        f"{settings.job_procs_per_node} processes, no GPUs (the stack asks for "
        f"{settings.job_gpus_per_node} per node, backend {settings.backend})",
        file=out,
        flush=True,
    )


def run_stack(
    stack_name: str,
    workdir: Path,
    timeout: float,
    overrides: dict[str, str],
    out: TextIO = sys.stdout,
    cpu: bool = False,
    serving: ServeOptions | None = None,
) -> tuple[JobPlan, JobResult]:
    """Every workload of the stack, in dependency order, each to its end; stops at the first failure.
    Then the model server, if the stack has one."""
    rendering = render(load_stack(stack_name))
    if not cpu:
        check_gpus(stack_name, rendering.settings)
    return run_rendering(rendering, workdir / stack_name, timeout, overrides, out, cpu, serving)


def run_rendering(
    rendering: Rendering,
    root: Path,
    timeout: float,
    overrides: dict[str, str],
    out: TextIO = sys.stdout,
    cpu: bool = False,
    serving: ServeOptions | None = None,
) -> tuple[JobPlan, JobResult]:
    """`run_stack` for a rendering already made (tests render edited configs through here). Raises
    ServeFailed when the job succeeded but its server did not serve the trainer's accuracy."""
    view = cluster_view(rendering.objects, rendering.settings)
    if view.admission.refusals:  # admission first: a refused pod starts nothing
        last = workloads(rendering.objects, dependency_order(rendering))[-1]
        raise PodsRefused(last["metadata"]["name"], view.admission.refusals)
    with local_services(rendering, root, overrides, out) as service_env:
        plans = plan_workloads(rendering, root, {**service_env, **overrides})
        if cpu:
            on_cpu(plans[-1], rendering.settings, out)
        for job in plans:
            job, result = run_plan(job, timeout, out)
            if not result.succeeded:
                break
        if result.succeeded and server_pods(view.admission.pods):
            serve_model(rendering, view.admission.pods, root, {**service_env, **overrides}, job, out, serving)
    return job, result


@dataclass
class ServeOptions:
    port: int | None = None  # the local Service's port (None: the stack's servePort; 0: a free one)
    keep_serving: bool = False  # leave the server running until Ctrl-C
    batch: int = 0  # images per request (0: the stack's serveMaxBatch)
    ready_timeout: float = 0  # seconds for each pod to get Ready (0: the stack's serveWaitTimeoutSeconds)


def serve_model(
    rendering: Rendering,
    pods: list[Any],
    root: Path,
    overrides: dict[str, str],
    job: JobPlan,
    out: TextIO,
    options: ServeOptions | None = None,
) -> None:
    """The stack's server pods after the job's success, as the cluster runs them, behind a local Service;
    the whole test set through it; its accuracy must be the trainer's own (else ServeFailed)."""
    settings, options = rendering.settings, options or ServeOptions()
    stack_secret = stack_secret_resolver(rendering)

    def resolver(name: str, key: str) -> str:
        return overrides[key] if key in overrides else stack_secret(name, key)

    plans = plan_servers(pods, root, resolver, overrides)
    port = settings.serve_port if options.port is None else options.port
    owner = server_pods(pods)[0].owner.replace("/", " ")
    outputs = rendering.outputs
    with local_service(port, chosen=options.port is not None, out=out) as service:
        print(
            f"[local] {owner}: {len(plans)} local server process(es) stand in "
            f"for its pods, and a local proxy at {service.url} for its Service "
            f"({outputs.get('serveUrl', '')})",
            file=out,
            flush=True,
        )
        deployment = LocalDeployment(
            service, out, ROOT, options.ready_timeout or settings.serve_wait_timeout_seconds
        )
        try:
            deployment.start(plans)
            model = next(
                (a.split("=", 1)[1] for a in plans[0].argv if a.startswith("--model-name=")), "mnist"
            )
            images, labels = load_test_set(find_test_set(root / "pvc", SHARED_MNIST))
            batch = options.batch or settings.serve_max_batch
            result = evaluate(service.url, model, images, labels, batch)
            metrics = json.loads((job.output_dir / "metrics.json").read_text()) if job.output_dir else {}
            trained = metrics.get("final_test_accuracy")
            figure = f"{100 * trained:.2f}%" if isinstance(trained, float) else "missing"
            print(
                f"[local] served accuracy {100 * result.accuracy:.2f}% ({result.correct}/{result.total} test "
                f"images over HTTP, {len(result.latencies)} requests of up to {batch}); the trainer's "
                f"metrics.json final_test_accuracy {figure}",
                file=out,
                flush=True,
            )
            print(
                f"[local] latency per request p50 {1000 * result.percentile(0.5):.0f} ms, p99 "
                f"{1000 * result.percentile(0.99):.0f} ms; {result.total / result.seconds:.0f} images/s",
                file=out,
                flush=True,
            )
            if not isinstance(trained, float) or round(trained * result.total) != result.correct:
                raise ServeFailed(
                    f"served accuracy {result.correct}/{result.total} differs from the trainer's "
                    f"final_test_accuracy {trained} in {job.output_dir}/metrics.json"
                )
            body = (
                """'import json; print(json.dumps({"inputs": [{"name": "images", "shape": [1, 28, 28], """
                """"datatype": "UINT8", "data": [0] * 784}]}))'"""
            )
            print(
                f"[local] query it by hand: curl -s {service.url}/v2/models/{model}/ready; "
                f"python3 -c {body} | curl -s {service.url}/v2/models/{model}/infer "
                "-H 'Content-Type: application/json' -d @-",
                file=out,
                flush=True,
            )
            print(f"[local] in the cluster: {outputs.get('serveUrl', '')}", file=out, flush=True)
            if options.keep_serving:
                print(f"[local] --keep-serving: serving at {service.url} until Ctrl-C", file=out, flush=True)
                with contextlib.suppress(KeyboardInterrupt):
                    while True:
                        time.sleep(3600)
        finally:
            deployment.stop()


def run_plan(job: JobPlan, timeout: float, out: TextIO = sys.stdout) -> tuple[JobPlan, JobResult]:
    """Runs an already planned workload (tests plan edited renderings through here)."""
    for pod in job.pods:
        init = ", ".join(c.name for c in pod.init)
        line = f"[local] {job.kind} {job.job_name}: pod {pod.name}, node rank {pod.index}"
        if init:
            line += f"; init containers {init} first (their DNS lookups: a local stand-in for cluster DNS)"
        print(line, file=out, flush=True)
    result = Supervisor(job, out).run(timeout)
    report(job, result, out)
    return job, result


def main(argv: list[str] | None = None) -> int:
    from infra.program.checks import ConfigError

    parser = argparse.ArgumentParser(
        prog="python -m infra.offline.local", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--stack", required=True, help="stack name: stacks/Pulumi.<stack>.yaml")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=ROOT / ".local",
        help="where volumes live: <workdir>/<stack>/pvc/<claim>/ (default: .local)",
    )
    parser.add_argument(
        "--timeout", type=float, default=1800, help="seconds before the job is failed (default: 1800)"
    )
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="run a GPU stack's job on CPU with gloo and no GPUs, same nodes and processes (a wiring check)",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override an env var in every pod (e.g. AWS_ENDPOINT_URL for a local S3)",
    )
    parser.add_argument(
        "--serve-port",
        type=int,
        default=None,
        help="local port of the stand-in for the server's Service (default: the stack's servePort; 0: any)",
    )
    parser.add_argument(
        "--keep-serving",
        action="store_true",
        help="leave the model server running after the served accuracy is checked, until Ctrl-C",
    )
    args = parser.parse_args(argv)
    bad = [e for e in args.env if "=" not in e]
    if bad:
        parser.error(f"--env {bad[0]!r}: expected KEY=VALUE")
    overrides = dict(e.split("=", 1) for e in args.env)
    try:
        serving = ServeOptions(port=args.serve_port, keep_serving=args.keep_serving)
        _, result = run_stack(
            args.stack, args.workdir, args.timeout, overrides, cpu=args.cpu, serving=serving
        )
    except ServeFailed as exc:
        print(f"local: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except (ConfigError, StackNotFound, PlanError) as exc:
        print(f"local: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except PodsRefused as exc:
        print(
            "\n".join([f"local: {exc}", *(f"local: refused {line}" for line in exc.lines)]), file=sys.stderr
        )
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return 0 if result.succeeded else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
