"""The real-server tier: the trainer against a real MLflow tracking server (3.17.2) on 127.0.0.1.

The server needs its own environment (mlflow with its server dependencies: about 850 MB, so it is
not in .venv): ``make mlflow-server-env`` builds .venv-mlflow, or MLFLOW_SERVER_VENV names one. Without
it these tests skip and say so. The run is read back through the server's REST API, and the model
through its artifact proxy, so what is checked is what the MLflow UI and clients would show.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.local.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVER_VENV = Path(os.environ.get("MLFLOW_SERVER_VENV") or REPO_ROOT / ".venv-mlflow")
MLFLOW = SERVER_VENV / "bin" / "mlflow"
START_TIMEOUT_S = 120

pytestmark = [
    pytest.mark.slow,
    pytest.mark.mlflow_server,
    pytest.mark.skipif(
        not MLFLOW.is_file(),
        reason=f"no MLflow server at {MLFLOW}: `make mlflow-server-env` builds it, or set MLFLOW_SERVER_VENV",
    ),
]


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as response:
        body: bytes = response.read()
        return body


def get_json(base: str, endpoint: str, **query: str) -> Any:
    return json.loads(get(f"{base}/api/2.0/mlflow/{endpoint}?{urllib.parse.urlencode(query)}"))


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``mlflow server`` with a SQLite store and artifacts served through it (the proxy)."""
    root = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    command = [
        str(MLFLOW), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
        "--backend-store-uri", f"sqlite:///{root / 'store.db'}",
        "--artifacts-destination", str(root / "artifacts"),
    ]  # fmt: skip
    log = (root / "server.log").open("wb")
    # Its own process group: the server's workers stop with it.
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=root, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                if get(f"{url}/health") == b"OK":
                    break
            except (urllib.error.URLError, OSError):
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mlflow server did not start: {(root / 'server.log').read_text()[-2000:]}")
            time.sleep(0.25)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        log.close()


def test_a_training_run_as_the_mlflow_server_records_it(
    mlflow_server: str, tmp_path: Path, procs: Any, mnist_gz_dir: Path
) -> None:
    env = procs.env(MLFLOW_TRACKING_URI=mlflow_server, MLFLOW_EXPERIMENT_NAME="ddp-mnist-test")
    args = ["--data", str(mnist_gz_dir), "--train-limit", "512", "--checkpoint-dir", str(tmp_path)]
    result = procs.run("trainer", [*args, "--log-every", "2", "--tensorboard-dir", "none"], env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "progress stopped" not in result.stdout, result.stdout
    found = re.search(r"^trainer: mlflow run ([0-9a-f]{32}): (\S+)$", result.stdout, re.MULTILINE)
    assert found, result.stdout
    run_id = found.group(1)
    run = get_json(mlflow_server, "runs/get", run_id=run_id)["run"]
    experiment = get_json(mlflow_server, "experiments/get-by-name", experiment_name="ddp-mnist-test")
    experiment_id = experiment["experiment"]["experiment_id"]
    assert found.group(2) == f"{mlflow_server}/#/experiments/{experiment_id}/runs/{run_id}"
    assert run["info"]["status"] == "FINISHED" and run["info"]["experiment_id"] == experiment_id
    params = {p["key"]: p["value"] for p in run["data"]["params"]}
    assert params["train_limit"] == "512" and params["steps_per_epoch"] == "4" and params["epochs"] == "1"
    history = get_json(mlflow_server, "metrics/get-history", run_id=run_id, metric_key="train/loss")
    assert [m["step"] for m in history["metrics"]] == [2, 4]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    accuracy = get_json(mlflow_server, "metrics/get-history", run_id=run_id, metric_key="test/accuracy")
    assert [(m["step"], m["value"]) for m in accuracy["metrics"]] == [
        (4, metrics["history"][0]["test_accuracy"])
    ]
    artifacts = f"{mlflow_server}/api/2.0/mlflow-artifacts/artifacts/{experiment_id}/{run_id}/artifacts"
    assert get(f"{artifacts}/model.pt") == (tmp_path / "model.pt").read_bytes()
    assert get(f"{artifacts}/metrics.json") == (tmp_path / "metrics.json").read_bytes()
