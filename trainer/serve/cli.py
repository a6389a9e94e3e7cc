"""``python -m trainer.serve``: the trained model behind the Open Inference Protocol (KServe V2) over REST.

Usage (the serving pods run exactly this, in the trainer image)::

    python -m trainer.serve --model-uri URI [--model-name mnist] [--model-version RUN_ID]
                            [--host 0.0.0.0] [--port 8080] [--max-batch 256]
                            [--max-body-bytes 0] [--request-timeout 120] [--threads 0]
                            [--max-requests 4] [--max-connections 64] [--drain-seconds 5]
                            [--sums-from PATH] [--health-port 0]

``--model-uri`` is either ``s3://BUCKET/PREFIX/`` (what ``python -m trainer --export-to`` wrote:
model.pt, metrics.json, SHA256SUMS; endpoint and keys from ``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, as for the trainer) or a directory
holding model.pt and SHA256SUMS, e.g. a run's output directory on the checkpoint volume mounted
read-only at ``/checkpoints/<job>`` (the trainer writes a SHA256SUMS of model.pt beside it). With
``--sums-from`` a model from S3 must also match the SHA256SUMS the training job wrote on its checkpoint
volume, where only the job writes: whoever holds a key that may write the export cannot replace the
model and its sums together.

Stop (SIGTERM: the pod deleted or replaced by a rollout): readiness turns 503 at once, yet for
``--drain-seconds`` the server keeps accepting and answering, since the pod's endpoint reaches every
node's kube-proxy only some time after the signal; then it stops accepting, answers the requests it
has received and exits 0 (SIGINT stops it without the drain).

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
      sha256 mismatch, or model.pt is not this model's state_dict; a lineage.json that SHA256SUMS
      lists is missing, does not match, or names another model.pt
4     S3 credentials missing or rejected
5     S3 endpoint unreachable
8     cannot listen on --host/--port or --health-port (address in use, not permitted)
====  =====================================================================

The parts are listed in :mod:`trainer.serve`.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from typing import Any, NoReturn

from trainer.errors import (
    EXIT_DATA,
    EXIT_INTERNAL,
    EXIT_S3_CREDENTIALS,
    EXIT_S3_UNREACHABLE,
    EXIT_USAGE,
    TrainerError,
    write_line,
)
from trainer.serve.config import (
    DEFAULT_DRAIN_S,
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_REQUESTS,
    DEFAULT_PORT,
    DEFAULT_REQUEST_TIMEOUT_S,
    LINEAGE_FILE,
    PROG,
    SUMS_FILE,
    ServeConfig,
    body_limit,
)
from trainer.serve.health import HealthServer, open_health_server
from trainer.serve.load import (
    load_module,
    read_lineage,
    read_model_files,
    verify,
    verify_against_job,
    verify_lineage_against_job,
)
from trainer.serve.protocol import Model
from trainer.serve.server import EXIT_LISTEN, ServeError, open_server

# Every exit code of the process and its short meaning: `--help` lists them, and
# docs/reference/exit-codes.md is generated from them (python -m infra.reference).
EXIT_CODE_MEANINGS = {
    0: "stopped by SIGTERM or SIGINT",
    EXIT_INTERNAL: "internal error",
    EXIT_USAGE: "bad flags",
    EXIT_DATA: "model missing or corrupt",
    EXIT_S3_CREDENTIALS: "S3 credentials missing or rejected",
    EXIT_S3_UNREACHABLE: "S3 endpoint unreachable",
    EXIT_LISTEN: "cannot listen",
}


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Each flag's default, and the exit codes one a line as written."""


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


def port_or_zero(text: str) -> int:
    """A port (1-65535), or 0 for none."""
    value = non_negative(text)
    return port_number(text) if value else 0


def non_negative(text: str) -> int:
    value = integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def build_parser() -> OneLineParser:
    """One `add_argument` per flag, in the order `--help` lists them: a flat list, clearer whole than
    split."""
    parser = OneLineParser(
        prog="python -m trainer.serve",
        description="Serve the trained MNIST model over the Open Inference Protocol (KServe V2 REST).",
        epilog="exit codes:\n" + "".join(f"  {code}  {text}\n" for code, text in EXIT_CODE_MEANINGS.items()),
        formatter_class=HelpFormatter,
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
        type=non_negative,
        default=0,
        help="largest request body; a bigger Content-Length gets 413 unread (0: what --max-batch FP32 "
        "images take as JSON, 26 bytes a value, plus 64 KiB)",
    )
    parser.add_argument(
        "--request-timeout",
        type=positive,
        default=DEFAULT_REQUEST_TIMEOUT_S,
        help="seconds a connection may stay idle, or take to send one whole request (then closed; a "
        "body not received in time gets 408)",
    )
    parser.add_argument(
        "--max-requests",
        type=positive,
        default=DEFAULT_MAX_REQUESTS,
        help="inference requests answered at once; more get 503 with Retry-After",
    )
    parser.add_argument(
        "--max-connections",
        type=positive,
        default=DEFAULT_MAX_CONNECTIONS,
        help="connections open at once; more get 503 and are closed",
    )
    parser.add_argument(
        "--health-port",
        type=port_or_zero,
        default=0,
        help="a port of their own for GET /v2/health/live and /ready (the kubelet's probes), which "
        "clients of --port can never starve; 0: they are answered on --port only",
    )
    parser.add_argument(
        "--sums-from",
        default=None,
        metavar="PATH",
        help="a SHA256SUMS the model's sha256 must also match: the one the training job wrote on its "
        "checkpoint volume, for a model read from S3",
    )
    parser.add_argument(
        "--threads", type=non_negative, default=0, help="torch intra-op threads (0: torch's default)"
    )
    parser.add_argument(
        "--drain-seconds",
        type=non_negative,
        default=DEFAULT_DRAIN_S,
        help="after SIGTERM: seconds it reports not-ready but keeps answering, before it stops accepting",
    )
    return parser


