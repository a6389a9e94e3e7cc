"""The probes' own listener (``--health-port``): ``GET /v2/health/live`` and ``/v2/health/ready`` on a
port of their own, so that clients holding every one of the service port's ``--max-connections`` (slow,
numerous, or reconnecting as fast as they are refused) make the kubelet's probes neither fail nor restart
the server. The pod's Service and its NetworkPolicy name the service port only; this one is for the
kubelet, which probes from the node.

Bounded too: at most ``HEALTH_MAX_CONNECTIONS`` open (the next is closed unanswered), one request per
connection, each due within ``HEALTH_TIMEOUT_S``.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from trainer.serve.config import SERVER_NAME
from trainer.serve.protocol import Model

HEALTH_MAX_CONNECTIONS = 8
HEALTH_TIMEOUT_S = 5
PATHS = ("/v2/health/live", "/v2/health/ready")


class HealthServer(ThreadingHTTPServer):
    daemon_threads = True
    model: Model

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(address, HealthHandler)
        self._open = threading.BoundedSemaphore(HEALTH_MAX_CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._open.acquire(blocking=False):
            self.shutdown_request(request)  # full: closed unanswered, the probe counts a failure
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._open.release()


class HealthHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # one request per connection, as the kubelet's probes make them
    server_version = SERVER_NAME
    sys_version = ""
    timeout = HEALTH_TIMEOUT_S
    server: HealthServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """No access log: a probe every few seconds would drown the server's lines."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = self.path.split("?", 1)[0].rstrip("/")
        ready = self.server.model.ready
        if path == PATHS[0]:
            self.reply(200, {"live": True})
        elif path == PATHS[1]:
            self.reply(200 if ready else 503, {"ready": ready})
        else:
            self.reply(404, {"error": f"no such path {path or '/'!r}; this port answers {', '.join(PATHS)}"})

    def reply(self, status: int, body: dict[str, Any]) -> None:
        payload = json.dumps(body, separators=(",", ":")).encode()
        self.send_response_only(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(payload)


def open_health_server(host: str, port: int, model: Model) -> HealthServer:
    """The probes' listener; OSError when the port cannot be opened."""
    server = HealthServer((host, port))
    server.model = model
    return server
