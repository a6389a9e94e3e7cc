"""The local pods' processes: each pod's init containers and then its main container, as the kubelet
runs them, their output streamed prefixed by pod name, their DNS names published while they run, and
every process of a pod signalled when it is killed or stopped.

`Supervisor.run` starts a planned job's pods and applies what its controller decides when one ends
(`infra.local.controllers`): a restart after a back-off, a restart of every pod, the job's
success or failure. With preemptions (`infra.local.preempt`) it also preempts a pod at a step
or time, as a node's shutdown does.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from infra.local.controllers import (
    Decision,
    FailJob,
    RestartJobSet,
    RestartPod,
    Restarts,
    after_disruption,
    after_failure,
    backoff,
    job_succeeded,
)
from infra.local.dns import COMMANDS as DNS_COMMANDS
from infra.local.plan import JobPlan, LocalPod
from infra.local.preempt import Preempter, Preempting, Preemption
from infra.stackconfig import ROOT


@dataclass
class JobResult:
    succeeded: bool
    reason: str
    seconds: float
    restarts: int = 0  # pods started again after a failure (each counted as its controller counts)
    disrupted: int = 0  # pods started again after a preemption


TICK_S = 0.2  # the supervisor's longest wait between two looks at its pods
# A container whose command cannot be started (no such executable, say) ends with the kubelet's
# StartError and exit code 128 ("failed to create containerd task: ... executable file not found").
START_ERROR = 128
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
        # Held while a container's process starts: a signal sent meanwhile waits for the process and
        # reaches it, as it would a container the runtime is starting, instead of finding no process.
        self.starting = threading.Lock()
        self.ended = False  # set once returncode is final, before the supervisor hears of it
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self._containers()
        except OSError as error:  # its command could not be started: the kubelet's StartError, exit 128
            self.supervisor.say(f"[local] pod {self.pod.name}: its container could not start: {error}")
            self.returncode = START_ERROR
        finally:
            self.ended = True
            self.supervisor.changed.set()  # the supervisor acts on the end at once, not at its next tick

    def _containers(self) -> None:
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
        with self.starting:
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
            self.supervisor.observe(line)
        code = self.proc.wait()
        return code if code >= 0 else 128 - code

    def poll(self) -> int | None:
        return self.returncode if self.ended or not self.thread.is_alive() else None

    def kill(self, sig: int) -> None:
        """Signal every process of the pod, as a container runtime does. torchrun starts its workers in
        sessions of their own, so the pod's process group alone would leave them running."""
        with self.starting:
            self.stopped = True
        if self.proc is None:
            return
        for pid in [self.proc.pid, *descendants(self.proc.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def terminate(self) -> None:
        """SIGTERM to the container's own process alone, as the kubelet's stop does (the runtime signals
        the container's PID 1; what it started hears of it from there): here the launcher, which
        passes it to torchrun's workers."""
        with self.starting:
            self.stopped = True
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGTERM)

    def wait(self, timeout: float) -> None:
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise subprocess.TimeoutExpired("pod", timeout)


class Supervisor:
    """Runs the planned pods, streams their output prefixed by pod name, applies restart rules."""

    def __init__(
        self,
        job: JobPlan,
        out: TextIO = sys.stdout,
        restart_delay: float = 10.0,
        preemptions: tuple[Preemption, ...] = (),
    ) -> None:
        self.job = job
        self.out = out
        # Like the Job controller's pod backoff (10 s, doubling): a failed pod comes back only after
        # its peers have seen the failure too, so the new one never joins the old rendezvous.
        self.restart_delay = restart_delay
        self.lock = threading.Lock()
        # Set by a pod's thread when the pod ends: the loop waits on it for at most TICK_S, so a pod's
        # end is acted on when it happens and a back-off ends when it is due.
        self.changed = threading.Event()
        self.procs: dict[str, PodRun] = {}
        self.tails: dict[str, deque[str]] = defaultdict(lambda: deque(maxlen=80))
        self.restarts = Restarts()
        self.succeeded: set[str] = set()
        self.waiting: dict[str, float] = {}  # pod -> when it starts again
        self.preempter = Preempter(preemptions)
        self.preempting: dict[str, Preempting] = {}
        self.started = time.monotonic()
        self.dns_dir = job.dns_dir or Path(tempfile.mkdtemp(prefix="local-dns-"))
        self.dns_dir.mkdir(parents=True, exist_ok=True)
        for stale in self.dns_dir.iterdir():
            stale.unlink()
        self.bin_dir = self.dns_dir.parent / "bin"
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        for command in DNS_COMMANDS:  # the init containers' resolvers, answered from dns_dir
            shim = self.bin_dir / command
            shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m infra.local.dns {command} "$@"\n')
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

    def observe(self, line: str) -> None:
        """A pod's output line (from its reader thread): a progress step may make a preemption due."""
        with self.lock:
            self.preempter.observe(line)
        self.preempt_due()

    def preempt_due(self) -> None:
        """Preempts each pod whose preemption is due and that runs; the others wait for their pod."""
        with self.lock:
            due = self.preempter.due(time.monotonic() - self.started)
            for preemption in due:
                run = self.procs.get(preemption.pod)
                if run is None or run.poll() is not None or preemption.pod in self.preempting:
                    self.preempter.put_back(preemption)
                    continue
                grace = run.pod.grace_seconds
                # Noted before the signal: the main loop may see the pod end before this thread goes on.
                self.preempting[preemption.pod] = Preempting(
                    preemption, self.preempter.step, time.monotonic(), grace
                )
                run.terminate()
                print(
                    f"[local] preempting pod {preemption.pod} (--preempt {preemption}, at step "
                    f"{self.preempter.step}): SIGTERM to its process, SIGKILL to what is left after its "
                    f"terminationGracePeriodSeconds ({grace:.0f}s)",
                    file=self.out,
                    flush=True,
                )

    def _grace_over(self, now: float) -> None:
        """SIGKILL to every process of a preempted pod still running after its grace period."""
        for name, entry in list(self.preempting.items()):
            if not entry.killed and now - entry.sent > entry.grace and self.procs[name].poll() is None:
                entry.killed = True
                self.say(f"[local] pod {name}: still running {entry.grace:.0f}s after SIGTERM: SIGKILL")
                self.procs[name].kill(signal.SIGKILL)

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
        """Every pod of the job, until the job succeeds, fails or runs out of time; then all stopped."""
        started = self.started = time.monotonic()
        limit = min(timeout, self.job.active_deadline or timeout)
        self.restarts, self.succeeded, self.waiting = Restarts(), set(), {}
        for pod in self.job.pods:
            self.start(pod)
        try:
            while True:
                self.changed.clear()
                now = time.monotonic()
                if now - started > limit:
                    return self._result(False, f"deadline of {limit:.0f}s exceeded", started)
                self.preempt_due()
                self._grace_over(now)
                result = self._step(now, started)
                if result is not None:
                    return result
                self.changed.wait(self._tick(time.monotonic()))
        finally:
            self.stop_all()

    def _step(self, now: float, started: float) -> JobResult | None:
        """One pass over the pods: start those whose back-off is over, act on those that ended; the
        job's result once it has one."""
        for pod in self.job.pods:
            if pod.name in self.waiting:
                if now >= self.waiting[pod.name]:
                    del self.waiting[pod.name]
                    self.start(pod)
                continue
            code = self.procs[pod.name].poll()
            if pod.name in self.succeeded or code is None:
                continue
            preempted = self.preempting.pop(pod.name, None)
            if code == 0:
                self.succeeded.add(pod.name)
                if job_succeeded(self.job, pod, self.succeeded):
                    return self._finish(started)
                continue
            ended = f"pod {pod.name} exited with {code}"
            if preempted is not None:
                decision: Decision = after_disruption(self.job, pod, code, self.restarts)
                ended = preempted.ended(code, now)
                if not isinstance(decision, RestartPod):
                    self.say(f"[local] {ended}")
            else:
                decision = after_failure(self.job, pod, code, self.restarts)
            if isinstance(decision, FailJob):
                return self._result(False, self._failure(pod, code, decision.why), started)
            if isinstance(decision, RestartJobSet):
                self._restart_jobset(pod, code, now)
                return None
            self._restart_pod(pod, ended, decision, now)
        return None

    def _restart_pod(self, pod: LocalPod, ended: str, decision: RestartPod, now: float) -> None:
        """Starts `pod` again after its delay; one line: how it `ended`, when it restarts, counted how."""
        if decision.counted:
            self.restarts.pods += 1
            self.restarts.per_pod[pod.name] += 1
            delay = backoff(self.restart_delay, self.restarts.per_pod[pod.name])
        else:
            self.restarts.disrupted += 1
            delay = self.restart_delay  # the peers see the lost rank first; no back-off grows
        self.say(f"[local] {ended}; restarting in {delay:.0f}s ({decision.count})")
        self.waiting[pod.name] = now + delay

    def _restart_jobset(self, pod: LocalPod, code: int, now: float) -> None:
        """The old Jobs are deleted, their pods with them; every pod starts again after the delay."""
        self.restarts.jobset += 1
        count = f"{self.restarts.jobset}/{self.job.restart.backoff_limit}"
        self.say(
            f"[local] pod {pod.name} exited with {code}: its Job failed; JobSet restarts "
            f"every pod in {self.restart_delay:.0f}s ({count} restarts of the JobSet)"
        )
        self.stop_all()
        for name, entry in list(self.preempting.items()):  # ended by the restart before it was seen
            ended = entry.ended(self.procs[name].poll() or 137, now)
            self.say(f"[local] {ended}; restarted with every pod")
        # Each pod once: one already waiting for its own restart, or preempted, is not restarted twice.
        self.restarts.pods += sum(
            p.name not in self.waiting and p.name not in self.preempting for p in self.job.pods
        )
        self.restarts.disrupted += len(self.preempting)
        self.preempting.clear()
        self.restarts.per_pod.clear()
        self.succeeded.clear()
        self.waiting = dict.fromkeys((p.name for p in self.job.pods), now + self.restart_delay)

    def _tick(self, now: float) -> float:
        """How long the loop may wait for a pod to end: TICK_S (what preemptions and grace periods
        are checked by), or less where a pod's back-off ends sooner."""
        due = min(self.waiting.values(), default=now + TICK_S)
        return max(0.0, min(TICK_S, due - now))

    def _finish(self, started: float) -> JobResult:
        """The job succeeded (all indexes, or the Master): give the others a moment to exit."""
        grace = time.monotonic() + 30
        while time.monotonic() < grace:
            self.changed.clear()  # before the look: a pod ending after it still wakes the wait
            if all(r.poll() is not None for r in self.procs.values()):
                break
            self.changed.wait(TICK_S)
        return self._result(True, "succeeded", started)

    def _result(self, succeeded: bool, reason: str, started: float) -> JobResult:
        elapsed = time.monotonic() - started
        return JobResult(succeeded, reason, elapsed, self.restarts.pods, self.restarts.disrupted)
