"""The HTTP side: routes, request limits and error replies, one thread per connection.

Endpoints (https://github.com/kserve/open-inference-protocol ``specification/protocol/inference_rest.md``)::

    GET  /v2/health/live                           200 {"live": true} as soon as the port is open
    GET  /v2/health/ready                          200 {"ready": true} once the model is loaded and its
                                                   sha256 matches SHA256SUMS; 503 {"ready": false} before
    GET  /v2                                       server metadata
    GET  /v2/models/NAME[/versions/V]              model metadata (inputs, outputs, shapes, datatypes)
    GET  /v2/models/NAME[/versions/V]/ready        model readiness (200 or 503, {"name", "ready"})
    POST /v2/models/NAME[/versions/V]/infer        inference

Every error is ``{"error": "<one line>"}``: 400 malformed JSON, wrong input name, shape or datatype,
a batch over ``--max-batch``, an unknown output; 404 unknown path, model or version; 405 wrong
method; 408 a body not sent within ``--request-timeout``; 411 no Content-Length; 413 a
Content-Length over ``--max-body-bytes`` (refused before the body is read, and before ``100
Continue`` when the client asks; the connection is then closed); 503 the model is not ready yet; 500
a bug (logged on the server, never sent).

The binary tensor data extension (what tritonclient and KServe's client send by default): a request
with ``Inference-Header-Content-Length: N`` is N bytes of JSON followed by each input's raw
little-endian data, in the inputs' order, each input naming its size in
``parameters.binary_data_size``; outputs come back raw too when the request asks
(``parameters.binary_data_output`` for all, an output's ``parameters.binary_data`` for one), with the
response's own ``Inference-Header-Content-Length`` and ``Content-Type: application/octet-stream``.
The whole body counts against ``--max-body-bytes``; a header length or sizes that do not add up to the
body are a 400 like any malformed request.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from trainer.errors import TrainerError, write_line
from trainer.serve.config import DEFAULT_REQUEST_TIMEOUT_S, PROG, SERVER_NAME, SERVER_VERSION, ServeConfig
from trainer.serve.protocol import BINARY, HttpError, Model, attach_binary_inputs

EXIT_LISTEN = 8
EXTENSIONS = ["binary_tensor_data"]


class ServeError(TrainerError):
    """The port cannot be opened."""

    exit_code = EXIT_LISTEN
    topic = "listen"


class Handler(BaseHTTPRequestHandler):
    """One request at a time per connection (HTTP/1.1 keep-alive); the server runs one thread each."""

    protocol_version = "HTTP/1.1"
    server_version = SERVER_NAME
    sys_version = ""
    disable_nagle_algorithm = True  # headers and body go out at once, no 40 ms delayed-ACK stalls
    timeout = DEFAULT_REQUEST_TIMEOUT_S  # replaced by --request-timeout in setup()
    allow = ""  # the Allow header of a 405 reply
    body_read = False
    server: Server

    def setup(self) -> None:
        """The connection's socket timeout: how long it may stay idle or take to send a body."""
        # An instance attribute on purpose: StreamRequestHandler.setup reads self.timeout.
        self.timeout = self.server.model.config.request_timeout  # type: ignore[misc]
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """No access log: one line per request would drown the start line and the errors."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self.dispatch("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self.dispatch("PUT")

    def do_DELETE(self) -> None:  # noqa: N802
        self.dispatch("DELETE")

    def dispatch(self, method: str) -> None:
        with self.server.answering():
            self._dispatch(method)

    def _dispatch(self, method: str) -> None:
        self.body_read = False
        try:
            status, body = self.route(method)
        except HttpError as error:
            status, body = error.status, {"error": error.message}
        except Exception as error:  # a bug: logged here, never sent to the client
            write_line(f"{PROG}: internal error on {method} {self.path}: {type(error).__name__}: {error}")
            status, body = 500, {"error": "internal error; see the server's log"}
        if not self.body_read and self.headers.get("Content-Length", "0") != "0":
            self.close_connection = True  # a body left unread would be taken for the next request
        self.reply(status, body)

    def handle_expect_100(self) -> bool:
        """``Expect: 100-continue`` (curl sends it for bodies over 1 KiB): an oversized body is refused
        with 413 at once, so the client never sends it; any other request is told to go on."""
        limit = self.server.model.config.max_body_bytes
        length = self.headers.get("Content-Length", "")
        if length.isdigit() and int(length) > limit:
            self.close_connection = True
            self.reply(413, {"error": f"request body of {length} bytes is over the limit of {limit} bytes"})
            return False
        return super().handle_expect_100()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (bad request line, headers too long) in the protocol's shape."""
        self.close_connection = True
        text = message or self.responses.get(code, ("error",))[0]
        self.reply(code, {"error": text})

    def route(self, method: str) -> tuple[int, dict[str, Any]]:
        model = self.server.model
        path = self.path.split("?", 1)[0].rstrip("/")
        parts = path.split("/")[1:]
        if parts[:1] != ["v2"]:
            raise HttpError(404, f"no such path {path or '/'!r}; the API is under /v2")
        rest = parts[1:]
        if rest in ([], ["health", "live"], ["health", "ready"]):
            self.only(method, "GET")
            if not rest:
                return 200, {"name": SERVER_NAME, "version": SERVER_VERSION, "extensions": EXTENSIONS}
            if rest[1] == "live":
                return 200, {"live": True}
            return (200 if model.ready else 503), {"ready": model.ready}
        if rest[:1] != ["models"] or len(rest) < 2:
            raise HttpError(404, f"no such path {path!r}")
        name, tail = rest[1], rest[2:]
        if name != model.config.model_name:
            raise HttpError(404, f"model {name!r} not found; this server serves {model.config.model_name!r}")
        if tail[:1] == ["versions"]:
            if len(tail) < 2:
                raise HttpError(404, f"no such path {path!r}")
            if tail[1] != model.config.model_version:
                raise HttpError(
                    404,
                    f"model {name!r} has no version {tail[1]!r}; it serves {model.config.model_version!r}",
                )
            tail = tail[2:]
        if tail == []:
            self.only(method, "GET")
            return 200, model.metadata()
        if tail == ["ready"]:
            self.only(method, "GET")
            return (200 if model.ready else 503), {"name": name, "ready": model.ready}
        if tail == ["infer"]:
            self.only(method, "POST")
            request = self.read_request()
            if not model.loaded.is_set():  # a draining server (not ready) still answers
                raise HttpError(503, f"model {name!r} is not ready yet (loading {model.config.model_uri})")
            return 200, model.infer(request)
        raise HttpError(404, f"no such path {path!r}")

    def only(self, method: str, allowed: str) -> None:
        if method != allowed:
            self.allow = allowed
            raise HttpError(405, f"{method} is not allowed on {self.path}; use {allowed}")

    def read_request(self) -> Any:
        """The inference request: JSON, or with the binary extension its JSON header with each binary
        input's bytes attached to it (`protocol.BINARY`)."""
        header = self.headers.get("Inference-Header-Content-Length")
        body = self.read_body()
        if header is None:
            return parse_json(body)
        if not header.strip().isdigit() or int(header) > len(body):
            where = f"within the {len(body)}-byte body"
            raise HttpError(400, f"Inference-Header-Content-Length {header!r} is not a length {where}")
        return attach_binary_inputs(parse_json(body[: int(header)]), body[int(header) :])

    def read_body(self) -> bytes:
        """The request body; the size is checked from Content-Length before reading."""
        if self.headers.get("Transfer-Encoding") is not None or self.headers.get("Content-Length") is None:
            self.close_connection = True
            raise HttpError(411, "a Content-Length header is required (no chunked bodies)")
        try:
            length = int(self.headers["Content-Length"])
        except ValueError:
            self.close_connection = True
            raise HttpError(400, "Content-Length is not a number") from None
        limit = self.server.model.config.max_body_bytes
        if length < 0:
            self.close_connection = True
            raise HttpError(400, "Content-Length is negative")
        if length > limit:
            self.close_connection = True  # the body is never read: this connection cannot go on
            raise HttpError(413, f"request body of {length} bytes is over the limit of {limit} bytes")
        try:
            body = self.rfile.read(length)
        except TimeoutError:
            self.close_connection = True
            raise HttpError(408, f"request body not received within {self.timeout} s") from None
        self.body_read = True
        if len(body) != length:
            self.close_connection = True
            raise HttpError(400, f"request body ended after {len(body)} of {length} bytes")
        return body

    def reply(self, status: int, body: dict[str, Any]) -> None:
        blobs: list[bytes] = body.pop(BINARY, None) or []
        payload = json.dumps(body, separators=(",", ":")).encode()
        content_type = "application/octet-stream" if blobs else "application/json"
        head = [
            f"{self.protocol_version} {status} {self.responses.get(status, ('',))[0]}",
            f"Content-Type: {content_type}",
            f"Content-Length: {len(payload) + sum(len(b) for b in blobs)}",
        ]
        if blobs:
            head.append(f"Inference-Header-Content-Length: {len(payload)}")
            payload += b"".join(blobs)
        if getattr(self, "allow", None):
            head.append(f"Allow: {self.allow}")
        if self.close_connection:
            head.append("Connection: close")
        self.log_request(status)
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload)
        self.allow = ""


