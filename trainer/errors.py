"""Exit codes and the exceptions that map to them.

Exit codes (a Kubernetes podFailurePolicy keys on them):

====  =====================================================================
code  meaning
====  =====================================================================
0     success (also: the run had already finished; nothing left to train)
1     unexpected internal error (a bug; Python prints the traceback)
2     bad flags or usage (argparse's code; also an unexpanded ``$(VAR)``)
3     training data missing or corrupt (files absent, bad checksum, bad IDX)
4     S3 credentials missing or rejected
5     the checkpoint or output directory cannot be written by this process
      (checked before any training: a volume whose owner or mode the pod's
      uid/gid cannot write, or one mounted read-only)
143   stopped by SIGTERM (a preemption, a deleted pod): the ranks agreed on a
      step, rank 0 checkpointed it, every rank exited (143 where SIGTERM was
      received, 201 on the job's other pods); a restart resumes at
      that step and ends with the model of a run never stopped (see
      :mod:`trainer.preempt`); 128 + 15, as a shell reports death by SIGTERM
200   peer lost: a collective broke because another rank died, hung or lost
      its network (see :mod:`trainer.peers`), or the rendezvous failed; a
      restart resumes from the newest checkpoint
201   stopped with the job: another pod's ranks were sent SIGTERM (a preemption),
      and this rank stopped at the step they all agreed on, checkpointed by
      rank 0; retryable, and the Job kinds' podFailurePolicy ignores it (the
      preempted pod itself exits 143, and its DisruptionTarget condition is
      what spares it), so a preemption counts against no retry budget
205   S3 endpoint unreachable (``trainer.seed``: also no HTTPS mirror reachable)
206   master not reachable within ``--master-wait-timeout`` (launcher only)
207   model export failed: ``--export-to`` upload error other than 4 and 205
      (the run's checkpoints, model.pt and metrics.json are kept; a restart of
      the finished run retries the export alone, without training or peers)
====  =====================================================================

One rule decides what is retried, for every job kind: **retryable <=> exit code >= 128**.
1-127 are permanent (a bug, or bad input: retrying the same pod fails the same way); 128 and
above are a restart's to fix: the trainer's own transient codes (2xx) and death by a signal
(128 + N: the OOM killer's or a grace period's end SIGKILL 137, SIGABRT 134; SIGTERM 143, which
the trainer turns into a checkpoint of the step all ranks agree to stop at before it exits). The
training operator (v1.9.4, ``restartPolicy: ExitCode``) retries exactly those codes
(``pkg/util/train/train_util.go``: ``IsRetryableExitCode: exitCode >= 128``) and fails the job
at once on 1-127; the Indexed Job, the seed Job and the TrainJob's node Job get the same rule as
a podFailurePolicy ``FailJob`` on :data:`PERMANENT_EXIT_CODES` (Kubernetes
``pkg/controller/job/pod_failure_policy.go``: any code no rule matches is counted and retried).
The trainer's transient codes are 200 + n, above 192 so that no signal (Linux stops at 64,
SIGRTMAX) can give them.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import TextIO

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_DATA = 3
EXIT_S3_CREDENTIALS = 4
EXIT_OUTPUT = 5
# SIGTERM's 128 + 15, kept when the trainer handles it (trainer.preempt): retryable, as the signal is.
EXIT_PREEMPTED = 143
# >= 128 so that the training operator retries it, and outside what a signal gives: a shell and
# torchrun's launcher report death by signal N as 128 + N, and Linux signals stop at 64 (SIGRTMAX),
# so 129-192 could be read as "killed by a signal". 200 can only come from the trainer itself.
EXIT_PEER_LOST = 200
EXIT_STOPPED_WITH_PEERS = 201
EXIT_S3_UNREACHABLE = 205
EXIT_MASTER_UNREACHABLE = 206
EXIT_EXPORT = 207

# The lowest retryable code: the training operator's ExitCode rule, and ours for every job kind.
RETRYABLE_FROM = 128
BAD_INPUT_EXIT_CODES = (EXIT_USAGE, EXIT_DATA, EXIT_S3_CREDENTIALS, EXIT_OUTPUT)
# Every code a retry cannot fix: what a podFailurePolicy fails the Job on (an explicit list: the
# Job API has no range operator; 127 values, within its limit of 255).
PERMANENT_EXIT_CODES = tuple(range(1, RETRYABLE_FROM))
# The trainer's own codes for a failure that a restart fixes (a signal's 128 + N is retried too).
RETRYABLE_EXIT_CODES = (
    EXIT_PEER_LOST,
    EXIT_STOPPED_WITH_PEERS,
    EXIT_S3_UNREACHABLE,
    EXIT_MASTER_UNREACHABLE,
    EXIT_EXPORT,
)
# The codes a training Job's podFailurePolicy ignores (a new pod, counted against nothing): a pod
# stopped because another pod of the job was preempted is no more at fault than the preempted one.
IGNORED_EXIT_CODES = (EXIT_STOPPED_WITH_PEERS,)
# The retryable codes a restart does not fix while their cause lasts (an endpoint, the master or the
# export destination out of reach): once the retries run out, someone must act on them.
NEEDS_ACTION_EXIT_CODES = (EXIT_S3_UNREACHABLE, EXIT_MASTER_UNREACHABLE, EXIT_EXPORT)


def is_retryable(code: int) -> bool:
    """Whether a restart may fix a pod that exited with ``code`` (see the module docstring)."""
    return code >= RETRYABLE_FROM


# Short meanings, as ``python -m trainer --help`` lists them; a test keeps this in step with EXIT_*.
EXIT_CODE_MEANINGS: dict[int, str] = {
    EXIT_OK: "ok",
    EXIT_INTERNAL: "internal error",
    EXIT_USAGE: "bad flags",
    EXIT_DATA: "data missing or corrupt",
    EXIT_S3_CREDENTIALS: "S3 credentials missing or rejected",
    EXIT_OUTPUT: "checkpoint or output directory not writable",
    EXIT_PREEMPTED: "SIGTERM: stopped at a checkpointed step; retryable",
    EXIT_PEER_LOST: "peer lost: another rank died or hung; retryable",
    EXIT_STOPPED_WITH_PEERS: "stopped with the job (another pod got SIGTERM); retryable",
    EXIT_S3_UNREACHABLE: "S3 endpoint (or every seed mirror) unreachable; retryable",
    EXIT_MASTER_UNREACHABLE: "master unreachable (python -m trainer.launch); retryable",
    EXIT_EXPORT: "model export failed; retryable (the export alone)",
}


class TrainerError(Exception):
    """An error a user can fix; reported as one line on stderr, never a traceback."""

    exit_code = EXIT_INTERNAL
    topic = "error"

    def one_line(self, prog: str = "trainer") -> str:
        """The message as printed: ``<prog>: <topic>: <message>`` on a single line."""
        text = " ".join(str(self).split())
        return f"{prog}: {self.topic}: {text}"


class UsageError(TrainerError):
    """A flag combination argparse cannot check on its own (e.g. batch not divisible)."""

    exit_code = EXIT_USAGE
    topic = "usage"


class DataError(TrainerError):
    """Training data absent, truncated or failing its checksum."""

    exit_code = EXIT_DATA
    topic = "data"


class OutputError(TrainerError):
    """The checkpoint or output directory cannot be written (found before any training)."""

    exit_code = EXIT_OUTPUT
    topic = "output"


class S3CredentialsError(TrainerError):
    """The S3 endpoint rejected (or we could not find) the credentials."""

    exit_code = EXIT_S3_CREDENTIALS
    topic = "s3"


class S3UnreachableError(TrainerError):
    """No connection could be made to the S3 endpoint."""

    exit_code = EXIT_S3_UNREACHABLE
    topic = "s3"


class MirrorsUnreachableError(TrainerError):
    """No HTTPS mirror could be reached for a file (network or HTTP errors only; retryable)."""

    exit_code = EXIT_S3_UNREACHABLE
    topic = "download"


class ExportError(TrainerError):
    """The model could not be uploaded to ``--export-to`` for a reason other than credentials or reach."""

    exit_code = EXIT_EXPORT
    topic = "export"


class PreemptedError(TrainerError):
    """SIGTERM: the ranks stopped at one step, checkpointed by rank 0; a restart resumes there."""

    exit_code = EXIT_PREEMPTED
    topic = "preempted"


class StoppedWithPeersError(PreemptedError):
    """This rank was not sent SIGTERM; another pod's ranks were, and all stopped at one checkpointed step."""

    exit_code = EXIT_STOPPED_WITH_PEERS
    topic = "stopped with the job"


