"""The base of the tests' small JSON HTTP stand-ins (an API server, an MLflow server, Trainer's status
server): quiet, and one way to answer."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any


class JsonHandler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def answer(self, status: int, payload: Any) -> None:
        """`payload` as a JSON body with `status`."""
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
