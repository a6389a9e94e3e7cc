"""A small client for the MLflow tracking server's REST API (stdlib only: the image has no mlflow).

Read against MLflow 3.17.2 (the version ``make mlflow-server-env`` installs for the real-server
tests); each route and field below is what that version's server serves and parses:

- routes (``mlflow/server/handlers.py``, ``get_endpoints``; request messages in
  ``mlflow/protos/service.proto``)::

      GET  /api/2.0/mlflow/experiments/get-by-name?experiment_name=N -> {"experiment": {"experiment_id"}}
      POST /api/2.0/mlflow/experiments/create  {"name"}               -> {"experiment_id"}
      POST /api/2.0/mlflow/runs/create  {"experiment_id", "start_time" (ms), "tags": [{"key", "value"}]}
                                                                      -> {"run": {"info": {...}}}
      POST /api/2.0/mlflow/runs/log-batch  {"run_id", "metrics": [{"key", "value", "timestamp" (ms),
                                            "step"}], "params": [{"key", "value" (a string)}]}
      POST /api/2.0/mlflow/runs/update  {"run_id", "status": "FINISHED"|"FAILED", "end_time" (ms)}
      PUT  /api/2.0/mlflow-artifacts/artifacts/<path>  the file's bytes (``_upload_artifact``)

- limits (``mlflow/utils/validation.py``): at most 1000 metrics and 100 params per log-batch, a
  param value at most 6000 characters, a key at most 250;
- a double that is not finite goes as the proto3 JSON strings ``"NaN"``, ``"Infinity"``,
  ``"-Infinity"`` (the server parses bodies with protobuf's ``json_format``);
- credentials, as MLflow's own clients take them (``mlflow/environment_variables.py``,
  ``mlflow/utils/rest_utils.py`` ``http_request``): ``MLFLOW_TRACKING_USERNAME`` and
  ``MLFLOW_TRACKING_PASSWORD`` give HTTP Basic, else ``MLFLOW_TRACKING_TOKEN`` a Bearer token;
  ``MLFLOW_TRACKING_SERVER_CERT_PATH`` is a CA bundle, ``MLFLOW_TRACKING_INSECURE_TLS=true`` skips
  verification; ``MLFLOW_HTTP_REQUEST_TIMEOUT`` the seconds per request;
- a run's ``artifact_uri`` ``mlflow-artifacts:[//HOST]/PATH`` maps to
  ``<tracking scheme>://<HOST or the tracking host><tracking path>/api/2.0/mlflow-artifacts/artifacts/PATH``
  (``mlflow/store/artifact/mlflow_artifacts_repo.py``, ``resolve_uri``); an ``http(s)://`` one is used
  as it is (``http_artifact_repo.py``). Other stores (``s3://``, a path) are the server's own to
  write; this client does not upload to them.

No credential ever appears in a message: URLs are shown without user info or query.
"""

from __future__ import annotations

import base64
import json
import math
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

API = "/api/2.0/mlflow"
ARTIFACTS_API = "/api/2.0/mlflow-artifacts/artifacts"
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_PER_BATCH = 100
MAX_PARAM_VALUE_LENGTH = 6000
DEFAULT_TIMEOUT_S = 10.0
ERROR_TEXT_LIMIT = 200


class MlflowError(Exception):
    """A request to the tracking server failed; the text is one line with no credential in it."""


def shown_url(url: str) -> str:
    """``url`` without user info, query or fragment: safe for a log line."""
    parts = urllib.parse.urlsplit(url)
    host_port = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((parts.scheme, host_port, parts.path, "", ""))


@dataclass(frozen=True)
class Settings:
    """Where and how to reach the tracking server, from MLflow's own environment variables."""

    tracking_uri: str
    experiment_name: str | None = None
    experiment_id: str | None = None
    username: str | None = None
    password: str | None = None
    token: str | None = None
    insecure_tls: bool = False
    ca_bundle: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S

    def __repr__(self) -> str:  # never the password or token
        return f"Settings(tracking_uri={shown_url(self.tracking_uri)!r})"


def settings_from_env(environ: Mapping[str, str]) -> Settings | None:
    """The tracking server's settings, or None when ``MLFLOW_TRACKING_URI`` is unset or empty.

    Raises :class:`MlflowError` for a value this client cannot use (a one-line reason)."""
    uri = environ.get("MLFLOW_TRACKING_URI", "").strip()
    if not uri:
        return None
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise MlflowError(
            f"MLFLOW_TRACKING_URI={shown_url(uri)!r} is not an http(s) URL of a tracking server; "
            "the trainer logs to an MLflow tracking server only"
        )
    if "@" in parts.netloc:
        raise MlflowError(
            "MLFLOW_TRACKING_URI holds user info; put the credentials in MLFLOW_TRACKING_USERNAME and "
            "MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) instead"
        )
    timeout_text = environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT", "").strip()
    try:
        timeout = float(timeout_text) if timeout_text else DEFAULT_TIMEOUT_S
    except ValueError:
        raise MlflowError(f"MLFLOW_HTTP_REQUEST_TIMEOUT={timeout_text!r} is not a number") from None
    return Settings(
        tracking_uri=uri.rstrip("/"),
        experiment_name=environ.get("MLFLOW_EXPERIMENT_NAME") or None,
        experiment_id=environ.get("MLFLOW_EXPERIMENT_ID") or None,
        username=environ.get("MLFLOW_TRACKING_USERNAME") or None,
        password=environ.get("MLFLOW_TRACKING_PASSWORD") or None,
        token=environ.get("MLFLOW_TRACKING_TOKEN") or None,
        insecure_tls=environ.get("MLFLOW_TRACKING_INSECURE_TLS", "").strip().lower() in ("true", "1"),
        ca_bundle=environ.get("MLFLOW_TRACKING_SERVER_CERT_PATH") or None,
        timeout_s=timeout if timeout > 0 else DEFAULT_TIMEOUT_S,
    )


