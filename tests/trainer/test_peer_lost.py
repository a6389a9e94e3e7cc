"""Telling a lost or hung peer from a bug: the classifier's table of real messages, the one line,
exit 200 (retryable) through ``main`` and the launcher; a bug keeps its traceback."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

from trainer import peers, train
from trainer.__main__ import main
from trainer.checkpoint import checkpoint_path, save_checkpoint
from trainer.errors import (
    BAD_INPUT_EXIT_CODES,
    EXIT_CODE_MEANINGS,
    EXIT_PEER_LOST,
    RETRYABLE_EXIT_CODES,
    PeerLostError,
)
from trainer.launch import root_failure
from trainer.peers import CLOSED, NETWORK, REMOTE, STORE, TIMED_OUT, BrokenCollective, broken_collective

GLOO = "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/"
NCCL_PG = "[PG ID 0 PG GUID 0(default_pg) Rank 0] "
RECV_0 = "Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?"
# Real messages (gloo's from this torch's runs and libtorch_cpu.so, NCCL's from torch and NCCL
# sources), the cause they map to and the detail the line shows.
PEER_LOST_MESSAGES: list[tuple[BaseException, str, str]] = [
    (
        RuntimeError(f"{GLOO}unbound_buffer.cc:78] Timed out waiting 20000ms for recv operation to complete"),
        TIMED_OUT,
        "Timed out waiting 20000ms for recv operation to complete",
    ),
    (
        RuntimeError(
            f"{GLOO}unbound_buffer.cc:129] Timed out waiting 10000ms for send operation to complete"
        ),
        TIMED_OUT,
        "Timed out waiting 10000ms for send operation to complete",
    ),
    (
        RuntimeError(f"{GLOO}unbound_buffer.cc:78] Application timeout caused pair closure"),
        TIMED_OUT,
        "Application timeout caused pair closure",
    ),
    (
        RuntimeError(f"{GLOO}pair.cc:612] Read timeout [10.0.3.7]:41234"),
        TIMED_OUT,
        "Read timeout [10.0.3.7]:41234",
    ),
    (
        RuntimeError(
            f"{GLOO}pair.cc:553] Connection closed by peer [127.0.0.1]:22934. This is typically caused by a "
            "remote worker crashing. Check the logs of the remote worker before reporting an error. GLHF! 🏖️"
        ),
        CLOSED,
        "Connection closed by peer [127.0.0.1]:22934",
    ),
    (
        RuntimeError(
            f"{GLOO}pair.cc:537] Read error [127.0.0.1]:5810: Connection reset by peer. This is typically "
            "caused by a remote worker hanging or bugs in the application. Check the logs of the remote "
            "worker before reporting an error. GLHF! 🏖️"
        ),
        CLOSED,
        "Read error [127.0.0.1]:5810: Connection reset by peer",
    ),
    (
        RuntimeError(f"{GLOO}pair.cc:371] Socket closed [10.0.3.7]:41234"),
        CLOSED,
        "Socket closed [10.0.3.7]:41234",
    ),
    (
        RuntimeError(f"{GLOO}pair.cc:445] writev [10.0.3.7]:41234: Broken pipe"),
        CLOSED,
        "writev [10.0.3.7]:41234: Broken pipe",
    ),
    (
        dist.DistBackendError(
            f"{NCCL_PG}Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, "
            "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600081 milliseconds before timing out."
        ),
        TIMED_OUT,
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=600000) ran for 600081 milliseconds before timing out.",
    ),
    (
        dist.DistBackendError(
            f"{NCCL_PG}Work WorkNCCL(SeqNum=7, OpType=BROADCAST, NumelIn=4, NumelOut=4, "
            "Timeout(ms)=600000) timed out in blocking wait."
        ),
        TIMED_OUT,
        "Work WorkNCCL(SeqNum=7, OpType=BROADCAST, NumelIn=4, NumelOut=4, Timeout(ms)=600000) timed out "
        "in blocking wait.",
    ),
    (
        dist.DistBackendError(
            "NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, remote process exited or "
            "there was a network error, NCCL version 2.21.5\nncclRemoteError: A call failed possibly due to "
            "a network error or a remote process exiting prematurely.\nLast error:\nsocketProgress: "
            "Connection closed by remote peer mnist-r1-worker-0<48384>"
        ),
        REMOTE,
        "remote process exited or there was a network error, NCCL version 2.21.5",
    ),
    (
        dist.DistBackendError(
            "NCCL communicator was aborted on rank 1. Original reason for failure was: "
            f"{NCCL_PG}Watchdog caught collective operation timeout"
        ),
        TIMED_OUT,
        "NCCL communicator was aborted on rank 1. Original reason for failure was: "
        f"{NCCL_PG}Watchdog caught collective operation timeout",
    ),
    (
        dist.DistNetworkError(RECV_0),
        NETWORK,
        RECV_0,
    ),
    (dist.DistNetworkError("Socket Timeout"), NETWORK, "Socket Timeout"),
    (
        dist.DistStoreError("wait timeout after 10000ms, keys: /default_pg/0//cpu//0"),
        STORE,
        "wait timeout after 10000ms, keys: /default_pg/0//cpu//0",
    ),
]

NOT_PEER_LOST: list[BaseException] = [
    ValueError("could not convert string to float: 'x'"),
    KeyError("model"),
    torch.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.19 GiB of which "
        "3.06 MiB is free. Process 2301 has 79.18 GiB memory in use."
    ),
    RuntimeError(
        "Expected to have finished reduction in the prior iteration before starting a new one. This error "
        "indicates that your module has parameters that were not used in producing loss."
    ),
    dist.DistBackendError(
        "NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, invalid usage (run "
        "with NCCL_DEBUG=WARN for details), NCCL version 2.21.5\nncclInvalidUsage: This usually reflects "
        "invalid usage of NCCL library."
    ),
    # An OSError of our own (an S3 download, a file) is not a peer, whatever it says.
    ConnectionResetError(104, "Connection reset by peer"),
    BrokenPipeError(32, "Broken pipe"),
]


@pytest.mark.parametrize(
    ("error", "cause", "detail"),
    PEER_LOST_MESSAGES,
    ids=[f"{type(e).__name__}-{i}" for i, (e, _, _) in enumerate(PEER_LOST_MESSAGES)],
)
def test_broken_collective_is_recognised(error: BaseException, cause: str, detail: str) -> None:
    assert broken_collective(error) == BrokenCollective(cause, detail)


@pytest.mark.parametrize("error", NOT_PEER_LOST, ids=[type(e).__name__ for e in NOT_PEER_LOST])
def test_other_errors_are_not_a_lost_peer(error: BaseException) -> None:
    assert broken_collective(error) is None


def test_a_broken_collective_is_found_behind_the_exception_it_caused() -> None:
    gloo = RuntimeError(f"{GLOO}pair.cc:553] Connection closed by peer [10.0.3.7]:22934")
    try:
        try:
            raise gloo
        except RuntimeError as error:
            raise ValueError("while averaging the loss") from error
    except ValueError as outer:
        assert broken_collective(outer) == BrokenCollective(
            CLOSED, "Connection closed by peer [10.0.3.7]:22934"
        )


def test_every_pattern_has_a_real_message_in_the_table() -> None:
    messages = [str(error) for error, _, _ in PEER_LOST_MESSAGES]
    for pattern, _ in peers.MESSAGE_PATTERNS:
        assert any(pattern.search(message) for message in messages), pattern.pattern


def test_peer_lost_code_is_retryable_and_no_signal_gives_it() -> None:
    assert EXIT_PEER_LOST in RETRYABLE_EXIT_CODES
    assert all(code >= 128 for code in RETRYABLE_EXIT_CODES)  # the training operator's rule
    assert EXIT_PEER_LOST - 128 > signal.SIGRTMAX  # 128 + N is "killed by signal N"
    assert not set(RETRYABLE_EXIT_CODES) & set(BAD_INPUT_EXIT_CODES)
    assert EXIT_CODE_MEANINGS[EXIT_PEER_LOST] == "peer lost: another rank died or hung; retryable"


def test_message_names_cause_timeout_and_resume_checkpoint(tmp_path: Path) -> None:
    broken = BrokenCollective(TIMED_OUT, "Timed out waiting 20000ms for recv operation to complete")
    error = PeerLostError(peers.peer_lost_message(broken, 1, 20, tmp_path / "ckpt-epoch-0003.pt"))
    assert error.one_line() == (
        "trainer: peer lost: rank 1: a collective timed out waiting for another rank (Timed out waiting "
        "20000ms for recv operation to complete); see the other ranks' logs; --dist-timeout=20s; "
        f"resume checkpoint: {tmp_path / 'ckpt-epoch-0003.pt'}"
    )
    assert peers.peer_lost_message(broken, 0, 20, None).endswith(
        "; resume checkpoint: none: a restart starts from epoch 0"
    )


@pytest.fixture
def process_group() -> Iterator[None]:
    """A real (one-rank, gloo) process group in this process, as the trainer has after setup."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _raising(error: BaseException) -> Any:
    def fail(*_args: object) -> None:
        raise error

    return fail


