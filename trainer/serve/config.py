"""The server's settings from its flags, and the names it shares with the trainer and its clients."""

from __future__ import annotations

from dataclasses import dataclass

PROG = "trainer.serve"
# trainer.metrics.MODEL_FILE and trainer.mnist_files.SUMS_FILE (a test keeps them equal), named here so that
# flags are checked and the port opens before torch is imported.
MODEL_FILE = "model.pt"
SUMS_FILE = "SHA256SUMS"
DEFAULT_PORT = 8080
DEFAULT_MAX_BATCH = 256
DEFAULT_MAX_BODY_BYTES = 16 << 20
DEFAULT_REQUEST_TIMEOUT_S = 120
# Seconds a stopping server (SIGTERM: its pod deleted or replaced) keeps answering after it turned
# not-ready: the endpoint's removal reaches every node's kube-proxy some time after the signal.
DEFAULT_DRAIN_S = 5
SERVER_NAME = "trainer.serve"
SERVER_VERSION = "1"


@dataclass(frozen=True)
class ServeConfig:
    model_uri: str
    model_name: str
    model_version: str
    host: str
    port: int
    max_batch: int
    max_body_bytes: int
    threads: int
    request_timeout: int = DEFAULT_REQUEST_TIMEOUT_S
    drain_seconds: int = DEFAULT_DRAIN_S