def json_double(value: float) -> float | str:
    """A double as proto3 JSON writes it: non-finite values as strings."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def metric(key: str, value: float, timestamp_ms: int, step: int) -> dict[str, Any]:
    return {"key": key, "value": json_double(value), "timestamp": timestamp_ms, "step": step}


def param(key: str, value: object) -> dict[str, str]:
    return {"key": key, "value": str(value)[:MAX_PARAM_VALUE_LENGTH]}


def artifact_root(artifact_uri: str, tracking_uri: str) -> str | None:
    """The HTTP URL under which a run's artifacts are PUT, or None for a store the server writes."""
    parts = urllib.parse.urlsplit(artifact_uri)
    if parts.scheme in ("http", "https"):
        return artifact_uri.rstrip("/")
    if parts.scheme != "mlflow-artifacts":
        return None
    tracking = urllib.parse.urlsplit(tracking_uri)
    path = re.sub(r"//+", "/", f"{tracking.path}/{ARTIFACTS_API}/{parts.path}").rstrip("/")
    return urllib.parse.urlunsplit((tracking.scheme, parts.netloc or tracking.netloc, path, "", ""))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an error: credentials and uploads go to the configured host only."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class Client:
    """One tracking server; every method raises :class:`MlflowError` on any failure."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        try:
            context = ssl.create_default_context(cafile=settings.ca_bundle)
        except (OSError, ssl.SSLError) as error:
            reason = one_line(str(error)) or type(error).__name__
            raise MlflowError(f"MLFLOW_TRACKING_SERVER_CERT_PATH={settings.ca_bundle!r}: {reason}") from None
        if settings.insecure_tls:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        self.opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context), _NoRedirect)

    def _headers(self) -> dict[str, str]:
        s = self.settings
        if s.username and s.password:
            pair = base64.standard_b64encode(f"{s.username}:{s.password}".encode()).decode()
            return {"Authorization": f"Basic {pair}"}
        if s.token:
            return {"Authorization": f"Bearer {s.token}"}
        return {}

    def request(self, method: str, url: str, data: bytes | None, content_type: str) -> bytes:
        headers = self._headers()
        if data is not None:
            headers["Content-Type"] = content_type
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        what = f"{method} {shown_url(url)}"
        try:
            with self.opener.open(req, timeout=self.settings.timeout_s) as response:
                body: bytes = response.read()
                return body
        except urllib.error.HTTPError as error:
            raise MlflowError(f"{what}: HTTP {error.code} {server_message(error)}") from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise MlflowError(f"{what}: {one_line(str(reason)) or type(error).__name__}") from None

    def call(self, endpoint: str, body: dict[str, Any] | None = None, **query: str) -> dict[str, Any]:
        """POST ``body`` (or GET with ``query``) to ``/api/2.0/mlflow/<endpoint>``; the JSON reply."""
        url = f"{self.settings.tracking_uri}{API}/{endpoint}"
        if body is None:
            url += "?" + urllib.parse.urlencode(query)
            raw = self.request("GET", url, None, "")
        else:
            raw = self.request("POST", url, json.dumps(body).encode(), "application/json")
        try:
            reply = json.loads(raw or b"{}")
        except ValueError:
            raise MlflowError(f"{endpoint}: the server's reply is not JSON") from None
        return reply if isinstance(reply, dict) else {}

    def put_artifact(self, root: str, name: str, data: bytes) -> None:
        url = f"{root}/{urllib.parse.quote(name)}"
        self.request("PUT", url, data, "application/octet-stream")


def server_message(error: urllib.error.HTTPError) -> str:
    """MLflow's ``{"error_code", "message"}`` reply as ``CODE: message``, shortened; else the reason."""
    try:
        reply = json.loads(error.read() or b"{}")
    except (ValueError, OSError):
        reply = {}
    if isinstance(reply, dict) and reply.get("error_code"):
        text = f"{reply['error_code']}: {reply.get('message', '')}"
    else:
        text = str(error.reason)
    text = one_line(text)
    return text if len(text) <= ERROR_TEXT_LIMIT else text[: ERROR_TEXT_LIMIT - 3] + "..."


def one_line(text: str) -> str:
    return " ".join(text.split())
