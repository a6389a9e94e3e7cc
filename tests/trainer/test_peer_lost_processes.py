"""A lost or hung peer with real processes: two pods (two launchers, one rank each), one frozen by
SIGSTOP or killed; the other exits 200 with one line, in the documented time. A bug still exits 1."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

from trainer.checkpoint import checkpoint_path, list_checkpoints
from trainer.errors import EXIT_OUTPUT, EXIT_PEER_LOST
from trainer.peers import CLOSED, NETWORK, NO_CHECKPOINT, STORE, TIMED_OUT

pytestmark = pytest.mark.slow  # real launcher and trainer processes

DIST_TIMEOUT_S = 10
# The documented worst case for a pod whose peers are on other nodes is --dist-timeout + ~1 s
# (trainer/peers.py); the rest is slack for a loaded two-core test machine.
SLACK_S = 10
PEER_LOST = re.compile(
    r"^trainer: peer lost: rank (\d+): (.+?) \((.+)\); see the other ranks' logs; "
    r"--dist-timeout=(\d+)s; resume checkpoint: (.+)$"
)


def test_a_genuine_bug_exits_1_with_its_traceback(procs: Any) -> None:
    inject = (
        "import runpy, trainer.train\n"
        "def run_training(config, started):\n"
        "    raise ValueError('injected bug')\n"
        "trainer.train.run_training = run_training\n"
        "runpy.run_module('trainer', run_name='__main__', alter_sys=True)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", inject, "--epochs=1"],
        cwd=procs.repo_root,
        env=procs.env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    assert "Traceback (most recent call last):" in result.stderr
    assert result.stderr.splitlines()[-1] == "ValueError: injected bug"
    assert "peer lost" not in result.stderr


# Loaded by every interpreter the run starts (PYTHONPATH): at its first step, rank 1 closes its
# connections while rank 0 waits in the gradients' all-reduce, then fails with a fault of its own
# (exit 3) half a second later. Rank 0 has exited 200 by then: torchrun sees the reaction first.
_RANK_1_FAILS = """
import os
import time
import torch.distributed
import trainer.engine
from trainer.errors import DataError

_average_gradients = trainer.engine.average_gradients


def average_gradients(params):
    if os.environ.get("RANK") == "1":
        time.sleep(0.5)
        torch.distributed.destroy_process_group()
        time.sleep(0.5)
        raise DataError("rank 1 injected fault")
    return _average_gradients(params)


