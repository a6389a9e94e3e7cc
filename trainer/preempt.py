"""Stopping at SIGTERM: every rank stops at one agreed step, rank 0 checkpoints it, all exit (143/201).

How the signal reaches the ranks (torch 2.13.0, ``torch/distributed/elastic/``):

- the kubelet sends SIGTERM to the container's PID 1, ``python -m trainer.launch``, which runs
  torchrun's agent in-process. The agent's process context registers a handler for
  ``TORCHELASTIC_SIGNALS_TO_HANDLE`` (default SIGTERM, SIGINT, SIGHUP, SIGQUIT) that raises
  ``SignalException`` (``multiprocessing/api.py``: ``PContext.start``, ``_terminate_process_handler``);
- ``SimpleElasticAgent.run`` catches it and calls ``_shutdown(e.sigval, timeout=shutdown_timeout)``
  (``agent/server/api.py``), which for the local agent closes the worker processes
  (``agent/server/local_elastic_agent.py``: ``_shutdown`` -> ``PContext.close``): it sends each worker
  the same signal, SIGTERM (``-m trainer`` makes a ``SubprocessContext``, whose workers each run in a
  session of their own and get it by ``os.killpg``: ``subprocess_handler/subprocess_handler.py``),
  waits up to ``shutdown_timeout`` seconds for all of them (torchrun's ``--shutdown-timeout``, else
  ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``, else 30: ``run.py``, ``launcher/api.py``), then SIGKILLs what
  is left (``multiprocessing/api.py``: ``SubprocessContext._close``). The exception then reaches
  :mod:`trainer.launch`, which exits 128 + 15 = 143;
- on a cluster each pod's launcher is told on its own, at its own time, and a node that is not
  preempted is not told at all: its workers learn of the stop from the others, below, and exit 201
  (stopped with the job), which its agent reports as a failed worker and the launcher passes on:
  retryable, and a code the Job kinds' podFailurePolicy ignores, as the preempted pod's
  DisruptionTarget condition is, so a preemption counts against no pod's retries.

What a worker does (:func:`install` is called first thing in :func:`trainer.__main__.run_as_process`):
the handler only records the signal; nothing stops in the middle of a step, a collective or a write.
Every :data:`AGREE_EVERY` optimizer steps, after each epoch's evaluation and once after resume, the
ranks all-reduce (MAX) a one-element "stop requested" flag: a collective every rank enters at the
same step whatever it was told, so all see the same answer and stop at the same step, and none
waits in a collective for a rank that already left. Rank 0 then writes a checkpoint of that step
(:mod:`trainer.checkpoint`), all ranks pass a barrier (the file is on disk before any rank exits),
and each raises :class:`trainer.errors.PreemptedError`: exit 143 where SIGTERM was received, 201
where it was not (:class:`trainer.errors.StoppedWithPeersError`), which every job kind retries
(:mod:`trainer.errors`). The restarted run resumes at that step with the same data order and
schedule, and ends with the same model as a run never stopped.

A signal after the last agreement of the last epoch (its final steps, its evaluation, the results)
is not acted on: the run finishes, about as fast as a stop would have, and its results are written.
A rank forked from the launcher then ends of the signal at once (:func:`trainer.launch.forked_rank`):
the agent that sent it is closing the ranks and reads no result.
"""

from __future__ import annotations

import signal
import time
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported when first needed: the handler is installed before it
    import torch

    from trainer.engine import StopCheck

# Optimizer steps between two agreements: the stop lags the signal by at most this many steps (about
# 0.2 s on the 2-rank CPU run), and no work is lost (the checkpoint is of the step the ranks stop at).
# One agreement (a 4-byte gloo all-reduce between ranks already in step) took 0.16-0.41 ms on 2 CPU
# ranks (a loaded 2-core machine; bench/bench_preempt.py), against ~16 ms per step: 1-2.5% of a step
# every step, 0.1-0.25% every 10th.
AGREE_EVERY = 10
STOP_SIGNAL = signal.SIGTERM


class StopRequest:
    """Whether this process was sent SIGTERM, and when (``time.perf_counter``)."""

    def __init__(self) -> None:
        self.received_at: float | None = None

    @property
    def requested(self) -> bool:
        return self.received_at is not None

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.received_at is None:
            self.received_at = time.perf_counter()


REQUEST = StopRequest()


def install() -> None:
    """Record SIGTERM in :data:`REQUEST` instead of dying of it (the main thread only may call it)."""
    signal.signal(STOP_SIGNAL, REQUEST.on_signal)


def agreed(device: torch.device, request: StopRequest = REQUEST) -> bool:
    """Whether any rank was asked to stop: a collective, so every rank must call it at the same point.

    A single process (no process group) answers for itself.
    """
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        return request.requested
    flag = torch.tensor([1 if request.requested else 0], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def at_step(device: torch.device, request: StopRequest = REQUEST) -> StopCheck:
    """The epoch loop's stop check: agree every :data:`AGREE_EVERY` steps, else go on."""

    def check(steps_done: int) -> bool:
        return steps_done % AGREE_EVERY == 0 and agreed(device, request)

    return check
