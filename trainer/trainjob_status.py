"""The TrainJob progress report: rank 0 posts its progress to Kubeflow Trainer's status endpoint, which
writes it into ``TrainJob.status.trainerStatus`` (``kubectl get trainjob <name> -o
jsonpath='{.status.trainerStatus}'``).

The contract, as Kubeflow Trainer v2.3.0 defines it (kubeflow/trainer, tag v2.3.0):

- With the ``TrainJobStatus`` feature gate on (``pkg/features/features.go``, alpha, off by default), the
  ``TrainJobStatus`` plugin (``pkg/runtime/framework/plugins/trainjobstatus/trainjobstatus.go``) gives
  every container of the trainer's pods three variables: ``KUBEFLOW_TRAINER_SERVER_URL``, the full
  ``https://<webhook service>.<namespace>.svc:10443/apis/trainer.kubeflow.org/v1alpha1/namespaces/<ns>/
  trainjobs/<name>/status`` URL, and two *file paths* under ``/var/run/secrets/kubeflow/trainer``:
  ``KUBEFLOW_TRAINER_SERVER_CA_CERT`` (``ca.crt``, the CA of the controller's webhook certificate) and
  ``KUBEFLOW_TRAINER_SERVER_TOKEN`` (``token``, a projected service-account token for the audience
  ``trainer.kubeflow.org/v1alpha1/namespaces/<ns>/trainjobs/<name>/status``, expiring after an hour and
  rotated by the kubelet, so it is read again for every request).
- The endpoint (``pkg/statusserver/server.go``) takes ``POST`` at that path with ``Authorization: Bearer
  <token>`` (``auth.go``: the signature, expiry and audience are checked, and the token's namespace must be
  the TrainJob's; any pod of the namespace may post, so rank 0 alone does, by design here). The body is
  ``{"trainerStatus": {...}}`` (``pkg/apis/trainer/v1alpha1/trainjob_types.go``,
  ``UpdateTrainJobStatusRequest``/``TrainerStatus``): ``progressPercentage`` an integer 0-100,
  ``estimatedRemainingSeconds`` an integer >= 0, ``metrics`` up to 256 ``{"name", "value"}`` pairs of
  1-64 character strings, and ``lastUpdatedTime`` (RFC 3339), which the CRD requires
  (``x-kubernetes-validations: has(self.lastUpdatedTime)``). It is server-side applied with the field
  manager ``trainer-status``, so a field a report leaves out is cleared. It answers 200 with the body it
  parsed, 403 for a token it refuses, 422 for a body it cannot decode or the API server refuses, 404 when
  the TrainJob is gone, 413 above 64 KiB, 500 otherwise (a ``metav1.Status`` JSON body). Its Kubernetes
  client runs at 5 queries per second for every TrainJob together (``statusServer.qps``), and upstream's
  guide (``docs/user-guides/trainjob-progress.md``) asks clients for at most one report per 5 seconds.

Here: reports go out from one background thread, the newest point replacing one not yet sent, at most one
per :data:`INTERVAL_S`, so the training loop only ever hands a dict over. A report that fails (no
endpoint, refused, slow) costs the run nothing: one line on the first failure (never the token), and a
refusal that retrying cannot fix (4xx) ends the reports. ``finished`` sends the last report (100% and no
time left when the run succeeded) and waits for it at most :data:`FINISH_WAIT_S`, since the process ends
with ``os._exit`` (``trainer.__main__``).
"""

from __future__ import annotations

import json
import math
import os
import ssl
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from trainer.errors import write_line
from trainer.metrics import EpochRecord
from trainer.progress import Point, RunInfo

URL_ENV = "KUBEFLOW_TRAINER_SERVER_URL"
CA_CERT_ENV = "KUBEFLOW_TRAINER_SERVER_CA_CERT"  # a file path
TOKEN_ENV = "KUBEFLOW_TRAINER_SERVER_TOKEN"  # a file path

INTERVAL_S = 5.0  # upstream's guide: at most one report per 5 seconds
TIMEOUT_S = 2.0  # per request (connect, TLS handshake, each read)
FINISH_WAIT_S = 4.0  # the most `finished` waits: one request in flight and the last report
MAX_TEXT = 64  # a metric's name and value (the CRD's maxLength)


def sinks_from_env(environ: Mapping[str, str] | None = None) -> list[TrainJobStatusSink]:
    """The sink when Kubeflow Trainer injected its status endpoint's variables (all three), else none."""
    env = os.environ if environ is None else environ
    url, ca_file, token_file = (env.get(name, "") for name in (URL_ENV, CA_CERT_ENV, TOKEN_ENV))
    if not (url and ca_file and token_file):
        return []
    return [TrainJobStatusSink(url, ca_file, token_file)]


def rfc3339_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def metric_value(value: float | int) -> str:
    """A metric's value as the CRD wants it: a short string (``0.1234``, ``1.5e-05``, ``nan``)."""
    if isinstance(value, int):
        return str(value)
    return format(value, ".6g")


def trainer_status(percent: float, eta_s: float | None, metrics: Mapping[str, str]) -> dict[str, Any]:
    """The request body: ``{"trainerStatus": ...}`` with integer percent and seconds, as upstream's types."""
    status: dict[str, Any] = {"progressPercentage": min(100, max(0, math.floor(percent)))}
    if eta_s is not None and math.isfinite(eta_s):
        status["estimatedRemainingSeconds"] = min(2**31 - 1, max(0, round(eta_s)))
    status["metrics"] = [
        {"name": name[:MAX_TEXT], "value": value[:MAX_TEXT]} for name, value in metrics.items() if value
    ]
    status["lastUpdatedTime"] = rfc3339_now()
    return {"trainerStatus": status}


