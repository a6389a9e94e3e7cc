"""The HTTP side: routes, request limits and error replies, one thread per connection.

Bounded by design, so that no caller that can reach it pushes it past its memory limit or holds its
threads: the body limit follows ``--max-batch`` (``config.body_limit``: the largest request a
standard client needs, refused by its Content-Length before a byte is read), at most
``--max-requests`` inference requests are parsed and answered at once (each may take a multiple of its
body while its JSON is parsed; the next waits for a slot with its body read, until its deadline, then
gets 503 with ``Retry-After``), the request bodies held at once stay within a budget of
``BODY_BUDGET_BODIES`` bodies at the limit per slot (counted as the bytes arrive, so a slow body holds
little; past it, 503), the JSON objects of a body are counted as it is parsed, at most ``--max-connections``
connections are open (the next is answered 503 and closed), and ``--request-timeout`` bounds each
whole request from its first byte, not each read: a connection idle that long between requests, or
slow to send its request line and headers, is closed; a body not received within it gets 408. Health,
readiness and metadata never wait for a slot.

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
Continue`` when the client asks; the connection is then closed); 503 the model is not ready yet, or
every request slot or connection is taken (with ``Retry-After``); 500 a bug (logged on the server,
never sent).

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

import io
import json
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, cast

from trainer.errors import TrainerError, write_line
from trainer.serve.config import DEFAULT_REQUEST_TIMEOUT_S, PROG, SERVER_NAME, SERVER_VERSION, ServeConfig
from trainer.serve.connections import BODY_BUDGET_BODIES, RETRY_AFTER_S, Server
from trainer.serve.protocol import BINARY, HttpError, Model, attach_binary_inputs, parse_json

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
    retry_after = 0  # the Retry-After header of a 503 reply (0: none)
    held = 0  # bytes of this request's body counted against the server's body budget
    body_read = False
    request_started = 0.0
    server: Server

    def setup(self) -> None:
        """The connection's socket timeout: how long it may stay idle or take to send a body."""
        # An instance attribute on purpose: StreamRequestHandler.setup reads self.timeout.
        self.timeout = self.server.model.config.request_timeout  # type: ignore[misc]
        super().setup()

    def handle_one_request(self) -> None:
        """Each request must arrive whole within --request-timeout of its first byte; a keep-alive
        connection may wait that long for it (idle), and is closed past it. The idle wait is not the
        request's: a client that reuses a connection idle for most of the timeout still has the whole
        timeout to send its request (as Go's net/http starts a request's clock at its first byte)."""
        if not self.server.awaiting(self.connection, time.monotonic() + self.timeout):
            self.close_connection = True
            return
        try:
            # The idle wait (rfile is buffered: StreamRequestHandler.rbufsize): the reaper ends it.
            first = cast(io.BufferedReader, self.rfile).peek(1)
        except OSError:  # TimeoutError included
            first = b""
        if not first:
            self.close_connection = True  # closed by the client, or idle past the deadline
            return
        self.request_started = time.monotonic()
        if not self.server.awaiting(self.connection, self.request_started + self.timeout):
            self.close_connection = True  # closed for idleness as the request came: nothing is written
            return
        super().handle_one_request()

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
        with self.server.answering(self.connection):
            try:
                self._dispatch(method)
            finally:
                self.server.hold(-self.held)
                self.held = 0

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
            body = self.read_body()  # held within the server's body budget
            # A burst waits for a slot (its body read, not yet parsed), within the request's deadline.
            wait = max(0.0, self.request_started + self.timeout - time.monotonic())
            if not self.server.slots.acquire(timeout=wait):
                self.retry_after = RETRY_AFTER_S
                limit = model.config.max_requests
                raise HttpError(503, f"busy: {limit} inference requests are being answered; retry later")
            try:
                request = self.decode_request(body)
                if not model.loaded.is_set():  # a draining server (not ready) still answers
                    self.retry_after = RETRY_AFTER_S
                    raise HttpError(503, f"model {name!r} is not ready yet")
                return 200, model.infer(request)
            finally:
                self.server.slots.release()
        raise HttpError(404, f"no such path {path!r}")

    def only(self, method: str, allowed: str) -> None:
        if method != allowed:
            self.allow = allowed
            raise HttpError(405, f"{method} is not allowed on {self.path}; use {allowed}")

    def decode_request(self, body: bytes) -> Any:
        """The inference request: JSON, or with the binary extension its JSON header with each binary
        input's bytes attached to it (`protocol.BINARY`)."""
        header = self.headers.get("Inference-Header-Content-Length")
        most = self.server.model.config.max_batch
        if header is None:
            return parse_json(body, most)
        if not header.strip().isdigit() or int(header) > len(body):
            where = f"within the {len(body)}-byte body"
            raise HttpError(400, f"Inference-Header-Content-Length {header!r} is not a length {where}")
        return attach_binary_inputs(parse_json(body[: int(header)], most), body[int(header) :])

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
        body = self.read_until_deadline(length)
        self.body_read = True
        if len(body) != length:
            self.close_connection = True
            raise HttpError(400, f"request body ended after {len(body)} of {length} bytes")
        return body

    def read_until_deadline(self, length: int) -> bytes:
        """`length` bytes of body (fewer if the client closes), all within the request's deadline: a
        body trickled a byte at a time gets its 408 when the deadline passes, not a read timeout later."""
        deadline = self.request_started + self.timeout
        chunks: list[bytes] = []
        remaining = length
        try:
            while remaining:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                self.connection.settimeout(left)
                chunk = self.rfile.read1(min(remaining, 1 << 16))
                if not chunk:
                    break
                if not self.server.hold(len(chunk)):
                    self.close_connection = True
                    self.retry_after = RETRY_AFTER_S
                    raise HttpError(503, "busy: too many request bodies being received; retry later")
                self.held += len(chunk)
                chunks.append(chunk)
                remaining -= len(chunk)
        except TimeoutError:
            self.close_connection = True
            raise HttpError(408, f"request body not received within {self.timeout} s") from None
        finally:
            self.connection.settimeout(self.timeout)
        return b"".join(chunks)

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
        if status == 503 and self.retry_after:
            head.append(f"Retry-After: {self.retry_after}")
        if self.close_connection:
            head.append("Connection: close")
        self.log_request(status)
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload)
        self.allow = ""
        self.retry_after = 0


def open_server(config: ServeConfig, model: Model) -> Server:
    try:
        server = Server((config.host, config.port), Handler)
    except OSError as error:
        raise ServeError(
            f"cannot listen on {config.host}:{config.port} ({error.strerror or error})"
        ) from None
    server.model = model
    server.slots = threading.BoundedSemaphore(config.max_requests)
    server.body_budget = BODY_BUDGET_BODIES * config.max_requests * config.max_body_bytes
    return server
