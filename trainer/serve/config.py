"""The server's settings from its flags, and the names it shares with the trainer and its clients."""

from __future__ import annotations

from dataclasses import dataclass

PROG = "trainer.serve"
# trainer.metrics.MODEL_FILE and LINEAGE_FILE and trainer.mnist_files.SUMS_FILE (a test keeps them equal),
# named here so that flags are checked and the port opens before torch is imported.
MODEL_FILE = "model.pt"
LINEAGE_FILE = "lineage.json"
SUMS_FILE = "SHA256SUMS"
DEFAULT_PORT = 8080
DEFAULT_MAX_BATCH = 256
# The largest request a client can need for --max-batch images: FP32 values as JSON text (what standard
# clients send without the binary extension: a float32 widened to a double prints at most 24
# characters, "-1.2345678910434246e-05", plus its ", "), or as binary data (4 bytes each), plus the
# JSON header and its names.
IMAGE_VALUES = 28 * 28
JSON_BYTES_PER_VALUE = 26
HEADER_ALLOWANCE = 64 << 10
DEFAULT_REQUEST_TIMEOUT_S = 120
# Inference requests answered at once; the others get 503 with Retry-After (health and metadata are
# never held back). Each may take a multiple of its body in memory while its JSON is parsed.
DEFAULT_MAX_REQUESTS = 4
# Connections open at once; the next is answered 503 and closed (a thread each).
DEFAULT_MAX_CONNECTIONS = 64
# Seconds a stopping server (SIGTERM: its pod deleted or replaced) keeps answering after it turned
# not-ready: the endpoint's removal reaches every node's kube-proxy some time after the signal.
DEFAULT_DRAIN_S = 5
SERVER_NAME = "trainer.serve"
SERVER_VERSION = "1"


def body_limit(max_batch: int) -> int:
    """The largest body a request for `max_batch` images needs (see JSON_BYTES_PER_VALUE)."""
    return max_batch * IMAGE_VALUES * JSON_BYTES_PER_VALUE + HEADER_ALLOWANCE


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
    max_requests: int = DEFAULT_MAX_REQUESTS
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    # A SHA256SUMS the model must match besides the one beside it: the job's own, where only the job
    # writes (its checkpoint volume), so that whoever may write the export cannot swap both.
    sums_from: str | None = None
    # The probes' own port (trainer/serve/health.py); 0: they use `port`.
    health_port: int = 0
