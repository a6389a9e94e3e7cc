"""A lost or hung peer: telling a broken collective from a bug, and reporting it in one line.

Once the process group is up, a rank whose collective breaks because another rank died, froze or lost
its network exits with :data:`~trainer.errors.EXIT_PEER_LOST` (200, retryable) and one line naming
the cause, the ``--dist-timeout`` in force and the checkpoint a restart resumes from. So does a rank
that loses the rendezvous store or a peer while it joins the group (:func:`joining_error`). Any other
exception is a bug and keeps its traceback (exit 1).

How long until a pod exits (torch 2.13; one rank hung or dead, the others healthy):

- a peer that *died* closes its sockets: the ranks talking to it fail at once ("Connection closed by
  peer", "Connection reset by peer");
- a peer that *hangs* keeps them open: each healthy rank fails once its current collective has
  waited ``--dist-timeout`` seconds (gloo's per-operation timeout; NCCL's watchdog uses the same
  value), so at most ``--dist-timeout`` after the hung rank's last collective;
- the failing rank exits at once (:func:`trainer.__main__.exit_process`); torchrun's agent sees it
  within ``--monitor-interval`` (default 0.1 s). If other ranks of the same pod are still running
  (the hung one among them) it sends them SIGTERM and, after ``--shutdown-timeout`` (default 30 s,
  or ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``), SIGKILL (``elastic/multiprocessing/api.py``). A stopped
  process (SIGSTOP, a frozen container) does not act on SIGTERM and uses up that grace; one stuck in
  the kernel (D state) even survives SIGKILL, and the agent abandons it after a second grace.

Worst case, from the hang to the pod's exit: ``--dist-timeout`` + ~1 s when the hung rank runs in
another pod; ``--dist-timeout`` + ``--shutdown-timeout`` (30 s) + ~1 s when it shares the pod with
the rank that noticed (twice the grace for a process stuck in the kernel). Measured here with
``--dist-timeout=10`` and a rank frozen by SIGSTOP: 10.4 s across pods, 40.5 s within one.

With nccl the pods set ``TORCH_NCCL_ASYNC_ERROR_HANDLING=1`` (``infra/program/job/env.py``; torch's
default is 3): the watchdog thread aborts the communicators and takes the process down itself
(SIGABRT, exit 134: >= 128, so retried too, but without this line) when it
catches a timeout before Python does; the NCCL messages below are those that reach Python
(``TORCH_NCCL_BLOCKING_WAIT=1``, an aborted communicator, a remote error at the next collective).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch.distributed as dist

from trainer import checkpoint
from trainer.errors import PeerLostError

TIMED_OUT = "a collective timed out waiting for another rank"
CLOSED = "another rank closed its connection"
REMOTE = "another rank exited or the network failed"
STORE = "the rendezvous store failed"
NETWORK = "a connection between ranks failed"
JOINING = " while joining the process group"

# What gloo and NCCL say when a peer is gone, searched in order in the message of a RuntimeError
# (gloo raises plain ones, NCCL DistBackendErrors). Each row is text torch 2.13 or NCCL really
# produces (gloo's are in libtorch_cpu.so); the test table holds a real example of each.
MESSAGE_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"Timed out waiting \d+ms for (?:send|recv) operation"), TIMED_OUT),  # gloo
    (re.compile(r"Application timeout caused pair closure"), TIMED_OUT),  # gloo, after a timeout
    (re.compile(r"(?:Read|Write) timeout \["), TIMED_OUT),  # gloo pair, sync mode
    (re.compile(r"Watchdog caught collective operation timeout"), TIMED_OUT),  # NCCL watchdog
    (re.compile(r"timed out in blocking wait"), TIMED_OUT),  # NCCL, TORCH_NCCL_BLOCKING_WAIT=1
    (re.compile(r"remote process exited or there was a network error"), REMOTE),  # ncclRemoteError
    (re.compile(r"NCCL communicator was aborted"), REMOTE),
    (re.compile(r"Connection closed by (?:remote )?peer"), CLOSED),  # gloo pair; NCCL socket
    (re.compile(r"Socket (?:unexpectedly )?closed \["), CLOSED),  # gloo pair
    (re.compile(r"Connection reset by peer"), CLOSED),  # gloo "Read error", NCCL socket
    (re.compile(r"Broken pipe"), CLOSED),  # gloo "writev", NCCL socket
)
# Errors of the rendezvous store (TCPStore) and its sockets: once training runs, the store is
# only used to meet the other ranks, so any failure of it means they (or the master) are gone.
TYPE_CAUSES: tuple[tuple[type[BaseException], str], ...] = (
    (dist.DistStoreError, STORE),
    (dist.DistNetworkError, NETWORK),
)

_SOURCE_PREFIX = re.compile(r"^\[[^\]\s]+:\d+\]\s*")  # gloo's "[/path/to/pair.cc:537] "
_RANK_PREFIX = re.compile(r"^\[(?:PG [^\]]*)?Rank \d+\]\s*")  # NCCL's "[PG ID 0 PG GUID 0 Rank 0] "
_NCCL_PREFIX = re.compile(r"^NCCL error in: \S+:\d+,\s*")
_GLOO_ADVICE = re.compile(r"\.?\s*This is typically caused by .*$")
MAX_DETAIL = 200
NO_CHECKPOINT = "none: a restart starts from epoch 0"


@dataclass(frozen=True)
class BrokenCollective:
    """Why a collective failed (one of the causes above) and the backend's own words, trimmed."""

    cause: str
    detail: str


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error``, then what it was raised from or while handling, without looping."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def short_detail(message: str) -> str:
    """The first line of a backend message, without source paths, advice or a C++ stack."""
    first = message.strip().splitlines()[0] if message.strip() else ""
    text = first.strip()
    for prefix in (_SOURCE_PREFIX, _RANK_PREFIX, _NCCL_PREFIX):
        text = prefix.sub("", text)
    text = _GLOO_ADVICE.sub("", text)
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 3] + "..."


