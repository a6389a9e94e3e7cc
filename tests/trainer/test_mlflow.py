"""MLflow logging's client-side contract: the exact requests a stand-in tracking server on 127.0.0.1
receives, checked against MLflow 3.17.2's REST API (routes, field names and types: see
trainer/mlflow_rest.py), and what a refusing or hung server costs the run (one line, no wait).
The same flow against a real MLflow server is tests/trainer/test_mlflow_server.py."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.mlflow_recorder import EXPERIMENT_ID, RUN_ID, recording_server, silent_server
from trainer import mlflow_rest
from trainer.metrics import EpochRecord
from trainer.mlflow_rest import MlflowError, settings_from_env
from trainer.mlflow_sink import STATE_FILE, MlflowSink, mlflow_sinks
from trainer.progress import Progress, RunInfo

TOKEN = "s3cr3t-token-value"
PARAMS = {"epochs": 2, "lr": 0.01, "scaling": "strong", "data": "x" * 7000}
ARTIFACTS = "/api/2.0/mlflow-artifacts/artifacts"


def info(start_step: int = 0) -> RunInfo:
    return RunInfo(
        total_steps=8,
        start_step=start_step,
        steps_per_epoch=4,
        epochs=2,
        global_batch=32,
        world_size=1,
        backend="gloo",
        params=PARAMS,
    )


def record(epoch: int) -> EpochRecord:
    return EpochRecord(epoch, 0.5, 0.25, 0.9, 100.0, 1.0, 2.0)


def make_sink(tmp_path: Path, uri: str, **env: str) -> MlflowSink:
    environ = {"MLFLOW_TRACKING_URI": uri, "MLFLOW_TRACKING_TOKEN": TOKEN, **env}
    (sink,) = mlflow_sinks(environ, tmp_path / "out", tmp_path / "ck")
    return sink


def train_two_epochs(sink: MlflowSink, succeeded: bool = True, start_step: int = 0) -> float:
    """Drive the sink as the epoch loop does; returns the seconds the training thread spent in it
    before ``finished``."""
    began = time.perf_counter()
    progress = Progress([sink], info(start_step), began)
    for epoch in (1, 2):
        for steps in (2, 4):
            progress.steps_done(epoch, steps, mean_loss=1.0 / (epoch * steps), lr=0.001 * steps)
        progress.epoch_done(record(epoch))
    spent = time.perf_counter() - began
    progress.finished(succeeded)
    return spent


def write_outputs(out: Path, lineage: bool) -> dict[str, bytes]:
    out.mkdir(parents=True)
    files = {"model.pt": b"\x80model-bytes", "metrics.json": b'{"epochs": []}'}
    if lineage:
        files["lineage.json"] = b'{"data": "sha256"}'
    for name, data in files.items():
        (out / name).write_bytes(data)
    return files


def assert_metric_shape(metric: dict[str, Any], since_ms: int) -> None:
    """MLflow's Metric message: key string, value double, timestamp int64 ms, step int64."""
    assert set(metric) == {"key", "value", "timestamp", "step"}
    assert isinstance(metric["value"], float) and type(metric["step"]) is int
    assert type(metric["timestamp"]) is int and since_ms <= metric["timestamp"] <= time.time() * 1000


