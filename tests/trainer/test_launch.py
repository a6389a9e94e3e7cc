"""The torchrun wrapper: unexpanded $(VAR), bounded master wait, child exit codes preserved."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from infra.local.ports import free_port
from trainer.errors import FATAL_DIR_ENV
from trainer.launch import LaunchError, failure_exit_code, unexpanded_reference, wait_for_master


@pytest.mark.slow
def test_unexpanded_reference_exits_2_at_once(procs: Any) -> None:
    args = [
        "--master-wait-timeout=300",
        "--",
        "--nnodes=2",
        "--node-rank=$(PET_NODE_RANK)",
        "-m",
        "trainer",
    ]
    started = time.monotonic()
    result = procs.run("trainer.launch", args)
    assert time.monotonic() - started < 20
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "launch: argument '--node-rank=$(PET_NODE_RANK)' references $(PET_NODE_RANK), "
        "which is not set in the pod's environment"
    ]


def test_unexpanded_reference_finds_the_first() -> None:
    assert unexpanded_reference(["--nnodes=2", "--master-addr=$(PET_MASTER_ADDR)"]) == (
        "argument '--master-addr=$(PET_MASTER_ADDR)' references $(PET_MASTER_ADDR), "
        "which is not set in the pod's environment"
    )
    assert unexpanded_reference(["--nnodes=2", "--data=$HOME", "$(", "--lr=0.1"]) is None


@pytest.mark.slow
def test_master_unreachable_exits_206_within_the_bound(procs: Any) -> None:
    port = procs.free_port()
    args = [
        "--master-wait-timeout=3",
        "--",
        "--nnodes=2",
        "--node-rank=1",
        "--nproc-per-node=1",
        "--master-addr=127.0.0.1",
        f"--master-port={port}",
        "-m",
        "trainer",
    ]
    started = time.monotonic()
    result = procs.run("trainer.launch", args)
    took = time.monotonic() - started
    assert result.returncode == 206
    # The 3-s wait, then the exit: far below the 300-s default; the rest is the process's start-up,
    # which a loaded machine (parallel test workers, a build) stretches to 20 s and more.
    assert 3 <= took < 60
    # The wait is announced once; the refused connects it retries stay quiet until the wait fails.
    *waiting, failure = result.stderr.splitlines()
    assert waiting == [f"launch: waiting for master 127.0.0.1:{port} (up to 3 s)"]
    assert failure == (
        f"launch: master 127.0.0.1:{port} not reachable within --master-wait-timeout=3 s "
        "(last error: [Errno 111] Connection refused); is the master pod running?"
    )


class FakeTime:
    """A clock that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_long_wait_prints_short_progress_lines_without_the_error(procs: Any) -> None:
    port = procs.free_port()
    fake = FakeTime()
    lines: list[str] = []
    with pytest.raises(LaunchError) as caught:
        wait_for_master("127.0.0.1", port, 70, lines.append, fake.clock, fake.sleep, progress_every_s=30)
    assert lines == [
        f"waiting for master 127.0.0.1:{port} (up to 70 s)",
        f"still waiting for master 127.0.0.1:{port} (30/70 s)",
        f"still waiting for master 127.0.0.1:{port} (60/70 s)",
    ]
    assert caught.value.exit_code == 206
    assert "(last error: [Errno 111] Connection refused)" in str(caught.value)


def test_wait_ends_when_the_master_listens() -> None:
    lines: list[str] = []
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        wait_for_master("127.0.0.1", port, 5, lines.append)
    assert lines == [
        f"waiting for master 127.0.0.1:{port} (up to 5 s)",
        f"master 127.0.0.1:{port} is reachable after 0 s",
    ]


def test_wait_retries_dns_failures_until_the_bound() -> None:
    lines: list[str] = []
    with pytest.raises(LaunchError) as caught:
        wait_for_master("no-such-host.invalid", 1, 1.0, lines.append)
    assert caught.value.exit_code == 206
    assert lines == ["waiting for master no-such-host.invalid:1 (up to 1 s)"]
    assert "within --master-wait-timeout=1 s (last error: [Errno " in str(caught.value)


@pytest.mark.parametrize(("exitcode", "expected"), [(3, 3), (4, 4), (-9, 137), (-15, 143)])
def test_failure_exit_code(exitcode: int, expected: int) -> None:
    assert failure_exit_code(exitcode) == expected


