"""A stand-in for Kubeflow Trainer v2.3.0's TrainJob status endpoint, served over HTTPS on 127.0.0.1.

It answers as ``pkg/statusserver/server.go`` (kubeflow/trainer, tag v2.3.0) does, and checks what the real
one leaves to Go's JSON decoder and to the API server's validation of the TrainJob CRD:

- ``POST /apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs/{name}/status`` only; anything else
  is 404 (``handleDefault``); a body over 64 KiB is 413 (``bodySizeLimitMiddleware``);
- ``Authorization: Bearer <token>`` (``auth.go`` ``extractRawToken``; a token with the TrainJob's audience
  and namespace, here: the one token the test wrote) else 403;
- a body Go cannot decode into ``UpdateTrainJobStatusRequest`` is 422: a number that is not an integer
  for an ``int32`` field, a string where a number goes, an unparsable RFC 3339 ``lastUpdatedTime``;
- the ``trainerStatus`` is then checked against the vendored TrainJob CRD's ``status.trainerStatus``
  schema (infra/manifests/kubeflow-trainer/manifests.yaml) and its rule ``has(self.lastUpdatedTime)``:
  422 with the message otherwise;
- 200 echoes the body, and the status is kept as ``status.trainerStatus`` (server-side apply by one field
  manager: the last report replaces the whole of it).

Beyond upstream, it notes every field it does not know, so a test can hold the client to the contract.
"""

from __future__ import annotations

import json
import re
import ssl
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonschema

from infra.program.common import yamlio
from tests.jsonhttp import JsonHandler

REPO_ROOT = Path(__file__).resolve().parents[2]
VENDORED = REPO_ROOT / "infra" / "manifests" / "kubeflow-trainer" / "manifests.yaml"
PATH = re.compile(r"^/apis/trainer\.kubeflow\.org/v1alpha1/namespaces/([^/]+)/trainjobs/([^/]+)/status$")
MAX_BODY = 1 << 16
INT32 = 2**31 - 1
KNOWN = {"progressPercentage", "estimatedRemainingSeconds", "metrics", "lastUpdatedTime"}


def trainer_status_schema() -> dict[str, Any]:
    """``status.trainerStatus`` of the vendored TrainJob CRD (storage version)."""
    for document in VENDORED.read_text().split("\n---\n"):
        if (
            "name: trainjobs.trainer.kubeflow.org" in document
            and "kind: CustomResourceDefinition" in document
        ):
            crd = yamlio.load(document)
            version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
            schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["status"]
            return schema["properties"]["trainerStatus"]  # type: ignore[no-any-return]
    raise LookupError(f"no TrainJob CRD in {VENDORED}")


def go_decode_errors(body: Any) -> list[str]:
    """What Go's json.Decoder refuses when decoding ``body`` into UpdateTrainJobStatusRequest."""
    if not isinstance(body, dict):
        return ["the body is not a JSON object"]
    status = body.get("trainerStatus")
    if status is None:
        return []
    if not isinstance(status, dict):
        return ["trainerStatus is not an object"]
    errors = []
    for name in ("progressPercentage", "estimatedRemainingSeconds"):
        value = status.get(name)
        if value is not None and (type(value) is not int or not -(2**31) <= value <= INT32):
            errors.append(f"{name} {value!r} is not an int32")
    metrics = status.get("metrics")
    if metrics is not None and not (
        isinstance(metrics, list)
        and all(
            isinstance(m, dict) and all(isinstance(m.get(k, ""), str) for k in ("name", "value"))
            for m in metrics
        )
    ):
        errors.append("metrics is not a list of {name, value} strings")
    stamp = status.get("lastUpdatedTime")
    if stamp is not None:
        try:
            if not isinstance(stamp, str) or not re.match(
                r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$", stamp
            ):
                raise ValueError
            datetime.fromisoformat(stamp)
        except ValueError:
            errors.append(f"lastUpdatedTime {stamp!r} is not RFC 3339")
    return errors