trainer.engine.average_gradients = average_gradients
"""


@pytest.mark.parametrize("rank_start", ["fork", "exec"])
def test_the_pod_exits_with_the_failed_ranks_code_not_the_peer_it_took_down(
    procs: Any, mnist_root: Path, tmp_path: Path, rank_start: str
) -> None:
    """Rank 0 exits 200 before rank 1 exits with its fault; the pod's code is rank 1's (3, permanent),
    not the first failure torchrun finds."""
    (tmp_path / "sitecustomize.py").write_text(_RANK_1_FAILS)
    env = procs.env(PYTHONPATH=f"{tmp_path}{os.pathsep}{procs.repo_root}")
    trainer = [f"--data={mnist_root}", f"--checkpoint-dir={tmp_path / 'ckpt'}", "--train-limit=1280"]
    trainer.append(f"--dist-timeout={DIST_TIMEOUT_S}")
    args = [f"--rank-start={rank_start}", *procs.launch_args(2, trainer)]
    result = procs.run("trainer.launch", args, env=env, timeout=180)
    assert result.returncode == 3, result.stderr[-3000:]
    assert _one_peer_lost_line(result.stderr)[0] == "0"  # rank 0 did react
    assert result.stderr.splitlines()[-1] == (
        "launch: worker rank 1 failed with exit code 3 (data missing or corrupt): "
        "trainer: data: rank 1 injected fault"
    )


def test_launcher_passes_the_peer_lost_code_through(procs: Any) -> None:
    exit_200_on_rank_1 = "import os, sys; sys.exit(200 if os.environ['RANK'] == '1' else 0)"
    torchrun = [*procs.torchrun_args(2, procs.free_port())[:-2], "--no-python", sys.executable]
    result = procs.run("trainer.launch", ["--", *torchrun, "-c", exit_200_on_rank_1], timeout=120)
    assert result.returncode == EXIT_PEER_LOST, result.stderr[-3000:]
    assert result.stderr.splitlines()[-1] == (
        "launch: worker rank 1 failed with exit code 200 (peer lost: another rank died or hung; retryable)"
    )


@dataclass
class Node:
    """One pod of a two-node job: its launcher, the trainer rank under it, and its output file."""

    launcher: subprocess.Popen[str]
    log: Path
    worker: int | None = None

    def output(self) -> str:
        return self.log.read_text()


def _kill_if_trainer(pid: int | None) -> None:
    """SIGKILL a trainer process we started (SIGKILL also ends a stopped one), if it still runs."""
    if pid is None:
        return
    try:
        if b"trainer" in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


@contextmanager
def two_nodes(procs: Any, trainer_args: list[str], workdir: Path) -> Iterator[list[Node]]:
    """Two launchers as two pods would run them (nnodes=2, one rank each); every process is gone after."""
    port = procs.free_port()
    nodes: list[Node] = []
    files: list[IO[str]] = []
    try:
        for rank in (0, 1):
            log = workdir / f"node{rank}.log"
            files.append(log.open("w"))
            argv = [sys.executable, "-m", "trainer.launch", *procs.node_launch_args(rank, port, trainer_args)]
            launcher = subprocess.Popen(
                argv,
                cwd=procs.repo_root,
                env=procs.env(),
                stdout=files[-1],
                stderr=subprocess.STDOUT,
                text=True,
            )
            nodes.append(Node(launcher, log))
        yield nodes
    finally:
        for node in nodes:
            _kill_if_trainer(node.worker)
            node.launcher.kill()
            node.launcher.wait(timeout=30)
        for file in files:
            file.close()


def _after_first_checkpoint(procs: Any, nodes: list[Node], ckpt: Path) -> None:
    """Wait until epoch 1's checkpoint exists, then note each node's trainer process."""
    deadline = time.monotonic() + 120
    while not checkpoint_path(ckpt, 1).exists():
        for node in nodes:
            assert node.launcher.poll() is None, node.output()[-3000:]
        assert time.monotonic() < deadline, "no checkpoint within 120 s"
        time.sleep(0.02)
    for rank, node in enumerate(nodes):
        node.worker = procs.worker_with_rank(node.launcher.pid, rank)
        assert node.worker is not None


def _trainer_args(mnist_root: Path, ckpt: Path) -> list[str]:
    return [
        f"--data={mnist_root}",
        f"--checkpoint-dir={ckpt}",
        "--epochs=3",
        "--batch-size=64",
        "--train-limit=6400",
        f"--dist-timeout={DIST_TIMEOUT_S}",
    ]


def _one_peer_lost_line(output: str) -> tuple[str, ...]:
    lines = [line for line in output.splitlines() if line.startswith("trainer: peer lost: ")]
    assert len(lines) == 1, output[-3000:]
    match = PEER_LOST.match(lines[0])
    assert match, lines[0]
    assert "Traceback" not in output
    return match.groups()


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_a_hung_peer_ends_the_other_pod_with_200_within_the_timeout(
    procs: Any, mnist_root: Path, tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    with two_nodes(procs, _trainer_args(mnist_root, ckpt), tmp_path) as (node0, node1):
        _after_first_checkpoint(procs, [node0, node1], ckpt)
        assert node1.worker is not None
        os.kill(node1.worker, signal.SIGSTOP)
        stopped = time.monotonic()
        node0.launcher.wait(timeout=DIST_TIMEOUT_S + SLACK_S + 30)
        took = time.monotonic() - stopped
        print(f"the pod beside the hung peer exited {took:.1f} s after SIGSTOP")

        assert node0.launcher.returncode == EXIT_PEER_LOST, node0.output()[-3000:]
        # Not much sooner: the healthy rank's collective may have started just before the SIGSTOP.
        assert DIST_TIMEOUT_S - 2 <= took <= DIST_TIMEOUT_S + SLACK_S
        # Epoch 2 cannot finish without rank 1, so epoch 1's checkpoint is the one to resume from.
        assert list_checkpoints(ckpt) == [checkpoint_path(ckpt, 1)]
        rank, cause, detail, timeout, resume = _one_peer_lost_line(node0.output())
        assert (rank, cause, timeout, resume) == ("0", TIMED_OUT, "10", str(checkpoint_path(ckpt, 1)))
        timed_out = rf"Timed out waiting {DIST_TIMEOUT_S * 1000}ms for (recv|send) operation to complete"
        assert re.fullmatch(timed_out, detail), detail
        assert "launch: worker rank 0 failed with exit code 200 (peer lost" in node0.output()

        # Woken up, the hung rank finds its peer gone and exits 200 with its own line too.
        os.kill(node1.worker, signal.SIGCONT)
        node1.launcher.wait(timeout=60)
        assert node1.launcher.returncode == EXIT_PEER_LOST, node1.output()[-3000:]
        assert _one_peer_lost_line(node1.output())[0] == "1"


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_a_killed_pod_ends_the_other_pod_with_200_at_once(
    procs: Any, mnist_root: Path, tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    with two_nodes(procs, _trainer_args(mnist_root, ckpt), tmp_path) as (node0, node1):
        _after_first_checkpoint(procs, [node0, node1], ckpt)
        assert node1.worker is not None
        # A deleted pod loses every process at once: the launcher and the trainer (its own session).
        os.kill(node1.worker, signal.SIGKILL)
        os.kill(node1.launcher.pid, signal.SIGKILL)
        killed = time.monotonic()
        node0.launcher.wait(timeout=DIST_TIMEOUT_S + SLACK_S + 30)
        took = time.monotonic() - killed

        assert node0.launcher.returncode == EXIT_PEER_LOST, node0.output()[-3000:]
        assert took < DIST_TIMEOUT_S, "a closed connection is seen at once, not after the timeout"
        assert list_checkpoints(ckpt) == [checkpoint_path(ckpt, 1)]
        rank, cause, detail, timeout, resume = _one_peer_lost_line(node0.output())
        assert (rank, cause, timeout, resume) == ("0", CLOSED, "10", str(checkpoint_path(ckpt, 1)))
        assert re.search(r"Connection (closed by|reset by) peer|Broken pipe", detail), detail


def test_a_pod_that_fails_before_its_peer_joined_ends_that_peer_with_200(
    procs: Any, mnist_root: Path, tmp_path: Path
) -> None:
    # Rank 0 cannot create its checkpoint directory (a file is in the way): it exits 5 before it
    # joins the process group, and its launcher, which hosts the rendezvous store, exits with it.
    # Rank 1, still joining, loses the store: a lost peer (200, one line), not a bug (1, traceback).
    (tmp_path / "in-the-way").write_text("")
    ckpt = tmp_path / "in-the-way" / "ckpt"
    with two_nodes(procs, _trainer_args(mnist_root, ckpt), tmp_path) as (node0, node1):
        node0.launcher.wait(timeout=120)
        node1.launcher.wait(timeout=DIST_TIMEOUT_S + SLACK_S + 60)
        assert node0.launcher.returncode == EXIT_OUTPUT, node0.output()[-3000:]
        assert node1.launcher.returncode == EXIT_PEER_LOST, node1.output()[-3000:]
        rank, cause, _detail, timeout, resume = _one_peer_lost_line(node1.output())
        assert (rank, timeout, resume) == ("1", "10", NO_CHECKPOINT)
        assert cause in {
            f"{STORE} while joining the process group",
            f"{NETWORK} while joining the process group",
        }