def test_a_run_is_created_logged_uploaded_and_finished(tmp_path: Path, capsys: Any) -> None:
    files = write_outputs(tmp_path / "out", lineage=True)
    since_ms = int(time.time() * 1000)
    with recording_server() as server:
        sink = make_sink(tmp_path, server.url, MLFLOW_EXPERIMENT_NAME="mnist")
        train_two_epochs(sink)
    api = "/api/2.0/mlflow"
    assert server.routes()[:4] == [
        ("GET", f"{api}/experiments/get-by-name"),
        ("POST", f"{api}/experiments/create"),
        ("POST", f"{api}/runs/create"),
        ("POST", f"{api}/runs/log-batch"),
    ]
    assert server.routes()[-4:] == [
        ("PUT", f"{ARTIFACTS}/{EXPERIMENT_ID}/{RUN_ID}/artifacts/model.pt"),
        ("PUT", f"{ARTIFACTS}/{EXPERIMENT_ID}/{RUN_ID}/artifacts/metrics.json"),
        ("PUT", f"{ARTIFACTS}/{EXPERIMENT_ID}/{RUN_ID}/artifacts/lineage.json"),
        ("POST", f"{api}/runs/update"),
    ]
    assert server.requests[0].query == {"experiment_name": ["mnist"]}
    assert server.requests[1].json() == {"name": "mnist"}
    create = server.requests[2].json()
    assert create["experiment_id"] == EXPERIMENT_ID and type(create["start_time"]) is int
    params = server.requests[3].json()
    assert params["run_id"] == RUN_ID and "metrics" not in params
    assert {p["key"]: p["value"] for p in params["params"]} == {
        "epochs": "2",
        "lr": "0.01",
        "scaling": "strong",
        "data": "x" * 6000,  # MLflow's MAX_PARAM_VAL_LENGTH
    }
    metrics = [m for r in server.to(f"{api}/runs/log-batch") for m in r.json().get("metrics", [])]
    for metric in metrics:
        assert_metric_shape(metric, since_ms)
    logged = {(m["key"], m["step"]): m["value"] for m in metrics}
    assert logged[("train/loss", 2)] == 0.5 and logged[("train/lr", 8)] == pytest.approx(0.004)
    assert logged[("test/accuracy", 4)] == 0.9 and logged[("test/loss", 8)] == 0.25
    assert {key for key, _ in logged} == {
        "train/loss",
        "train/lr",
        "train/samples_per_s",
        "test/loss",
        "test/accuracy",
        "train/epoch_loss",
    }
    assert len(metrics) == len(logged) == 4 * 3 + 2 * 3
    for request in server.requests[-4:-1]:
        assert request.body == files[request.path.rsplit("/", 1)[1]]
    update = server.requests[-1].json()
    assert update["run_id"] == RUN_ID and update["status"] == "FINISHED"
    assert type(update["end_time"]) is int
    assert {r.headers["Authorization"] for r in server.requests} == {f"Bearer {TOKEN}"}
    out = capsys.readouterr().out
    url = f"{server.url}/#/experiments/{EXPERIMENT_ID}/runs/{RUN_ID}"
    assert f"trainer: mlflow run {RUN_ID}: {url}\n" in out
    assert TOKEN not in out and "stopped" not in out
    state = json.loads((tmp_path / "ck" / STATE_FILE).read_text())
    assert state == {"tracking_uri": server.url, "run_id": RUN_ID, "experiment_id": EXPERIMENT_ID}


def test_a_failed_run_is_marked_failed_without_artifacts(tmp_path: Path) -> None:
    write_outputs(tmp_path / "out", lineage=False)
    with recording_server() as server:
        train_two_epochs(make_sink(tmp_path, server.url, MLFLOW_EXPERIMENT_ID="3"), succeeded=False)
    assert server.requests[0].json()["experiment_id"] == "3"
    assert not [r for r in server.requests if r.method == "PUT"]
    assert server.requests[-1].json()["status"] == "FAILED"


def test_username_and_password_are_basic_auth_before_a_token(tmp_path: Path) -> None:
    with recording_server() as server:
        sink = make_sink(tmp_path, server.url, MLFLOW_TRACKING_USERNAME="ann", MLFLOW_TRACKING_PASSWORD="pw")
        train_two_epochs(sink)
    # base64("ann:pw"), as mlflow/utils/rest_utils.py http_request builds it
    assert {r.headers["Authorization"] for r in server.requests} == {"Basic YW5uOnB3"}


def test_a_resumed_attempt_continues_the_run_its_checkpoint_dir_names(tmp_path: Path) -> None:
    with recording_server() as server:
        (tmp_path / "ck").mkdir()
        state = {"tracking_uri": server.url, "run_id": RUN_ID, "experiment_id": EXPERIMENT_ID}
        (tmp_path / "ck" / STATE_FILE).write_text(json.dumps(state))
        train_two_epochs(make_sink(tmp_path, server.url), start_step=4)
    api = "/api/2.0/mlflow"
    assert server.routes()[:2] == [("GET", f"{api}/runs/get"), ("POST", f"{api}/runs/update")]
    assert server.requests[0].query == {"run_id": [RUN_ID]}
    assert server.requests[1].json() == {"run_id": RUN_ID, "status": "RUNNING"}
    assert not server.to(f"{api}/runs/create")
    assert not [r for r in server.to(f"{api}/runs/log-batch") if "params" in r.json()]


