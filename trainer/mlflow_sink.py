"""The run in MLflow, when ``MLFLOW_TRACKING_URI`` names a tracking server (rank 0 only).

What is logged (through :mod:`trainer.mlflow_rest`, MLflow's REST API; no mlflow package needed):

- at the start, one MLflow run in ``MLFLOW_EXPERIMENT_NAME`` (made when missing), else
  ``MLFLOW_EXPERIMENT_ID``, else the server's default experiment "0"; its params are the settings
  that shape the result (:attr:`trainer.progress.RunInfo.params`); one line gives its id and URL;
- every progress point: ``train/loss``, ``train/lr``, ``train/samples_per_s`` at the global step;
- every epoch: ``test/loss``, ``test/accuracy``, ``train/epoch_loss`` at the epoch's last step (the
  same names as the TensorBoard curves, :mod:`trainer.curves`);
- at the end of a run that succeeded: ``model.pt``, ``metrics.json`` and, when present,
  ``lineage.json`` from the output dir as the run's artifacts; then the run's status, FINISHED, or
  FAILED when training raised.

A restarted attempt of the same training run (it resumed from a checkpoint) continues the MLflow run
that ``<checkpoint dir>/mlflow-run.json`` names, when that run is on the same server: one MLflow run
per training run, not per pod. Its params are not logged again (a restart may run on another world
size, and MLflow refuses to change a logged param); points between the checkpoint and the crash may
appear twice in a curve's history.

Requests go from one background thread, so a slow or unreachable server never holds a training
step; :meth:`MlflowSink.finished` waits for them, at most :data:`FINISH_TIMEOUT_S` (a run that did
not succeed, e.g. a preempted one: :data:`STOPPED_TIMEOUT_S`). The first
failure stops MLflow logging for the rest of the run: the next call on the sink raises it, and
:class:`trainer.progress.Progress` prints it as one line (``trainer: mlflow progress stopped: ...``,
without credentials) and drops the sink. Training goes on either way.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from trainer import mlflow_rest
from trainer.errors import write_line
from trainer.fsio import atomic_write_json
from trainer.metrics import METRICS_FILE, MODEL_FILE, EpochRecord
from trainer.mlflow_rest import Client, MlflowError, Settings
from trainer.progress import Point, RunInfo

LINEAGE_FILE = "lineage.json"
ARTIFACTS = (MODEL_FILE, METRICS_FILE, LINEAGE_FILE)
STATE_FILE = "mlflow-run.json"
FINISH_TIMEOUT_S = 120.0
# A run that did not succeed (a preemption above all) uploads nothing and must exit well inside the
# pod's grace period (jobTerminationGracePeriodSeconds, 60 s by default) and torchrun's 30 s
# shutdown timeout: it waits at most this long for the server.
STOPPED_TIMEOUT_S = 10.0
DEFAULT_EXPERIMENT_ID = "0"


def now_ms() -> int:
    return int(time.time() * 1000)


class MlflowSink:
    name = "mlflow"

    def __init__(
        self,
        settings: Settings,
        output_dir: Path,
        checkpoint_dir: Path,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.client = Client(settings)
        self.output_dir = output_dir
        self.state_path = checkpoint_dir / STATE_FILE
        self.say = say or (lambda line: write_line(f"trainer: {line}", sys.stdout))
        self.jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self.pending: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.error: str | None = None
        self.run_id = ""
        self.experiment_id = ""
        self.artifact_uri = ""
        self.thread = threading.Thread(target=self._work, name="mlflow", daemon=True)

    # The Sink protocol (trainer.progress): called on rank 0's training thread, never blocking.

    def started(self, info: RunInfo) -> None:
        self.thread.start()
        self.jobs.put(lambda: self._start_run(info))

    def point(self, point: Point) -> None:
        at = now_ms()
        self._add(
            [
                mlflow_rest.metric("train/loss", point.train_loss, at, point.step),
                mlflow_rest.metric("train/lr", point.lr, at, point.step),
                mlflow_rest.metric("train/samples_per_s", point.samples_per_s, at, point.step),
            ]
        )

    def epoch(self, record: EpochRecord, step: int) -> None:
        at = now_ms()
        self._add(
            [
                mlflow_rest.metric("test/loss", record.test_loss, at, step),
                mlflow_rest.metric("test/accuracy", record.test_accuracy, at, step),
                mlflow_rest.metric("train/epoch_loss", record.train_loss, at, step),
            ]
        )

    def finished(self, succeeded: bool) -> None:
        self._raise_failure()
        self.jobs.put(lambda: self._end_run(succeeded))
        self.jobs.put(None)
        timeout = FINISH_TIMEOUT_S if succeeded else STOPPED_TIMEOUT_S
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise MlflowError(f"the tracking server did not answer within {timeout:.0f}s")
        self._raise_failure()

    # Rank 0's side: queue work, surface the worker's first failure.

    def _raise_failure(self) -> None:
        if self.error is not None:
            raise MlflowError(self.error)

    def _add(self, metrics: list[dict[str, Any]]) -> None:
        self._raise_failure()
        with self.lock:
            first = not self.pending
            self.pending.extend(metrics)
        if first:
            self.jobs.put(self._send_metrics)

    # The worker thread: every request to the server.

    def _work(self) -> None:
        while (job := self.jobs.get()) is not None:
            if self.error is not None:
                continue
            try:
                job()
            except MlflowError as error:
                self.error = str(error)
            except Exception as error:  # noqa: BLE001 - logging never fails the run
                self.error = mlflow_rest.one_line(f"{type(error).__name__}: {error}")

    def _start_run(self, info: RunInfo) -> None:
        if info.start_step > 0 and self._continue_run():
            self.say(f"mlflow run {self.run_id} continued: {self._run_url()}")
            return
        experiment_id = self._experiment_id()
        tags = [{"key": "mlflow.source.name", "value": "python -m trainer"}]
        body = {"experiment_id": experiment_id, "start_time": now_ms(), "tags": tags}
        run = self.client.call("runs/create", body).get("run", {}).get("info", {})
        self.run_id, self.artifact_uri = str(run.get("run_id", "")), str(run.get("artifact_uri", ""))
        if not self.run_id:
            raise MlflowError("runs/create: the server's reply names no run_id")
        self.experiment_id = str(run.get("experiment_id", experiment_id))
        self._save_state()
        self.say(f"mlflow run {self.run_id}: {self._run_url()}")
        params = [mlflow_rest.param(key, value) for key, value in info.params.items()]
        for start in range(0, len(params), mlflow_rest.MAX_PARAMS_PER_BATCH):
            chunk = params[start : start + mlflow_rest.MAX_PARAMS_PER_BATCH]
            self.client.call("runs/log-batch", {"run_id": self.run_id, "params": chunk})

    def _experiment_id(self) -> str:
        name = self.settings.experiment_name
        if name is None:
            return self.settings.experiment_id or DEFAULT_EXPERIMENT_ID
        try:
            reply = self.client.call("experiments/get-by-name", experiment_name=name)
            return str(reply["experiment"]["experiment_id"])
        except MlflowError as error:
            if "RESOURCE_DOES_NOT_EXIST" not in str(error):
                raise
        return str(self.client.call("experiments/create", {"name": name})["experiment_id"])

    def _continue_run(self) -> bool:
        """Reopen the run of an earlier attempt (``mlflow-run.json``) if the server still has it."""
        try:
            state = json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return False
        if not isinstance(state, dict) or state.get("tracking_uri") != self.shown_uri:
            return False
        try:
            run = self.client.call("runs/get", run_id=str(state.get("run_id")))["run"]["info"]
        except (MlflowError, KeyError, TypeError):
            return False
        self.run_id, self.artifact_uri = str(run["run_id"]), str(run.get("artifact_uri", ""))
        self.experiment_id = str(run.get("experiment_id", ""))
        self.client.call("runs/update", {"run_id": self.run_id, "status": "RUNNING"})
        return True

    def _save_state(self) -> None:
        state = {"tracking_uri": self.shown_uri, "run_id": self.run_id, "experiment_id": self.experiment_id}
        atomic_write_json(self.state_path, state)

    def _send_metrics(self) -> None:
        with self.lock:
            metrics, self.pending = self.pending, []
        for start in range(0, len(metrics), mlflow_rest.MAX_METRICS_PER_BATCH):
            chunk = metrics[start : start + mlflow_rest.MAX_METRICS_PER_BATCH]
            self.client.call("runs/log-batch", {"run_id": self.run_id, "metrics": chunk})

    def _end_run(self, succeeded: bool) -> None:
        self._send_metrics()
        if succeeded:
            self._upload_artifacts()
        status = "FINISHED" if succeeded else "FAILED"
        self.client.call("runs/update", {"run_id": self.run_id, "status": status, "end_time": now_ms()})

    def _upload_artifacts(self) -> None:
        root = mlflow_rest.artifact_root(self.artifact_uri, self.settings.tracking_uri)
        present = [name for name in ARTIFACTS if (self.output_dir / name).is_file()]
        if root is None:
            scheme = self.artifact_uri.split(":", 1)[0]
            self.say(
                f"mlflow: {', '.join(present)} not uploaded: the run's artifact store is {scheme}:, "
                "which the trainer reaches only through a tracking server that serves artifacts "
                "(mlflow server --serve-artifacts)"
            )
            return
        for name in present:
            self.client.put_artifact(root, name, (self.output_dir / name).read_bytes())

    @property
    def shown_uri(self) -> str:
        return mlflow_rest.shown_url(self.settings.tracking_uri)

    def _run_url(self) -> str:
        """The run's page in the MLflow UI (``mlflow/tracking/_tracking_service/client.py``, ``_log_url``)."""
        return f"{self.shown_uri}/#/experiments/{self.experiment_id}/runs/{self.run_id}"


def mlflow_sinks(environ: Mapping[str, str], output_dir: Path, checkpoint_dir: Path) -> list[MlflowSink]:
    """The sink when ``MLFLOW_TRACKING_URI`` is set; a value it cannot use is one line, no sink."""
    try:
        settings = mlflow_rest.settings_from_env(environ)
        return [] if settings is None else [MlflowSink(settings, output_dir, checkpoint_dir)]
    except MlflowError as error:
        write_line(f"trainer: mlflow logging off: {error}", sys.stdout)
        return []
