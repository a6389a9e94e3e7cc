"""A stand-in MLflow tracking server on 127.0.0.1 that records every request it gets.

It answers the routes the trainer uses with MLflow 3.17.2's reply shapes (``mlflow/server/handlers.py``:
``_get_experiment_by_name``'s 404 ``RESOURCE_DOES_NOT_EXIST`` for a missing experiment,
``_create_run``'s ``{"run": {"info": {...}}}`` with an ``mlflow-artifacts:/`` artifact URI as
``mlflow server --serve-artifacts`` gives, ``{}`` for log-batch, update and an artifact PUT). It checks
nothing itself: the tests assert on :attr:`Recorder.requests`. ``refuse`` makes every reply an MLflow
error; ``silent`` makes the server accept connections and never answer.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.jsonhttp import JsonHandler

RUN_ID = "0123456789abcdef0123456789abcdef"
EXPERIMENT_ID = "7"


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Recorder:
    url: str
    requests: list[Request] = field(default_factory=list)
    refuse: tuple[int, str] | None = None  # (HTTP status, error_code) for every request
    existing_run: bool = True  # runs/get finds RUN_ID

    def routes(self) -> list[tuple[str, str]]:
        return [(r.method, r.path) for r in self.requests]

    def to(self, path: str) -> list[Request]:
        return [r for r in self.requests if r.path == path]


def _handler(recorder: Recorder) -> type[JsonHandler]:
    class Handler(JsonHandler):
        def _serve(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            request = Request(self.command, parts.path, parse_qs(parts.query), dict(self.headers), body)
            recorder.requests.append(request)
            self.answer(*self._reply(request))

        def _reply(self, request: Request) -> tuple[int, dict[str, Any]]:
            if recorder.refuse is not None:
                status, code = recorder.refuse
                return status, {"error_code": code, "message": "refused by the stand-in"}
            path = request.path
            if path.endswith("/experiments/get-by-name"):
                return 404, {"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "no such experiment"}
            if path.endswith("/experiments/create"):
                return 200, {"experiment_id": EXPERIMENT_ID}
            if path.endswith("/runs/create") or path.endswith("/runs/get"):
                if path.endswith("/runs/get") and not recorder.existing_run:
                    return 404, {"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "no such run"}
                info = {
                    "run_id": RUN_ID,
                    "experiment_id": EXPERIMENT_ID,
                    "status": "RUNNING",
                    "artifact_uri": f"mlflow-artifacts:/{EXPERIMENT_ID}/{RUN_ID}/artifacts",
                }
                return 200, {"run": {"info": info, "data": {}}}
            return 200, {}

        do_GET = do_POST = do_PUT = _serve

    return Handler


@contextmanager
def recording_server() -> Iterator[Recorder]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(Recorder("")))
    recorder = Recorder(f"http://127.0.0.1:{server.server_address[1]}")
    server.RequestHandlerClass = _handler(recorder)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def silent_server() -> Iterator[str]:
    """A port that accepts connections (the kernel's backlog) and never answers: a hung server."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
