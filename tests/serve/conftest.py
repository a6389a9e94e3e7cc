"""Fixtures for the serving tier: one small model trained once, servers started as real processes."""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.conftest import (  # noqa: F401 - fixtures shared with the trainer tier
    REPO_ROOT,
    SHARED_MNIST,
    free_port,
    s3_server,
    subprocess_env,
)

MODEL_VERSION = "run-1"


@dataclass
class ServeProcess:
    """A ``python -m trainer.serve`` process on 127.0.0.1 and a keep-alive HTTP client for it."""

    process: subprocess.Popen[str]
    port: int
    connection: http.client.HTTPConnection | None = field(default=None, repr=False)

    def call(self, method: str, path: str, body: Any = None, raw: bytes | None = None) -> tuple[int, Any]:
        """One request; the status and the decoded JSON body (a new connection after a closed one)."""
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        for attempt in (1, 2):
            if self.connection is None:
                self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            try:
                headers = {"Content-Type": "application/json"} if data is not None else {}
                self.connection.request(method, path, body=data, headers=headers)
                response = self.connection.getresponse()
                payload = response.read()
            except (ConnectionError, http.client.HTTPException):
                self.connection.close()
                self.connection = None
                if attempt == 2:
                    raise
                continue
            if response.getheader("Connection", "").lower() == "close":
                self.connection.close()
                self.connection = None
            assert response.getheader("Content-Type") == "application/json"
            return response.status, json.loads(payload)
        raise AssertionError("unreachable")

    def call_with_headers(
        self, method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, Any]:
        """One request with extra headers on a fresh connection; the status and the JSON body."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request(
                method, path, body=body, headers={"Content-Type": "application/octet-stream", **headers}
            )
            response = connection.getresponse()
            return response.status, json.loads(response.read())
        finally:
            connection.close()

    def raw(self, request: bytes) -> tuple[int, Any]:
        """Send ``request`` bytes as they are on a fresh connection; the status and JSON body."""
        with socket_to(self.port) as sock:
            sock.sendall(request)
            reply = b""
            while chunk := sock.recv(65536):
                reply += chunk
        head, _, body = reply.partition(b"\r\n\r\n")
        return int(head.split()[1]), json.loads(body)

    def stop(self) -> tuple[int, str, str]:
        """SIGTERM, then the exit code, stdout and stderr."""
        if self.connection is not None:
            self.connection.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        out, err = self.process.communicate(timeout=30)
        return self.process.returncode, out, err


def socket_to(port: int) -> Any:
    import socket

    return socket.create_connection(("127.0.0.1", port), timeout=30)


def start_server(model_uri: str, *flags: str, env: dict[str, str] | None = None) -> ServeProcess:
    port = free_port()
    args = [f"--model-uri={model_uri}", f"--model-version={MODEL_VERSION}", "--host=127.0.0.1"]
    process = subprocess.Popen(
        [sys.executable, "-m", "trainer.serve", *args, f"--port={port}", *flags],
        cwd=REPO_ROOT,
        env=env or subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    server = ServeProcess(process, port)
    wait_until(lambda: answers(server), f"the server on port {port} to listen", process)
    return server


def answers(server: ServeProcess) -> bool:
    try:
        with socket_to(server.port):
            return True
    except OSError:
        return False


def wait_until(condition: Any, what: str, process: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def wait_ready(server: ServeProcess, timeout: float = 60) -> None:
    wait_until(lambda: server.call("GET", "/v2/health/ready")[0] == 200, "ready", server.process, timeout)
    assert server.process.poll() is None, server.stop()


def train(output_dir: Path, args: Sequence[str] = ()) -> Path:
    """A tiny real run of ``python -m trainer`` (about 10 s); its output directory."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer",
            f"--data={SHARED_MNIST}",
            f"--checkpoint-dir={output_dir}",
            "--epochs=1",
            "--batch-size=64",
            "--train-limit=2048",
            *args,
        ],
        cwd=REPO_ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return output_dir


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The output directory of one small training run: model.pt, metrics.json, SHA256SUMS."""
    if not SHARED_MNIST.is_dir():
        pytest.skip(f"real MNIST not found at {SHARED_MNIST}")
    return train(tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="session")
def server(trained: Path) -> Iterator[ServeProcess]:
    """The trained model served from its output directory with the default limits."""
    serving = start_server(str(trained))
    wait_ready(serving)
    yield serving
    code, _, err = serving.stop()
    assert code == 0, err
    assert "Traceback" not in err, err