def broken_collective(error: BaseException) -> BrokenCollective | None:
    """What broke, if ``error`` (or an exception it came from) says another rank is gone; else None.

    The exception's type decides first (store and network errors), then its message (gloo raises
    plain RuntimeErrors, NCCL DistBackendErrors, and both also fail for reasons that are bugs, such
    as NCCL's "invalid usage"). OSErrors of our own (S3, files) are never a peer.
    """
    for link in _chain(error):
        for kind, cause in TYPE_CAUSES:
            if isinstance(link, kind):
                return BrokenCollective(cause, short_detail(str(link)))
        if isinstance(link, RuntimeError):
            message = str(link)
            for pattern, cause in MESSAGE_PATTERNS:
                if pattern.search(message):
                    return BrokenCollective(cause, short_detail(message))
    return None


def peer_lost_message(broken: BrokenCollective, rank: int, timeout_s: int, resume_from: Path | None) -> str:
    """The one line: cause, where it happened, the timeout in force, what a restart resumes from."""
    said = f" ({broken.detail})" if broken.detail else ""
    where = NO_CHECKPOINT if resume_from is None else str(resume_from)
    return (
        f"rank {rank}: {broken.cause}{said}; see the other ranks' logs; "
        f"--dist-timeout={timeout_s}s; resume checkpoint: {where}"
    )


def peer_lost_error(error: BaseException, timeout_s: int, checkpoint_dir: Path) -> PeerLostError | None:
    """A :class:`PeerLostError` for ``error`` if it broke a collective of the running process group.

    Before the group exists nothing is a collective (see :func:`joining_error` for that time).
    """
    if not (dist.is_available() and dist.is_initialized()):
        return None
    broken = broken_collective(error)
    return None if broken is None else _lost(broken, dist.get_rank(), timeout_s, checkpoint_dir)


def joining_error(
    error: BaseException, rank: int, timeout_s: int, checkpoint_dir: Path
) -> PeerLostError | None:
    """A :class:`PeerLostError` for ``error`` raised while this rank joined the process group, if the
    store or another rank went away meanwhile.

    Under torchrun the store lives in the first pod's launcher, so a pod that fails before its ranks
    join (bad data, an unwritable volume) takes the store with it: the ranks still joining elsewhere
    read "Failed to recv, got 0 bytes". The launchers' own rendezvous has already succeeded by then,
    so this is a peer lost, not a wrong address (``trainer/launch.py`` reports that one).
    """
    broken = broken_collective(error)
    if broken is None:
        return None
    return _lost(BrokenCollective(f"{broken.cause}{JOINING}", broken.detail), rank, timeout_s, checkpoint_dir)


def _lost(broken: BrokenCollective, rank: int, timeout_s: int, checkpoint_dir: Path) -> PeerLostError:
    found = checkpoint.newest_valid(checkpoint_dir, lambda _skipped: None)
    return PeerLostError(peer_lost_message(broken, rank, timeout_s, None if found is None else found[0]))