def test_a_resumed_attempt_whose_run_is_gone_starts_a_new_one(tmp_path: Path) -> None:
    with recording_server() as server:
        server.existing_run = False
        (tmp_path / "ck").mkdir()
        state = {"tracking_uri": server.url, "run_id": "gone", "experiment_id": "1"}
        (tmp_path / "ck" / STATE_FILE).write_text(json.dumps(state))
        train_two_epochs(make_sink(tmp_path, server.url), start_step=4)
    assert server.to("/api/2.0/mlflow/runs/create")


def test_a_refusing_server_is_one_line_without_the_secret(tmp_path: Path, capsys: Any) -> None:
    with recording_server() as server:
        server.refuse = (403, "PERMISSION_DENIED")
        sink = make_sink(tmp_path, server.url, MLFLOW_TRACKING_PASSWORD=TOKEN, MLFLOW_TRACKING_USERNAME="u")
        train_two_epochs(sink)
    out = capsys.readouterr().out
    assert out == (
        f"trainer: mlflow progress stopped: POST {server.url}/api/2.0/mlflow/runs/create: "
        "HTTP 403 PERMISSION_DENIED: refused by the stand-in\n"
    )
    assert len(server.requests) == 1


def test_a_hung_server_never_holds_the_training_loop(tmp_path: Path, capsys: Any) -> None:
    with silent_server() as url:
        sink = make_sink(tmp_path, url, MLFLOW_HTTP_REQUEST_TIMEOUT="2")
        began = time.perf_counter()
        in_loop = train_two_epochs(sink)
        total = time.perf_counter() - began
    assert in_loop < 0.5
    assert total < 2 + 1.5  # finished() waits for the one request in flight, no more
    out = capsys.readouterr().out
    assert out == f"trainer: mlflow progress stopped: POST {url}/api/2.0/mlflow/runs/create: timed out\n"


