"""``python -m trainer.serve``: the trained model behind the Open Inference Protocol (KServe V2) over REST.

Usage (the serving pods run exactly this, in the trainer image)::

    python -m trainer.serve --model-uri URI [--model-name mnist] [--model-version RUN_ID]
                            [--host 0.0.0.0] [--port 8080] [--max-batch 256]
                            [--max-body-bytes 16777216] [--request-timeout 120] [--threads 0]

``--model-uri`` is either ``s3://BUCKET/PREFIX/`` (what ``python -m trainer --export-to`` wrote:
model.pt, metrics.json, SHA256SUMS; endpoint and keys from ``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, as for the trainer) or a directory
holding model.pt and SHA256SUMS, e.g. a run's output directory on the checkpoint volume mounted
read-only at ``/checkpoints/<job>`` (the trainer writes a SHA256SUMS of model.pt beside it).

Endpoints (https://github.com/kserve/open-inference-protocol ``specification/protocol/inference_rest.md``)::

    GET  /v2/health/live                           200 {"live": true} as soon as the port is open
    GET  /v2/health/ready                          200 {"ready": true} once the model is loaded and its
                                                   sha256 matches SHA256SUMS; 503 {"ready": false} before
    GET  /v2                                       server metadata
    GET  /v2/models/NAME[/versions/V]              model metadata (inputs, outputs, shapes, datatypes)
    GET  /v2/models/NAME[/versions/V]/ready        model readiness (200 or 503, {"name", "ready"})
    POST /v2/models/NAME[/versions/V]/infer        inference

The one input, ``images``, is ``UINT8 [N, 28, 28]`` (pixels 0-255, as in the MNIST files) or
``FP32 [N, 1, 28, 28]`` (the model's own input: pixels scaled to [0, 1], then normalised with the
MNIST mean 0.1307 and std 0.3081), its ``data`` flattened row-major (nested lists are accepted too).
The outputs are ``probabilities`` (``FP32 [N, 10]``, softmax) and ``labels`` (``INT64 [N]``); a
request's ``outputs`` selects and orders them, and its ``id`` is returned (one is made when absent).
Every error is ``{"error": "<one line>"}``: 400 malformed JSON, wrong input name, shape or datatype,
a batch over ``--max-batch``, an unknown output; 404 unknown path, model or version; 405 wrong
method; 408 a body not sent within ``--request-timeout``; 411 no Content-Length; 413 a
Content-Length over ``--max-body-bytes`` (refused before the body is read, and before ``100
Continue`` when the client asks; the connection is then closed); 503 the model is not ready yet; 500
a bug (logged on the server, never sent). The binary tensor extension
(``Inference-Header-Content-Length``) is not supported (400).

Start-up: the port opens first (live, not ready) and the model loads in the background, so a
readiness probe keeps the pod out of rotation until the checksum is verified. When the model is
ready, one line says so (model, version, where from, its sha256 verified, the address). A model that
cannot be loaded ends the process with one line on stderr and an exit code, so the pod restarts and
reads the model, and the Secret's keys, again (a fixed upload or key is picked up; a checksum
mismatch never serves):

====  =====================================================================
code  meaning
====  =====================================================================
0     stopped by SIGTERM or SIGINT
1     internal error (a bug)
2     bad flags
3     model missing or corrupt: no model.pt or SHA256SUMS, SHA256SUMS does not list model.pt,
      sha256 mismatch, or model.pt is not this model's state_dict
4     S3 credentials missing or rejected
5     S3 endpoint unreachable
8     cannot listen on --host/--port (address in use, not permitted)
====  =====================================================================

Why a small server on the standard library (``http.server.ThreadingHTTPServer``) and not KServe's
Python model server (``kserve`` on PyPI), the reference implementation: under constraints.txt pip
resolves ``kserve`` to 0.16.0, and its closure is 59 packages (``pip install --dry-run --report``),
most of which the trainer image does not have (fastapi, starlette, uvicorn with uvloop and
httptools, pandas, grpcio-tools, the kubernetes client, aiohttp, orjson, prometheus-client,
cloudevents, ...). It would fit beside
torch 2.13.0 and pulumi's grpcio/protobuf pins (``pip install --dry-run -c constraints.txt kserve``
resolves without changing them), but the protocol's REST part that this model needs is six routes
over JSON, so the image keeps torch + boto3 only. KServe's own ``InferenceRESTClient`` (0.16.0,
protocol v2) works against this server unmodified.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import itertools
import json
import math
import os
import signal
import sys
import threading
import uuid
from array import array
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NoReturn

from trainer.errors import (
    EXIT_DATA,
    EXIT_INTERNAL,
    EXIT_S3_CREDENTIALS,
    EXIT_S3_UNREACHABLE,
    EXIT_USAGE,
    DataError,
    TrainerError,
    write_line,
)

PROG = "trainer.serve"
# trainer.metrics.MODEL_FILE and trainer.data.SUMS_FILE (a test keeps them equal), named here so that
# flags are checked and the port opens before torch is imported.
MODEL_FILE = "model.pt"
SUMS_FILE = "SHA256SUMS"
EXIT_LISTEN = 8
# Every exit code of the process and its short meaning (the README's table is kept in step by a test).
EXIT_CODE_MEANINGS = {
    0: "stopped by SIGTERM or SIGINT",
    EXIT_INTERNAL: "internal error",
    EXIT_USAGE: "bad flags",
    EXIT_DATA: "model missing or corrupt",
    EXIT_S3_CREDENTIALS: "S3 credentials missing or rejected",
    EXIT_S3_UNREACHABLE: "S3 endpoint unreachable",
    EXIT_LISTEN: "cannot listen",
}
DEFAULT_PORT = 8080
DEFAULT_MAX_BATCH = 256
DEFAULT_MAX_BODY_BYTES = 16 << 20
DEFAULT_REQUEST_TIMEOUT_S = 120
INPUT_NAME = "images"
OUTPUTS = ("probabilities", "labels")
CLASSES = 10
SERVER_NAME = "trainer.serve"
SERVER_VERSION = "1"
# The accepted input layouts: datatype -> (shape after the batch dimension, array typecode).
INPUT_LAYOUTS: dict[str, tuple[tuple[int, ...], str]] = {
    "UINT8": ((28, 28), "B"),
    "FP32": ((1, 28, 28), "f"),
}


class ServeError(TrainerError):
    """The port cannot be opened."""

    exit_code = EXIT_LISTEN
    topic = "listen"


class HttpError(Exception):
    """A request the server refuses: its status and one line for ``{"error": ...}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = " ".join(message.split())


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


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{PROG}: usage: {message} (see 'python -m trainer.serve --help')\n")
        sys.exit(EXIT_USAGE)


def integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def positive(text: str) -> int:
    value = integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def port_number(text: str) -> int:
    value = positive(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port (1-65535)")
    return value


def non_negative(text: str) -> int:
    value = integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def build_parser() -> OneLineParser:
    parser = OneLineParser(
        prog="python -m trainer.serve",
        description="Serve the trained MNIST model over the Open Inference Protocol (KServe V2 REST).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--model-uri",
        required=True,
        help="s3://BUCKET/PREFIX/ of an export, or a directory holding model.pt and SHA256SUMS",
    )
    parser.add_argument("--model-name", default="mnist", help="the model's name in the URL paths")
    parser.add_argument("--model-version", default="1", help="the model's version (the run id)")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on")
    parser.add_argument("--port", type=port_number, default=DEFAULT_PORT, help="port to listen on")
    parser.add_argument(
        "--max-batch", type=positive, default=DEFAULT_MAX_BATCH, help="most images in one request"
    )
    parser.add_argument(
        "--max-body-bytes",
        type=positive,
        default=DEFAULT_MAX_BODY_BYTES,
        help="largest request body; a bigger Content-Length gets 413 unread",
    )
    parser.add_argument(
        "--request-timeout",
        type=positive,
        default=DEFAULT_REQUEST_TIMEOUT_S,
        help="seconds a connection may stay idle or take to send its body (then 408 and closed)",
    )
    parser.add_argument(
        "--threads", type=non_negative, default=0, help="torch intra-op threads (0: torch's default)"
    )
    return parser


def parse_config(argv: list[str] | None = None) -> ServeConfig:
    parser = build_parser()
    args = parser.parse_args(argv)
    for flag, value in (("--model-name", args.model_name), ("--model-version", args.model_version)):
        if not value or "/" in value or value != value.strip():
            parser.error(f"argument {flag}: {value!r} must be non-empty, without '/' or spaces around it")
    if args.model_uri.startswith("s3://") and not args.model_uri.removeprefix("s3://").strip("/"):
        parser.error(f"argument --model-uri: {args.model_uri!r} names no bucket")
    return ServeConfig(
        model_uri=args.model_uri,
        model_name=args.model_name,
        model_version=args.model_version,
        host=args.host,
        port=args.port,
        max_batch=args.max_batch,
        max_body_bytes=args.max_body_bytes,
        threads=args.threads,
        request_timeout=args.request_timeout,
    )


# --- the model: read, verify, load --------------------------------------------------------------


def read_model_files(uri: str) -> tuple[bytes, str, str]:
    """model.pt's bytes, the SHA256SUMS text and where they came from (for messages)."""
    if uri.startswith("s3://"):
        return read_from_s3(uri)
    directory = Path(uri)
    files: dict[str, bytes] = {}
    for name in (SUMS_FILE, MODEL_FILE):
        try:
            files[name] = (directory / name).read_bytes()
        except FileNotFoundError:
            raise DataError(
                f"{directory / name} not found; serve a finished run's output directory"
            ) from None
        except OSError as error:
            raise DataError(f"{directory / name}: cannot read ({error.strerror})") from None
    return files[MODEL_FILE], files[SUMS_FILE].decode(errors="replace"), str(directory)


def read_from_s3(uri: str) -> tuple[bytes, str, str]:
    from trainer.s3 import S3Location, make_client, read_object

    location = S3Location.parse(uri)
    client = make_client()
    files: dict[str, bytes] = {}
    for name in (SUMS_FILE, MODEL_FILE):
        data = read_object(client, location, name)
        if data is None:
            raise DataError(f"{location.url(name)} not found; export the run with --export-to {uri}")
        files[name] = data
    return files[MODEL_FILE], files[SUMS_FILE].decode(errors="replace"), location.url().rstrip("/") + "/"


def verify(model_bytes: bytes, sums_text: str, where: str) -> str:
    """model.pt's sha256, after checking it against SHA256SUMS; a DataError otherwise."""
    from trainer.data import parse_sums

    sums_where = f"{where.rstrip('/')}/{SUMS_FILE}"
    expected = parse_sums(sums_text, sums_where).get(MODEL_FILE)
    if expected is None:
        raise DataError(f"{sums_where} does not list {MODEL_FILE}")
    actual = hashlib.sha256(model_bytes).hexdigest()
    if actual != expected:
        raise DataError(
            f"{where.rstrip('/')}/{MODEL_FILE}: sha256 {actual} does not match {SUMS_FILE} ({expected}); "
            "the model is corrupt or was replaced, export it again"
        )
    return actual


def load_module(model_bytes: bytes, where: str) -> Any:
    """The model in eval mode on CPU (channels-last) from a state_dict, loaded without pickled code."""
    import torch

    from trainer.model import MnistCNN

    try:
        state = torch.load(io.BytesIO(model_bytes), map_location="cpu", weights_only=True)
        module = MnistCNN()
        module.load_state_dict(state)
    except Exception as error:  # any unpickling or key/shape mismatch: the file is not this model
        text = " ".join(str(error).split())[:200]
        raise DataError(f"{where.rstrip('/')}/{MODEL_FILE} is not this model's state_dict ({text})") from None
    module.eval()
    return module.to(memory_format=torch.channels_last)  # type: ignore[call-overload]


# --- the protocol ---------------------------------------------------------------------------------


@dataclass
class Model:
    """What the handlers share: the config, and the module once it is loaded and verified."""

    config: ServeConfig
    module: Any = None
    sha256: str = ""
    loaded: threading.Event = field(default_factory=threading.Event)

    @property
    def ready(self) -> bool:
        return self.loaded.is_set()

    def metadata(self) -> dict[str, Any]:
        return {
            "name": self.config.model_name,
            "versions": [self.config.model_version],
            "platform": "pytorch",
            "inputs": [{"name": INPUT_NAME, "datatype": "UINT8", "shape": [-1, 28, 28]}],
            "outputs": [
                {"name": "probabilities", "datatype": "FP32", "shape": [-1, CLASSES]},
                {"name": "labels", "datatype": "INT64", "shape": [-1]},
            ],
        }

    def infer(self, request: Any) -> dict[str, Any]:
        """The V2 inference response for a decoded request body, or an HttpError."""
        import torch

        if not isinstance(request, dict):
            raise HttpError(400, "the request body must be a JSON object")
        wanted = requested_outputs(request.get("outputs"))
        images = input_tensor(request.get("inputs"), self.config.max_batch)
        with torch.inference_mode():
            probabilities = torch.softmax(self.module(images), dim=1)
        rows = probabilities.shape[0]
        tensors = {
            "probabilities": {
                "name": "probabilities",
                "datatype": "FP32",
                "shape": [rows, CLASSES],
                "data": probabilities.reshape(-1).tolist(),
            },
            "labels": {
                "name": "labels",
                "datatype": "INT64",
                "shape": [rows],
                "data": probabilities.argmax(dim=1).tolist(),
            },
        }
        request_id = request.get("id")
        return {
            "model_name": self.config.model_name,
            "model_version": self.config.model_version,
            "id": request_id if isinstance(request_id, str) else str(uuid.uuid4()),
            "outputs": [tensors[name] for name in wanted],
        }


def requested_outputs(outputs: Any) -> list[str]:
    if outputs is None:
        return list(OUTPUTS)
    if not isinstance(outputs, list) or not all(isinstance(o, dict) for o in outputs):
        raise HttpError(400, "'outputs' must be a list of objects with a 'name'")
    names = [o.get("name") for o in outputs]
    for name in names:
        if name not in OUTPUTS:
            raise HttpError(400, f"unknown output {name!r}; this model has {', '.join(OUTPUTS)}")
    return names or list(OUTPUTS)


def input_tensor(inputs: Any, max_batch: int) -> Any:
    """The one input as the model's float32 ``[N, 1, 28, 28]`` channels-last batch."""
    import torch

    from trainer.data import MNIST_MEAN, MNIST_STD

    if not isinstance(inputs, list) or len(inputs) != 1 or not isinstance(inputs[0], dict):
        raise HttpError(400, f"'inputs' must be a list of exactly one input, {INPUT_NAME!r}")
    tensor = inputs[0]
    name, datatype, shape = tensor.get("name"), tensor.get("datatype"), tensor.get("shape")
    if name != INPUT_NAME:
        raise HttpError(400, f"unknown input {name!r}; this model takes one input, {INPUT_NAME!r}")
    if datatype not in INPUT_LAYOUTS:
        raise HttpError(400, f"input {INPUT_NAME!r}: datatype {datatype!r} not accepted; use UINT8 or FP32")
    image_shape, typecode = INPUT_LAYOUTS[datatype]
    expected = f"[N, {', '.join(map(str, image_shape))}]"
    if (
        not isinstance(shape, list)
        or len(shape) != 1 + len(image_shape)
        or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape)
        or tuple(shape[1:]) != image_shape
        or shape[0] < 1
    ):
        raise HttpError(400, f"input {INPUT_NAME!r}: shape {shape!r} is not {expected} for {datatype}")
    batch = shape[0]
    if batch > max_batch:
        raise HttpError(400, f"input {INPUT_NAME!r}: batch of {batch} is over the limit of {max_batch}")
    data = tensor.get("data")
    if not isinstance(data, list):
        raise HttpError(400, f"input {INPUT_NAME!r}: 'data' must be a list of numbers")
    if data and isinstance(data[0], list):
        data = flatten(data)
    count = batch * math.prod(image_shape)
    if len(data) != count:
        raise HttpError(400, f"input {INPUT_NAME!r}: {len(data)} values for shape {shape} (needs {count})")
    try:
        values = array(typecode, data)
    except (TypeError, OverflowError):
        kind = "integers 0-255" if datatype == "UINT8" else "numbers"
        raise HttpError(400, f"input {INPUT_NAME!r}: {datatype} data must be {kind}") from None
    if datatype == "UINT8":
        pixels = torch.frombuffer(values, dtype=torch.uint8).reshape(batch, 1, 28, 28)
        images = pixels.float().div_(255.0).sub_(MNIST_MEAN).div_(MNIST_STD)
    else:
        images = torch.frombuffer(values, dtype=torch.float32).reshape(batch, 1, 28, 28)
        if not bool(torch.isfinite(images).all()):
            raise HttpError(400, f"input {INPUT_NAME!r}: FP32 data must be finite numbers")
    return images.contiguous(memory_format=torch.channels_last)