class PeerLostError(TrainerError):
    """A collective broke because another rank died or hung; the job should restart and resume."""

    exit_code = EXIT_PEER_LOST
    topic = "peer lost"


def write_line(text: str, stream: TextIO | None = None) -> None:
    """One ``write`` per line, so lines from concurrent ranks never interleave mid-line."""
    out = sys.stderr if stream is None else stream
    out.write(f"{text}\n")
    out.flush()


# Set by ``trainer.launch`` for its workers: a directory where each rank leaves its one line when it ends
# with a TrainerError, so the launcher's last line (the pod's termination message) says the cause.
FATAL_DIR_ENV = "DDP_MNIST_FATAL_DIR"


def record_fatal(line: str, exit_code: int) -> None:
    """Leave ``line`` and the rank's ``exit_code`` for the launcher as ``rank-<RANK>`` in
    ``$DDP_MNIST_FATAL_DIR`` (nothing when it is unset, as outside the launcher). Written to a
    temporary name and renamed: the launcher reads either nothing or the whole record."""
    directory = os.environ.get(FATAL_DIR_ENV)
    if not directory:
        return
    from trainer.fsio import atomic_write_bytes

    with contextlib.suppress(OSError):
        record = f"{exit_code} {line}".encode()
        atomic_write_bytes(Path(directory) / f"rank-{os.environ.get('RANK', '0')}", record)


def _record(path: Path) -> tuple[int, str] | None:
    try:
        code, _, line = path.read_text().partition(" ")
    except OSError:
        return None
    return (int(code), " ".join(line.split())) if code.isdigit() else None


def recorded_fatal(directory: Path, rank: int) -> str:
    """The line rank ``rank`` left in ``directory`` ("" when it left none)."""
    record = _record(directory / f"rank-{rank}")
    return record[1] if record else ""


# What a rank exits with when it stops because of another rank or a stop of the job, not a fault of its own.
REACTION_EXIT_CODES = (EXIT_PREEMPTED, EXIT_PEER_LOST, EXIT_STOPPED_WITH_PEERS)


def recorded_cause(directory: Path) -> tuple[int, int] | None:
    """(rank, exit code) of the first record in ``directory`` that is a rank's own fault (not one of
    :data:`REACTION_EXIT_CODES`), by the time it was written; None when there is none."""
    causes = []
    for path in directory.glob("rank-*"):
        record = _record(path)
        rank = path.name.removeprefix("rank-")
        if record and record[0] not in REACTION_EXIT_CODES and rank.isdigit():
            with contextlib.suppress(OSError):
                causes.append((path.stat().st_mtime_ns, int(rank), record[0]))
    return min(causes)[1:] if causes else None