def parse_json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as error:
        raise HttpError(400, f"request body is not valid JSON ({error})") from None


class Server(ThreadingHTTPServer):
    """One thread per connection; counts the requests being answered, so that a stop (SIGTERM: the pod
    deleted, or replaced by a rollout) answers every request already received before the process ends."""

    daemon_threads = True  # an idle keep-alive connection never holds the process up
    request_queue_size = 128  # the listen backlog (socketserver's default of 5 refuses bursts)
    model: Model

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self._in_flight = 0
        self._idle = threading.Condition()

    @contextlib.contextmanager
    def answering(self) -> Iterator[None]:
        """Around one request, from its first line read to its reply written."""
        with self._idle:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()

    def drain(self, timeout: float) -> int:
        """Wait until no request is being answered (at most `timeout` s); how many still are."""
        with self._idle:
            self._idle.wait_for(lambda: self._in_flight == 0, timeout)
            return self._in_flight

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that broke mid-request (client gone): one line, the server goes on."""
        error = sys.exc_info()[1]
        write_line(f"{PROG}: connection from {client_address[0]} failed: {type(error).__name__}: {error}")


def open_server(config: ServeConfig, model: Model) -> Server:
    try:
        server = Server((config.host, config.port), Handler)
    except OSError as error:
        raise ServeError(
            f"cannot listen on {config.host}:{config.port} ({error.strerror or error})"
        ) from None
    server.model = model
    return server