def flatten(nested: list[Any]) -> list[Any]:
    """Row-major flattening of nested lists (the protocol allows either form)."""
    items: list[Any] = nested
    while items and isinstance(items[0], list):
        if not all(isinstance(item, list) for item in items):
            raise HttpError(400, f"input {INPUT_NAME!r}: 'data' mixes lists and numbers")
        items = list(itertools.chain.from_iterable(items))
    return items


# --- HTTP -------------------------------------------------------------------------------------------


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
                return 200, {"name": SERVER_NAME, "version": SERVER_VERSION, "extensions": []}
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
            request = self.read_json()
            if not model.ready:
                raise HttpError(503, f"model {name!r} is not ready yet (loading {model.config.model_uri})")
            return 200, model.infer(request)
        raise HttpError(404, f"no such path {path!r}")

    def only(self, method: str, allowed: str) -> None:
        if method != allowed:
            self.allow = allowed
            raise HttpError(405, f"{method} is not allowed on {self.path}; use {allowed}")

    def read_json(self) -> Any:
        """The request body as JSON; the size is checked from Content-Length before reading."""
        if self.headers.get("Inference-Header-Content-Length") is not None:
            self.close_connection = True  # the body is left unread
            raise HttpError(400, "the binary tensor data extension is not supported; send JSON data")
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
        try:
            return json.loads(body)
        except (ValueError, RecursionError) as error:
            raise HttpError(400, f"request body is not valid JSON ({error})") from None

    def reply(self, status: int, body: dict[str, Any]) -> None:
        payload = json.dumps(body, separators=(",", ":")).encode()
        head = [
            f"{self.protocol_version} {status} {self.responses.get(status, ('',))[0]}",
            "Content-Type: application/json",
            f"Content-Length: {len(payload)}",
        ]
        if getattr(self, "allow", None):
            head.append(f"Allow: {self.allow}")
        if self.close_connection:
            head.append("Connection: close")
        self.log_request(status)
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload)
        self.allow = ""


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the listen backlog (socketserver's default of 5 refuses bursts)
    model: Model

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that broke mid-request (client gone): one line, the server goes on."""
        error = sys.exc_info()[1]
        write_line(f"{PROG}: connection from {client_address[0]} failed: {type(error).__name__}: {error}")


# --- the process ----------------------------------------------------------------------------------


def open_server(config: ServeConfig, model: Model) -> Server:
    try:
        server = Server((config.host, config.port), Handler)
    except OSError as error:
        raise ServeError(
            f"cannot listen on {config.host}:{config.port} ({error.strerror or error})"
        ) from None
    server.model = model
    return server


def load(model: Model, address: str, stop: threading.Event, outcome: list[int]) -> None:
    """Read, verify and load the model; on failure record the exit code and ask the process to stop."""
    config = model.config
    try:
        import torch

        if config.threads:
            torch.set_num_threads(config.threads)
        model_bytes, sums_text, where = read_model_files(config.model_uri)
        sha256 = verify(model_bytes, sums_text, where)
        model.module = load_module(model_bytes, where)
        model.sha256 = sha256
    except TrainerError as error:
        write_line(error.one_line(PROG))
        outcome.append(error.exit_code)
        stop.set()
        return
    except BaseException as error:
        write_line(f"{PROG}: internal error loading the model: {type(error).__name__}: {error}")
        outcome.append(EXIT_INTERNAL)
        stop.set()
        return
    model.loaded.set()
    write_line(
        f"{PROG}: serving model {config.model_name} version {config.model_version} from {where} "
        f"(model.pt sha256 {sha256} verified against {SUMS_FILE}) on {address}",
        sys.stdout,
    )


def main(argv: list[str] | None = None) -> int:
    config = parse_config(argv)
    model = Model(config)
    try:
        server = open_server(config, model)
    except ServeError as error:
        write_line(error.one_line(PROG))
        return error.exit_code
    address = f"http://{config.host}:{server.server_port}"
    stop = threading.Event()
    outcome: list[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        outcome.append(0)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    threading.Thread(target=load, args=(model, address, stop, outcome), name="load", daemon=True).start()
    while not stop.wait(0.5):
        pass
    server.shutdown()
    server.server_close()
    return outcome[0] if outcome else 0


def run_as_process(argv: list[str] | None = None) -> NoReturn:
    """:func:`main`, then end without interpreter finalization (a loader thread may still hold torch)."""
    try:
        code = main(argv)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else EXIT_INTERNAL)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = EXIT_INTERNAL
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run_as_process()