class ReportFailed(Exception):
    """A report not taken; ``final`` when trying again cannot help (the endpoint refused the request)."""

    def __init__(self, reason: str, final: bool) -> None:
        super().__init__(reason)
        self.final = final


class TrainJobStatusSink:
    name = "trainjob-status"

    def __init__(
        self,
        url: str,
        ca_file: str,
        token_file: str,
        interval_s: float = INTERVAL_S,
        timeout_s: float = TIMEOUT_S,
        finish_wait_s: float = FINISH_WAIT_S,
    ) -> None:
        self.url, self.ca_file, self.token_file = url, ca_file, token_file
        self.interval_s, self.timeout_s, self.finish_wait_s = interval_s, timeout_s, finish_wait_s
        self.metrics: dict[str, str] = {}
        self.percent = 0.0
        self.eta_s: float | None = None
        self.sent = 0
        self.failures = 0
        self._pending: dict[str, Any] | None = None
        self._last_post = -math.inf
        self._closing = False
        self._stopped = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="trainjob-status", daemon=True)

    # The Sink protocol (trainer.progress): called on the training thread; each only hands a body over.

    def started(self, info: RunInfo) -> None:
        self.percent = 100.0 * info.start_step / info.total_steps if info.total_steps else 0.0
        self.metrics = {"step": str(info.start_step), "total_steps": str(info.total_steps)}
        self._thread.start()
        self._offer(trainer_status(self.percent, None, self.metrics))

    def point(self, point: Point) -> None:
        self.percent, self.eta_s = point.percent, point.eta_s
        self.metrics.update(
            step=str(point.step),
            total_steps=str(point.total_steps),
            epoch=f"{point.epoch}/{point.epochs}",
            train_loss=metric_value(point.train_loss),
            learning_rate=metric_value(point.lr),
            samples_per_s=metric_value(round(point.samples_per_s)),
        )
        self._offer(trainer_status(point.percent, point.eta_s, self.metrics))

    def epoch(self, record: EpochRecord, step: int) -> None:
        self.metrics.update(
            test_loss=metric_value(record.test_loss),
            test_accuracy=metric_value(record.test_accuracy),
            epoch_train_loss=metric_value(record.train_loss),
        )
        self._offer(trainer_status(self.percent, self.eta_s, self.metrics))

    def finished(self, succeeded: bool) -> None:
        """The last report, sent at once: 100% and 0 s left after a success; after a failure the progress
        reached and no time left estimate. Waits for it at most ``finish_wait_s``."""
        if not self._thread.is_alive():
            return
        final = trainer_status(100.0 if succeeded else self.percent, 0 if succeeded else None, self.metrics)
        with self._cond:
            self._pending = final
            self._closing = True
            self._cond.notify()
        self._thread.join(self.finish_wait_s)

    # The reporting thread.

    def _offer(self, body: dict[str, Any]) -> None:
        with self._cond:
            if not self._stopped:
                self._pending = body
                self._cond.notify()

    def _next(self) -> tuple[dict[str, Any] | None, bool]:
        """The next body to post, once one is pending and its turn has come; (None, True) at the end."""
        with self._cond:
            while True:
                if self._stopped or (self._closing and self._pending is None):
                    return None, True
                wait = self._last_post + self.interval_s - time.monotonic()
                if self._pending is not None and (self._closing or wait <= 0):
                    body, self._pending = self._pending, None
                    self._last_post = time.monotonic()
                    return body, self._closing
                self._cond.wait(None if self._pending is None else wait)

    def _run(self) -> None:
        while True:
            body, last = self._next()
            if body is not None:
                try:
                    self._post(body)
                    self.sent += 1
                except ReportFailed as failed:
                    self._failed(failed)
            if last:
                return

    def _failed(self, failed: ReportFailed) -> None:
        self.failures += 1
        if failed.final:
            with self._cond:
                self._stopped = True
        if self.failures == 1:
            then = "no further reports" if failed.final else "training goes on; later failures are not shown"
            where = urllib.parse.urlsplit(self.url).netloc or "?"
            write_line(f"trainer: TrainJob progress report to {where} failed: {failed}; {then}", sys.stdout)

    def _post(self, body: dict[str, Any]) -> None:
        try:
            with open(self.token_file, encoding="utf-8") as handle:  # rotated by the kubelet: read each time
                token = handle.read().strip()
            context = ssl.create_default_context(cafile=self.ca_file)
        except (OSError, ssl.SSLError) as error:
            raise ReportFailed(
                f"cannot read the injected token or CA ({type(error).__name__})", False
            ) from None
        request = urllib.request.Request(
            self.url,
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=context) as response:
                response.read()
        except urllib.error.HTTPError as error:
            final = 400 <= error.code < 500 and error.code not in (408, 429)  # retrying will not help
            raise ReportFailed(f"HTTP {error.code}{status_message(error)}", final) from None
        except (OSError, ValueError) as error:  # refused, unreachable, TLS, timeout
            reason = getattr(error, "reason", None) or error
            text = " ".join(str(reason).split()) or type(error).__name__
            raise ReportFailed(text[:200], False) from None


def status_message(error: urllib.error.HTTPError) -> str:
    """``: <message>`` of the endpoint's ``metav1.Status`` answer, when it has one."""
    try:
        message = json.loads(error.read(4096) or b"{}").get("message", "")
    except (OSError, ValueError, AttributeError):
        return ""
    text = " ".join(str(message).split())[:160]
    return f": {text}" if text else ""