def test_run_training_turns_a_broken_collective_into_peer_lost_and_leaves_the_group(
    process_group: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainer.cli import parse_config

    save_checkpoint(tmp_path, 1, {"epoch": 1})
    save_checkpoint(tmp_path, 2, {"epoch": 2})
    checkpoint_path(tmp_path, 2).write_bytes(b"TRAINER-CKPT 1 truncated")
    gloo = RuntimeError(
        f"{GLOO}unbound_buffer.cc:78] Timed out waiting 7000ms for recv operation to complete"
    )
    monkeypatch.setattr(train, "setup", lambda config, started: None)
    monkeypatch.setattr(train, "train", _raising(gloo))
    config = parse_config([f"--checkpoint-dir={tmp_path}", "--dist-timeout=7"])
    with pytest.raises(PeerLostError) as caught:
        train.run_training(config, 0.0)
    assert caught.value.__cause__ is gloo
    assert caught.value.one_line() == (
        "trainer: peer lost: rank 0: a collective timed out waiting for another rank (Timed out waiting "
        "7000ms for recv operation to complete); see the other ranks' logs; --dist-timeout=7s; "
        f"resume checkpoint: {checkpoint_path(tmp_path, 1)}"
    )
    assert dist.is_initialized(), "a broken group is left alone: tearing it down could wait on the peer"


def test_run_training_lets_a_bug_through_and_tears_the_group_down(
    process_group: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainer.cli import parse_config

    monkeypatch.setattr(train, "setup", lambda config, started: None)
    monkeypatch.setattr(train, "train", _raising(KeyError("model")))
    with pytest.raises(KeyError):
        train.run_training(parse_config([f"--checkpoint-dir={tmp_path}"]), 0.0)
    assert not dist.is_initialized()


def test_without_a_process_group_nothing_is_a_lost_peer(tmp_path: Path) -> None:
    gloo = RuntimeError(f"{GLOO}pair.cc:553] Connection closed by peer [10.0.3.7]:22934")
    assert not dist.is_initialized()
    assert peers.peer_lost_error(gloo, 10, tmp_path) is None


def test_main_prints_one_line_for_a_lost_peer_and_lets_a_bug_through(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(train, "run_training", _raising(PeerLostError("rank 1: gone")))
    assert main([]) == EXIT_PEER_LOST
    assert capsys.readouterr().err == "trainer: peer lost: rank 1: gone\n"
    monkeypatch.setattr(train, "run_training", _raising(ValueError("a bug")))
    with pytest.raises(ValueError, match="a bug"):
        main([])


def test_root_failure_is_not_the_rank_that_reacted_to_it() -> None:
    reacted = ProcessFailure(local_rank=0, pid=101, exitcode=EXIT_PEER_LOST, error_file="")
    killed = ProcessFailure(local_rank=1, pid=102, exitcode=-signal.SIGKILL, error_file="")
    reacted.timestamp = killed.timestamp = 1_700_000_000
    error = ChildFailedError("trainer", {0: reacted, 1: killed})
    assert root_failure(error) == (1, killed)
    reacted.timestamp -= 1  # a second earlier: that rank failed first (the other was stopped later)
    assert root_failure(error) == (0, reacted)


@pytest.mark.parametrize("stopped", [-signal.SIGTERM, 128 + signal.SIGTERM])
def test_root_failure_is_not_a_rank_torchrun_stopped_after_it(stopped: int) -> None:
    """torchrun records the ranks it stopped after the one it found failed, within the same second; the
    dictionary lists rank 0 first when rank 1 exited 200 and rank 0 was then stopped with SIGTERM."""
    stopped_rank = ProcessFailure(local_rank=0, pid=101, exitcode=stopped, error_file="")
    cause = ProcessFailure(local_rank=1, pid=102, exitcode=EXIT_PEER_LOST, error_file="")
    stopped_rank.timestamp = cause.timestamp = 1_700_000_000
    error = ChildFailedError("trainer", {0: stopped_rank, 1: cause})
    assert root_failure(error) == (1, cause)
    bad_data = ProcessFailure(local_rank=1, pid=102, exitcode=3, error_file="")
    bad_data.timestamp = stopped_rank.timestamp
    assert root_failure(ChildFailedError("trainer", {0: stopped_rank, 1: bad_data})) == (1, bad_data)


def test_a_failed_join_is_a_lost_peer_only_when_the_store_or_a_peer_went_away(tmp_path: Path) -> None:
    gone = dist.DistNetworkError(
        "Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?"
    )
    lost = peers.joining_error(gone, 1, 10, tmp_path)
    assert lost is not None
    assert lost.one_line() == (
        "trainer: peer lost: rank 1: a connection between ranks failed while joining the process group "
        "(Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or "
        "crash?); see the other ranks' logs; --dist-timeout=10s; resume checkpoint: none: a restart "
        "starts from epoch 0"
    )
    assert peers.joining_error(ValueError("world_size must be positive"), 1, 10, tmp_path) is None


@pytest.mark.parametrize(
    ("exits", "expected"),
    [
        ({0: EXIT_PEER_LOST, 1: -signal.SIGKILL}, (1, 128 + signal.SIGKILL)),  # killed: records nothing
        ({0: EXIT_PEER_LOST, 1: -signal.SIGTERM}, (0, EXIT_PEER_LOST)),  # stopped by torchrun after it
        ({0: EXIT_PEER_LOST, 1: EXIT_PEER_LOST}, (0, EXIT_PEER_LOST)),
        ({}, (0, EXIT_PEER_LOST)),  # ranks not forked: torchrun's own failures decide
    ],
    ids=["sigkill", "sigterm", "both-reacted", "not-forked"],
)
def test_forked_ranks_a_rank_killed_by_a_signal_is_the_cause_not_the_peer_torchrun_found_first(
    exits: dict[int, int], expected: tuple[int, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With forked ranks torchrun reports only the first rank its poll finds ended: rank 0's 200 when
    rank 1 was SIGKILLed a moment before. The launcher's note of every rank's exit status names rank 1."""
    from trainer import launch

    monkeypatch.setattr(launch, "FORKED_EXITS", exits)
    reported = ProcessFailure(local_rank=0, pid=101, exitcode=EXIT_PEER_LOST, error_file="")
    assert launch.failed_rank(ChildFailedError("trainer", {0: reported}), tmp_path) == expected