def test_a_stopped_run_waits_for_a_hung_server_far_less_than_a_finished_one(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A preempted run (finished(False)) must exit inside its grace period: it waits at most
    STOPPED_TIMEOUT_S for the server, not FINISH_TIMEOUT_S."""
    from trainer import mlflow_sink

    monkeypatch.setattr(mlflow_sink, "STOPPED_TIMEOUT_S", 1.0)
    with silent_server() as url:
        sink = make_sink(tmp_path, url, MLFLOW_HTTP_REQUEST_TIMEOUT="60")
        began = time.perf_counter()
        train_two_epochs(sink, succeeded=False)
        total = time.perf_counter() - began
    assert total < 1.0 + 1.0 < mlflow_sink.FINISH_TIMEOUT_S
    assert (
        capsys.readouterr().out
        == "trainer: mlflow progress stopped: the tracking server did not answer within 1s\n"
    )


def test_a_closed_port_is_one_line(tmp_path: Path, capsys: Any) -> None:
    with silent_server() as url:
        pass  # the port is closed again
    train_two_epochs(make_sink(tmp_path, url))
    out = capsys.readouterr().out
    assert out.startswith(f"trainer: mlflow progress stopped: POST {url}/api/2.0/mlflow/runs/create: ")
    assert "refused" in out.lower() and out.count("\n") == 1


def test_non_finite_values_are_proto3_json_strings() -> None:
    assert [mlflow_rest.json_double(v) for v in (float("nan"), float("inf"), -float("inf"), 1.5)] == [
        "NaN",
        "Infinity",
        "-Infinity",
        1.5,
    ]


@pytest.mark.parametrize(
    ("artifact_uri", "tracking_uri", "expected"),
    [
        ("mlflow-artifacts:/1/r/artifacts", "http://h:5000", f"http://h:5000{ARTIFACTS}/1/r/artifacts"),
        ("mlflow-artifacts://a:7000/1/r/artifacts", "https://h", f"https://a:7000{ARTIFACTS}/1/r/artifacts"),
        ("mlflow-artifacts:/1/r/artifacts", "https://h/mlflow", f"https://h/mlflow{ARTIFACTS}/1/r/artifacts"),
        ("http://store:80/runs/r/", "http://h:5000", "http://store:80/runs/r"),
        ("s3://bucket/1/r/artifacts", "http://h:5000", None),
        ("/var/mlruns/1/r/artifacts", "http://h:5000", None),
    ],
)
def test_artifact_root_follows_mlflows_resolve_uri(
    artifact_uri: str, tracking_uri: str, expected: str | None
) -> None:
    assert mlflow_rest.artifact_root(artifact_uri, tracking_uri) == expected


def test_a_store_the_server_writes_itself_gets_no_upload_and_one_line(tmp_path: Path, capsys: Any) -> None:
    write_outputs(tmp_path / "out", lineage=False)
    with recording_server() as server:
        sink = make_sink(tmp_path, server.url)
        sink.thread.start()
        sink.run_id, sink.artifact_uri = RUN_ID, "s3://bucket/1/r/artifacts"
        sink.finished(True)
    assert server.routes() == [("POST", "/api/2.0/mlflow/runs/update")]
    assert "model.pt, metrics.json not uploaded: the run's artifact store is s3:" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("environ", "error"),
    [
        ({"MLFLOW_TRACKING_URI": "file:///tmp/mlruns"}, "is not an http(s) URL"),
        ({"MLFLOW_TRACKING_URI": "databricks"}, "is not an http(s) URL"),
        ({"MLFLOW_TRACKING_URI": "http://ann:pw@h:5000"}, "holds user info"),
        ({"MLFLOW_TRACKING_URI": "http://h", "MLFLOW_HTTP_REQUEST_TIMEOUT": "soon"}, "is not a number"),
        (
            {"MLFLOW_TRACKING_URI": "https://h", "MLFLOW_TRACKING_SERVER_CERT_PATH": "/no/such/ca.pem"},
            "'/no/such/ca.pem': [Errno 2] No such file or directory",
        ),
    ],
)
def test_settings_a_client_cannot_use_are_one_line(environ: dict[str, str], error: str, capsys: Any) -> None:
    with pytest.raises(MlflowError, match="^MLFLOW_") as raised:
        settings = settings_from_env(environ)
        assert settings is not None
        mlflow_rest.Client(settings)
    assert error in str(raised.value) and "pw" not in str(raised.value)
    assert mlflow_sinks(environ, Path("out"), Path("ck")) == []
    assert capsys.readouterr().out.startswith("trainer: mlflow logging off: MLFLOW_")


def test_settings_from_env() -> None:
    assert settings_from_env({}) is None and settings_from_env({"MLFLOW_TRACKING_URI": " "}) is None
    settings = settings_from_env(
        {
            "MLFLOW_TRACKING_URI": "https://mlflow.example:443/",
            "MLFLOW_TRACKING_TOKEN": TOKEN,
            "MLFLOW_TRACKING_INSECURE_TLS": "true",
            "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
        }
    )
    assert settings is not None
    assert (settings.tracking_uri, settings.token, settings.insecure_tls, settings.timeout_s) == (
        "https://mlflow.example:443",
        TOKEN,
        True,
        30.0,
    )
    assert TOKEN not in repr(settings) and TOKEN not in str(settings)


@pytest.mark.slow
def test_the_trainer_logs_its_settings_and_model_to_mlflow(
    tmp_path: Path, procs: Any, mnist_gz_dir: Path
) -> None:
    """One small trainer process: the params train.py gives, its model.pt uploaded as is, exit 0."""
    with recording_server() as server:
        env = procs.env(MLFLOW_TRACKING_URI=server.url, MLFLOW_TRACKING_TOKEN=TOKEN)
        args = ["--data", str(mnist_gz_dir), "--train-limit", "256", "--checkpoint-dir", str(tmp_path)]
        result = procs.run("trainer", [*args, "--log-every", "1", "--tensorboard-dir", "none"], env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"trainer: mlflow run {RUN_ID}: " in result.stdout and TOKEN not in result.stdout + result.stderr
    params = {p["key"]: p["value"] for p in server.requests[1].json()["params"]}
    assert params["train_limit"] == "256" and params["world_size"] == "1" and params["global_batch"] == "128"
    assert params["steps_per_epoch"] == "2" and params["backend"] == "gloo"
    uploaded = {r.path.rsplit("/", 1)[1]: r.body for r in server.requests if r.method == "PUT"}
    assert uploaded == {
        name: (tmp_path / name).read_bytes() for name in ("model.pt", "metrics.json", "lineage.json")
    }
    assert server.requests[-1].json()["status"] == "FINISHED"
