"""A rehearsal of a spot node's preemption (`--preempt POD@STEP` or `POD@SECONDSs`): at the chosen
training step or time the scheduler does to the pod what the kubelet does on a node's shutdown notice
(SIGTERM to the container's process, SIGKILL to whatever is left after the pod's
terminationGracePeriodSeconds), marks it disrupted (the DisruptionTarget condition) and lets the job
kind's controller bring it back (`infra.local.controllers.after_disruption`).

The step is read from the trainer's own progress lines (`trainer: progress step S/T ...`, rank 0's,
one per `--log-every` steps with `--progress-seconds=0`): the first line with a step >= S any pod of
the job prints. Deciding only: `infra.local.supervisor` sends the signals.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PROGRESS = re.compile(r"trainer: progress step\s+(\d+)/\d+")
_SPEC = re.compile(r"^(?P<pod>[a-z0-9]([-a-z0-9.]*[a-z0-9])?)@(?P<at>\d+(?:\.\d+)?)(?P<unit>s?)$")


@dataclass(frozen=True)
class Preemption:
    """Preempt `pod` once: at the first progress line with step >= `step`, or `seconds` after the job
    started."""

    pod: str
    step: int | None = None
    seconds: float | None = None

    def __str__(self) -> str:
        return f"{self.pod}@{self.step}" if self.step is not None else f"{self.pod}@{self.seconds:g}s"


def parse_preemption(text: str) -> Preemption:
    """`POD@STEP` (a training step, at least 1) or `POD@SECONDSs` (seconds after the job started);
    ValueError with what is allowed."""
    match = _SPEC.match(text)
    if match is None:
        raise ValueError(
            f"{text!r}: expected POD@STEP (e.g. mnist-r1-1@30) or POD@SECONDSs (e.g. mnist-r1-1@20s)"
        )
    at = float(match["at"])
    if match["unit"]:
        return Preemption(match["pod"], seconds=at)
    if not at.is_integer() or at < 1:
        raise ValueError(f"{text!r}: the step must be a whole number of at least 1 (or SECONDS with an 's')")
    return Preemption(match["pod"], step=int(at))


class Preempter:
    """Which preemptions are due: those whose step the job's progress lines have reached, or whose
    time since the job started has come."""

    def __init__(self, preemptions: tuple[Preemption, ...] | list[Preemption] = ()) -> None:
        self.pending = list(preemptions)
        self.step = 0

    def observe(self, line: str) -> None:
        """A line a pod printed: the newest step it reports, if it is a progress line."""
        match = PROGRESS.search(line)
        if match:
            self.step = max(self.step, int(match[1]))

    def due(self, elapsed: float) -> list[Preemption]:
        """The pending preemptions due now (taken off the list: each happens once)."""
        ready = [p for p in self.pending if self._reached(p, elapsed)]
        self.pending = [p for p in self.pending if p not in ready]
        return ready

    def _reached(self, preemption: Preemption, elapsed: float) -> bool:
        if preemption.step is not None:
            return self.step >= preemption.step
        return preemption.seconds is not None and elapsed >= preemption.seconds

    def put_back(self, preemption: Preemption) -> None:
        """A due preemption whose pod is not running now (between restarts): tried again later."""
        self.pending.append(preemption)


@dataclass
class Preempting:
    """A pod sent SIGTERM by a preemption: when, its grace period, and whether SIGKILL followed."""

    preemption: Preemption
    at_step: int
    sent: float  # time.monotonic()
    grace: float
    killed: bool = False

    def ended(self, code: int, now: float) -> str:
        """How the preempted pod ended: within its grace period, or killed after it."""
        how = (
            f"SIGKILLed after its {self.grace:.0f}s grace period"
            if self.killed
            else f"{now - self.sent:.1f}s after SIGTERM, within its {self.grace:.0f}s grace period"
        )
        pod, step = self.preemption.pod, self.at_step
        return f"pod {pod} preempted at step {step} (DisruptionTarget): exited with {code} {how}"