@pytest.mark.slow
def test_child_exit_code_survives_torchrun(procs: Any, tmp_path: Path) -> None:
    missing = tmp_path / "nothing-here"
    args = procs.launch_args(2, [f"--data={missing}", f"--checkpoint-dir={tmp_path / 'c'}"])
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    result = procs.run("trainer.launch", args, env={**procs.env(), "TMPDIR": str(scratch)})
    assert result.returncode == 3, result.stderr[-3000:]
    message = (
        f"trainer: data: {missing}/MNIST/raw/train-images-idx3-ubyte(.gz) not found; "
        "seed it with 'python -m trainer.seed --from DIR --to ROOT' (or --mirror URL)"
    )
    assert message in result.stderr.splitlines()
    # The last line (a pod's termination message ends with it) names the rank, the code and its cause,
    # after torchrun's own report.
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("launch: worker rank ") and last.endswith(
        f"exit code 3 (data missing or corrupt): {message}"
    ), last
    # Nothing is left in the temp directory: neither the launcher's own directory nor the torchelastic_*
    # directory torchrun makes for its error files when --log-dir names none.
    assert list(scratch.iterdir()) == [], "the launcher left files in the temp directory"


@pytest.mark.parametrize(
    ("raised", "expected", "line"),
    [
        ("sigterm", 143, "launch: torchrun stopped by SIGTERM: exit code 143 (retryable)"),
        ("rendezvous", 200, "launch: rendezvous failed: RendezvousTimeoutError: no peer joined"),
        ("store", 200, "launch: rendezvous failed: DistStoreError: Timed out waiting for clients"),
    ],
)
def test_what_torchrun_raises_keeps_the_retry_rule(
    raised: str,
    expected: int,
    line: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A preemption's SIGTERM and a failed rendezvous are retryable (>= 128), not a traceback and 1."""
    import signal

    from torch.distributed import DistStoreError
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.rendezvous.api import RendezvousTimeoutError

    from trainer.launch import main

    errors = {
        "sigterm": SignalException("Process 7 got signal: 15", signal.SIGTERM),
        "rendezvous": RendezvousTimeoutError("no peer joined"),
        "store": DistStoreError("Timed out waiting for clients"),
    }

    def run(_: object, fork: bool, ahead: object) -> None:
        raise errors[raised]

    monkeypatch.setattr("trainer.launch.run_torchrun", run)
    monkeypatch.delenv(FATAL_DIR_ENV, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert main(["--", "--nnodes=1", "--nproc-per-node=1", "-m", "trainer"]) == expected
    assert capsys.readouterr().err.splitlines()[-1].startswith(line)
    # Called in-process, it leaves the caller's environment and temp directory as they were: processes
    # the caller starts later must not write records into a directory that is gone.
    assert FATAL_DIR_ENV not in os.environ
    assert list(tmp_path.iterdir()) == []


def _finished_run(ckpt: Path, epochs: int, world_size: int, train_limit: int) -> None:
    """A run's files as a finished run leaves them: the final checkpoint, metrics.json, model.pt."""
    from trainer.checkpoint import save_checkpoint
    from trainer.cli import parse_config
    from trainer.scaling import plan_batches

    config = parse_config([f"--checkpoint-dir={ckpt}", f"--epochs={epochs}", f"--train-limit={train_limit}"])
    steps = plan_batches(config.batch_size, config.scaling, world_size, train_limit).steps_per_epoch
    figures = {"train_loss": 0.5, "test_loss": 0.4, "test_accuracy": 0.9, "samples_per_s": 1.0}
    history = [{"epoch": e, **figures, "train_seconds": 1.0, "elapsed_s": e} for e in range(1, epochs + 1)]
    save_checkpoint(
        ckpt, epochs, {"epoch": epochs, "epochs": epochs, "total_steps": steps * epochs, "history": history}
    )
    (ckpt / "metrics.json").write_text(json.dumps({"epochs": epochs, "history": history, "restarts": []}))
    (ckpt / "model.pt").write_bytes(b"model")


@pytest.mark.parametrize("epochs", [1, 2])
def test_a_node_of_a_finished_run_starts_no_torchrun(
    epochs: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Node rank 1 of a finished run exits 0 at once (no wait for a master that is not coming back);
    node rank 0 records the restart. A run of another schedule (here: one more epoch) is not finished."""
    from trainer.launch import main

    ckpt = tmp_path / "ckpt"
    _finished_run(ckpt, 1, world_size=2, train_limit=512)
    started: list[object] = []
    monkeypatch.setattr("trainer.launch.run_torchrun", lambda parsed, fork, ahead: started.append(parsed))
    trainer = ["-m", "trainer", f"--checkpoint-dir={ckpt}", f"--epochs={epochs}", "--train-limit=512"]
    torchrun = ["--nnodes=2", "--nproc-per-node=1", "--master-addr=127.0.0.1", f"--master-port={free_port()}"]
    for rank in (1, 0):
        code = main(["--master-wait-timeout=1", "--", *torchrun, f"--node-rank={rank}", *trainer])
        assert code == (0 if epochs == 1 else 206 if rank else 0)
    err = capsys.readouterr().err
    restarts = json.loads((ckpt / "metrics.json").read_text())["restarts"]
    if epochs == 1:
        assert started == []
        assert "node rank 1 has nothing to do" in err and "nothing to train" in err
        assert [(r["epochs_trained"], r["world_size"]) for r in restarts] == [(0, 2)]
    else:
        assert len(started) == 1 and restarts == []  # rank 0 ran torchrun; rank 1 waited for it


def test_a_rank_leaves_its_line_only_for_a_launcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainer.errors import record_fatal, recorded_cause, recorded_fatal

    monkeypatch.delenv(FATAL_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    record_fatal("trainer: data: gone", 3)  # outside the launcher: nowhere
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv(FATAL_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("RANK", "3")
    record_fatal("trainer: output:  cannot\nwrite", 5)
    assert [p.name for p in tmp_path.iterdir()] == ["rank-3"]
    assert recorded_fatal(tmp_path, 3) == "trainer: output: cannot write"
    assert recorded_fatal(tmp_path, 0) == ""
    assert recorded_cause(tmp_path) == (3, 5)


def test_the_recorded_cause_is_the_first_fault_not_a_reaction(tmp_path: Path) -> None:
    from trainer.errors import recorded_cause

    def record(rank: int, code: int, at_ns: int) -> None:
        path = tmp_path / f"rank-{rank}"
        path.write_text(f"{code} trainer: rank {rank}")
        os.utime(path, ns=(at_ns, at_ns))

    record(0, 200, 1_000)  # the first written, but a reaction: peer lost
    record(1, 143, 2_000)  # a reaction: preempted
    assert recorded_cause(tmp_path) is None
    record(3, 5, 4_000)
    record(2, 3, 3_000)
    assert recorded_cause(tmp_path) == (2, 3)


def test_building_the_forked_ranks_config_leaves_cuda_uninitialized(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchrun's LaunchConfig asks torch.cuda.is_available() in the launcher. Answered by CUDA's own
    count, that initializes CUDA there, and every forked rank's torch.cuda.set_device then raises
    "Cannot re-initialize CUDA in forked subprocess" (seen on an H200 before this rule:
    docs/BENCHMARKS.md#gpu). Here NVML stands for a GPU node's (one device) and CUDA's count raises:
    the config must be built without it, and the launcher's environment is left as it was."""
    import torch
    from torch.distributed.run import parse_args

    from trainer.launch import NVML_CHECK_ENV, fork_config

    def cuda_initialized() -> int:
        raise AssertionError("the launcher asked CUDA for its device count")

    monkeypatch.setattr(torch.cuda, "_device_count_nvml", lambda: 1)
    monkeypatch.setattr(torch._C, "_cuda_getDeviceCount", cuda_initialized, raising=False)
    monkeypatch.setattr(torch.version, "cuda", torch.version.cuda or "13.0")
    monkeypatch.delenv(NVML_CHECK_ENV, raising=False)
    parsed = parse_args(
        ["--nnodes=1", "--nproc-per-node=1", "--max-restarts=0", "-m", "trainer", "--epochs=1"]
    )
    config, command = fork_config(parsed)
    assert command == ["-u", "-m", "trainer", "--epochs=1"]
    assert config.nproc_per_node == 1
    assert NVML_CHECK_ENV not in os.environ


@pytest.mark.parametrize(
    ("nvml_count", "driver", "forks"),
    [
        (1, True, True),  # a GPU node: NVML answers, torch never initializes CUDA in the launcher
        (0, True, True),  # NVML answers that there is no device
        (-1, False, True),  # a CPU node: no NVML and no CUDA driver, nothing to initialize
        (-1, True, False),  # a driver but no NVML: torch would initialize CUDA; ranks start by exec
    ],
)
def test_ranks_are_forked_only_where_cuda_stays_uninitialized(
    nvml_count: int, driver: bool, forks: bool
) -> None:
    from types import SimpleNamespace

    from trainer.launch import cuda_untouched_by_fork

    def load_driver() -> object:
        if not driver:
            raise OSError("libcuda.so.1: cannot open shared object file")
        return object()

    cuda = SimpleNamespace(_device_count_nvml=lambda: nvml_count)
    assert cuda_untouched_by_fork(cuda, load_driver) is forks


def test_the_pinned_torch_counts_devices_by_nvml_where_the_launcher_relies_on_it() -> None:
    """cuda_untouched_by_fork reads torch's private NVML count; an upgrade that drops it fails here."""
    import inspect

    import torch
    from torch.distributed.launcher.api import LaunchConfig

    assert callable(torch.cuda._device_count_nvml)
    assert "_nvml_based_avail()" in inspect.getsource(torch.cuda.is_available)
    assert "torch.cuda.is_available()" in inspect.getsource(LaunchConfig.__post_init__)


# A process that stands in for torchrun's agent at the start of its ranks: torchrun's handler (raise
# wherever the process is), the launcher's at-fork hooks, and a start that forks two ranks. SIGTERM
# comes during the first fork (a hook registered before the launcher's sends it once the launcher's
# has blocked it: it is pending when the parent's hook unblocks it) or between the two forks. It prints
# how many ranks were forked when the signal raised, or "lost".
_FORKING_AGENT = """
import os, signal, sys, time
from trainer import launch

class SignalException(Exception):
    pass

def handler(number, frame):
    raise SignalException(number)

when, wrapped = sys.argv[1], sys.argv[2] == "wrapped"
sent = []
def during_the_fork():
    if when == "in-fork" and not sent:
        sent.append(os.kill(os.getpid(), signal.SIGTERM))
os.register_at_fork(before=during_the_fork)
os.register_at_fork(
    before=launch._before_fork,
    after_in_parent=launch._after_fork_in_parent,
    after_in_child=launch._after_fork_in_child,
)
signal.signal(signal.SIGTERM, handler)
ranks = []
def start(context):
    for rank in range(2):
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        ranks.append(pid)
        if when == "between-forks" and not sent:
            sent.append(os.kill(os.getpid(), signal.SIGTERM))
try:
    (launch._deferring_signals(start) if wrapped else start)(None)
    outcome = "lost"
except SignalException:
    outcome = f"raised after {len(ranks)} forks"
for pid in ranks:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
print(outcome)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("when", "unwrapped"), [("in-fork", "lost"), ("between-forks", "raised after 1 forks")]
)
def test_a_sigterm_while_the_ranks_are_forked_reaches_the_agent_once_all_are(when, unwrapped):
    """torch's start of the ranks, as the launcher wraps it: the signal raises in torchrun's handler
    after the last fork, with every rank forked (known to the agent, which closes them). Unwrapped,
    the contrast: in a fork the signal is lost, between two forks it leaves the second rank unforked
    and the first unknown."""

    def outcome(how: str) -> str:
        command = [sys.executable, "-c", _FORKING_AGENT, when, how]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
        return done.stdout.strip()

    assert outcome("unwrapped") == unwrapped
    assert outcome("wrapped") == "raised after 2 forks"


_FINISHED_RANK = """
import os, signal
import trainer.__main__
from trainer import launch, preempt

def finished(argv):
    preempt.install()
    os.kill(os.getpid(), signal.SIGTERM)  # the agent's, during the run's last stretch: only recorded
    return 0

trainer.__main__.exit_code = finished
launch.forked_rank()
print("returned", flush=True)
"""


@pytest.mark.slow
def test_a_sigterm_recorded_after_the_last_agreement_ends_the_finished_rank():
    """A forked rank whose run finished after the agent's SIGTERM was recorded (too late for the
    ranks to agree on a stop) dies of it once its results are written, instead of waiting in torch's
    wrapper for the agent, which is closing the ranks, until the SIGKILL 30 s later. The trainer's run
    is a stand-in here; the rank's code around it is the launcher's."""
    done = subprocess.run(
        [sys.executable, "-c", _FINISHED_RANK], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout) == (-15, "")