def parse_config(argv: list[str] | None = None) -> ServeConfig:
    parser = build_parser()
    args = parser.parse_args(argv)
    for flag, value in (("--model-name", args.model_name), ("--model-version", args.model_version)):
        if not value or "/" in value or value != value.strip():
            parser.error(f"argument {flag}: {value!r} must be non-empty, without '/' or spaces around it")
    if args.health_port and args.health_port == args.port:
        parser.error(f"argument --health-port: {args.health_port} must be a port other than --port")
    if args.model_uri.startswith("s3://") and not args.model_uri.removeprefix("s3://").strip("/"):
        parser.error(f"argument --model-uri: {args.model_uri!r} names no bucket")
    return ServeConfig(
        model_uri=args.model_uri,
        model_name=args.model_name,
        model_version=args.model_version,
        host=args.host,
        port=args.port,
        max_batch=args.max_batch,
        max_body_bytes=args.max_body_bytes or body_limit(args.max_batch),
        threads=args.threads,
        request_timeout=args.request_timeout,
        drain_seconds=args.drain_seconds,
        max_requests=args.max_requests,
        max_connections=args.max_connections,
        sums_from=args.sums_from,
        health_port=args.health_port,
    )


def load(model: Model, address: str, stop: threading.Event, outcome: list[int]) -> None:
    """Read, verify and load the model; on failure record the exit code and ask the process to stop."""
    config = model.config
    try:
        import torch

        if config.threads:
            torch.set_num_threads(config.threads)
        model_bytes, sums_text, where = read_model_files(config.model_uri)
        sha256 = verify(model_bytes, sums_text, where)
        lineage = read_lineage(config.model_uri, sums_text, where, sha256)
        if config.sums_from:
            verify_against_job(sha256, where, config.sums_from)
            verify_lineage_against_job(lineage, where, config.sums_from)
        model.module = load_module(model_bytes, where)
        model.sha256 = sha256
        model.lineage = lineage
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
        f"(model.pt sha256 {sha256}"
        + (f" and {LINEAGE_FILE}" if lineage else "")
        + f" verified against {SUMS_FILE}"
        + (f" and the job's {config.sums_from}" if config.sums_from else "")
        + f") on {address}",
        sys.stdout,
    )


# How long a stop waits for the requests being answered: within the kubelet's default grace period
# (terminationGracePeriodSeconds, 30 s) between SIGTERM and SIGKILL.
DRAIN_TIMEOUT_S = 20


def main(argv: list[str] | None = None) -> int:
    config = parse_config(argv)
    model = Model(config)
    try:
        server = open_server(config, model)
        health = open_probes(config, model)
    except ServeError as error:
        write_line(error.one_line(PROG))
        return error.exit_code
    address = f"http://{config.host}:{server.server_port}"
    stop = threading.Event()
    outcome: list[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        if signum == signal.SIGTERM and not outcome:
            model.draining.set()  # readiness 503 at once; inference still answered while draining
        outcome.append(0)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    if health is not None:
        threading.Thread(target=health.serve_forever, name="health", daemon=True).start()
    threading.Thread(target=load, args=(model, address, stop, outcome), name="load", daemon=True).start()
    while not stop.wait(0.5):
        pass
    if model.draining.is_set() and model.loaded.is_set():
        # The pod's endpoint is being removed; until every kube-proxy knows, new connections still
        # come: keep accepting and answering them (a second SIGTERM or SIGINT does not cut this short).
        time.sleep(config.drain_seconds)
    server.shutdown()
    server.socket.close()  # new connections are refused; the requests already received are answered
    left = server.drain(DRAIN_TIMEOUT_S)
    if left:
        write_line(f"{PROG}: stopping with {left} request(s) unanswered after {DRAIN_TIMEOUT_S} s")
    server.server_close()
    if health is not None:
        health.shutdown()
        health.server_close()
    return outcome[0] if outcome else 0


def open_probes(config: ServeConfig, model: Model) -> HealthServer | None:
    """The probes' listener on --health-port, or None without one."""
    if not config.health_port:
        return None
    try:
        return open_health_server(config.host, config.health_port, model)
    except OSError as error:
        where = f"{config.host}:{config.health_port}"
        raise ServeError(f"cannot listen on {where} (--health-port: {error.strerror or error})") from None


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