@dataclass
class StatusEndpoint:
    """What the stand-in saw; ``mode`` picks its answer: ok, refuse (403), error (500), slow (``delay_s``)."""

    url: str = ""
    ca_file: Path = Path()
    token_file: Path = Path()
    mode: str = "ok"
    delay_s: float = 0.0
    requests: list[dict[str, Any]] = field(default_factory=list)  # every request: path, auth, body, code
    trainer_status: dict[str, Any] | None = None  # as the TrainJob's status would hold it
    unknown_fields: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def accepted(self) -> list[dict[str, Any]]:
        with self.lock:
            return [r["body"] for r in self.requests if r["code"] == 200]


def _handler(endpoint: StatusEndpoint, token: str, schema: dict[str, Any]) -> type[JsonHandler]:
    validator = jsonschema.Draft7Validator(
        {k: v for k, v in schema.items() if not k.startswith("x-kubernetes-")}
    )

    class Handler(JsonHandler):
        def _status(self, code: int, message: str, reason: str) -> None:
            self.answer(code, {"status": "Failure", "message": message, "reason": reason, "code": code})

        def do_GET(self) -> None:
            self._status(404, "Not found", "NotFound")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            record: dict[str, Any] = {"path": self.path, "auth": self.headers.get("Authorization", "")}
            with endpoint.lock:
                endpoint.requests.append(record)
            if endpoint.mode == "slow":
                time.sleep(endpoint.delay_s)
            code, message, reason = self._handle(length, record)
            record["code"] = code
            if code != 200:
                self._status(code, message, reason)
            else:
                self.answer(200, record["body"])

        def _handle(self, length: int, record: dict[str, Any]) -> tuple[int, str, str]:
            if not PATH.match(self.path):
                return 404, "Not found", "NotFound"
            if length > MAX_BODY:
                return 413, "Payload too large", "RequestEntityTooLarge"
            raw = self.rfile.read(length)
            parts = record["auth"].split()
            if (
                endpoint.mode == "refuse"
                or len(parts) != 2
                or parts[0].lower() != "bearer"
                or parts[1] != token
            ):
                return 403, "Forbidden", "Forbidden"
            if endpoint.mode == "error":
                return 500, "Internal error", "InternalError"
            try:
                body = json.loads(raw)
            except ValueError:
                return 422, "Invalid payload", "Invalid"
            record["body"] = body
            if go_decode_errors(body):
                return 422, "Invalid payload", "Invalid"
            status = body.get("trainerStatus")
            if status is None:
                return 200, "", ""
            with endpoint.lock:
                endpoint.unknown_fields += [f"trainerStatus.{k}" for k in status if k not in KNOWN]
                endpoint.unknown_fields += [k for k in body if k != "trainerStatus"]
            known = {k: v for k, v in status.items() if k in KNOWN}  # Go drops unknown fields
            errors = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(known)]
            if "lastUpdatedTime" not in known:
                errors.append("lastUpdatedTime is required when trainerStatus is present")
            if errors:
                return 422, "; ".join(errors), "Invalid"
            with endpoint.lock:
                endpoint.trainer_status = known
            return 200, "", ""

    return Handler


class _Server(ThreadingHTTPServer):
    """Says nothing when a client hangs up before its answer is written (the trainer's sink gives up
    on a slow server by design); any other error in a request is printed as the standard server does."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (ssl.SSLEOFError, ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


@contextmanager
def status_endpoint(
    directory: Path, tls_dir: Path | None = None, namespace: str = "team-a", name: str = "mnist"
) -> Iterator[StatusEndpoint]:
    """The stand-in on a free port of 127.0.0.1, with its certificate (its own CA; made in ``tls_dir``
    unless one is there) and a token file in ``directory``."""
    from infra.local.services import self_signed  # the local stand-ins' certificate maker

    certificate, key = self_signed(tls_dir or directory / "tls")
    token = "stand-in-token-" + "x" * 40
    token_file = directory / "token"
    token_file.write_text(token + "\n")
    endpoint = StatusEndpoint(ca_file=certificate, token_file=token_file)
    server = _Server(("127.0.0.1", 0), _handler(endpoint, token, trainer_status_schema()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificate, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.daemon_threads = True
    port = server.server_address[1]
    endpoint.url = f"https://127.0.0.1:{port}/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield endpoint
    finally:
        server.shutdown()
        server.server_close()
