"""The torchrun wrapper: unexpanded $(VAR), bounded master wait, child exit codes preserved."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from trainer.launch import failure_exit_code, unexpanded_reference, wait_for_master


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


def test_master_unreachable_exits_6_within_the_bound(procs: Any) -> None:
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
    assert result.returncode == 6
    assert 3 <= took < 20
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"launch: waiting for master 127.0.0.1:{port} (0/3 s): ")
    assert lines[-1].startswith(
        f"launch: master 127.0.0.1:{port} not reachable within --master-wait-timeout=3 s "
    )
    assert lines[-1].endswith("; is the master pod running?")


def test_wait_retries_dns_failures_until_the_bound() -> None:
    lines: list[str] = []
    with pytest.raises(Exception) as caught:
        wait_for_master("no-such-host.invalid", 1, 1.0, lines.append)
    assert getattr(caught.value, "exit_code", None) == 6
    assert lines and lines[0].startswith("waiting for master no-such-host.invalid:1 ")


@pytest.mark.parametrize(("exitcode", "expected"), [(3, 3), (4, 4), (-9, 137), (-15, 143)])
def test_failure_exit_code(exitcode: int, expected: int) -> None:
    assert failure_exit_code(exitcode) == expected


def test_child_exit_code_survives_torchrun(procs: Any, tmp_path: Path) -> None:
    missing = tmp_path / "nothing-here"
    args = procs.launch_args(2, [f"--data={missing}", f"--checkpoint-dir={tmp_path / 'c'}"])
    result = procs.run("trainer.launch", args)
    assert result.returncode == 3, result.stderr[-3000:]
    message = (
        f"trainer: data: {missing}/MNIST/raw/train-images-idx3-ubyte(.gz) not found; "
        "seed it with 'python -m trainer.seed --from DIR --to ROOT' (or --download)"
    )
    assert message in result.stderr.splitlines()
    assert "launch: worker rank " in result.stderr
