"""The TrainJob progress report against a real HTTPS endpoint on 127.0.0.1 that answers as Kubeflow Trainer
v2.3.0's status server does and validates each body as the TrainJob CRD would (``status_endpoint``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.status_endpoint import StatusEndpoint, status_endpoint
from trainer.metrics import EpochRecord
from trainer.progress import Point, RunInfo
from trainer.trainjob_status import CA_CERT_ENV, TOKEN_ENV, URL_ENV, TrainJobStatusSink, sinks_from_env

INFO = RunInfo(
    total_steps=200,
    start_step=0,
    steps_per_epoch=100,
    epochs=2,
    global_batch=64,
    world_size=1,
    backend="gloo",
)
RECORD = EpochRecord(
    epoch=1,
    train_loss=0.31,
    test_loss=0.2,
    test_accuracy=0.9412,
    samples_per_s=900.0,
    train_seconds=3.0,
    elapsed_s=4.0,
)


def point(step: int, eta: float | None = 12.6) -> Point:
    return Point(
        step=step,
        total_steps=200,
        epoch=1 + (step - 1) // 100,
        epochs=2,
        train_loss=0.5 / step,
        lr=1e-3,
        samples_per_s=1234.5,
        elapsed_s=1.0,
        eta_s=eta,
    )


@pytest.fixture(scope="module")
def tls_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tls")  # one certificate for the module's endpoints


@pytest.fixture
def endpoint(tmp_path: Path, tls_dir: Path) -> Iterator[StatusEndpoint]:
    with status_endpoint(tmp_path, tls_dir) as served:
        yield served


def sink_for(endpoint: StatusEndpoint, url: str | None = None, **kwargs: float) -> TrainJobStatusSink:
    options: dict[str, float] = {"interval_s": 0.3, "timeout_s": 0.5, "finish_wait_s": 2.0} | kwargs
    return TrainJobStatusSink(url or endpoint.url, str(endpoint.ca_file), str(endpoint.token_file), **options)


def feed(sink: TrainJobStatusSink, steps: range, pause_s: float = 0.0) -> float:
    """Points for ``steps`` (an epoch record after step 100); the longest a sink call took, in seconds."""
    longest = 0.0
    for step in steps:
        start = time.perf_counter()
        sink.point(point(step))
        if step == 100:
            sink.epoch(RECORD, step)
        longest = max(longest, time.perf_counter() - start)
        time.sleep(pause_s)
    return longest


def metrics(body: dict[str, Any]) -> dict[str, str]:
    return {m["name"]: m["value"] for m in body["trainerStatus"]["metrics"]}


def test_reports_in_the_contract_throttled_with_a_final_100_percent(
    endpoint: StatusEndpoint, capsys: pytest.CaptureFixture[str]
) -> None:
    sink = sink_for(endpoint)
    sink.started(INFO)
    began = time.monotonic()
    feed(sink, range(1, 201), pause_s=0.006)  # about 1.2 s of points; longer on a loaded machine
    fed_s = time.monotonic() - began
    sink.finished(True)

    every = endpoint.requests
    assert [r["code"] for r in every] == [200] * len(every), every
    # One report at the start, then at most one per 0.3 s of the run, and the final one.
    assert 3 <= len(every) <= fed_s / 0.3 + 3, (len(every), fed_s)
    assert endpoint.unknown_fields == []
    assert {r["path"] for r in every} == {
        "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/mnist/status"
    }
    assert {r["auth"] for r in every} == {"Bearer " + endpoint.token_file.read_text().strip()}
    first, last = endpoint.accepted[0], endpoint.accepted[-1]
    # The start: the reporting thread sends the newest point it holds, a few steps in on a loaded machine.
    assert first["trainerStatus"]["progressPercentage"] <= 5, first
    # What `kubectl get trainjob -o jsonpath='{.status.trainerStatus}'` shows after the run.
    status = endpoint.trainer_status
    assert status is not None and status == last["trainerStatus"]
    assert status["progressPercentage"] == 100 and status["estimatedRemainingSeconds"] == 0
    assert metrics(last) | {"train_loss": "?"} == {
        "step": "200",
        "total_steps": "200",
        "epoch": "2/2",
        "train_loss": "?",
        "learning_rate": "0.001",
        "samples_per_s": "1234",
        "test_loss": "0.2",
        "test_accuracy": "0.9412",
        "epoch_train_loss": "0.31",
    }
    middle = [b["trainerStatus"] for b in endpoint.accepted[1:-1]]
    assert all(0 < s["progressPercentage"] < 100 and s["estimatedRemainingSeconds"] == 13 for s in middle)
    assert capsys.readouterr().out == ""


def test_a_failed_run_reports_its_progress_and_no_time_left_estimate(endpoint: StatusEndpoint) -> None:
    sink = sink_for(endpoint, interval_s=60)
    sink.started(INFO)
    feed(sink, range(1, 51))
    sink.finished(False)
    status = endpoint.trainer_status
    assert status is not None and status["progressPercentage"] == 25
    assert "estimatedRemainingSeconds" not in status
    assert len(endpoint.requests) == 2  # the start, and the final report past the throttle


def test_a_resumed_run_starts_at_its_checkpoints_progress(endpoint: StatusEndpoint) -> None:
    sink = sink_for(endpoint)
    sink.started(RunInfo(**{**INFO.__dict__, "start_step": 100}))
    time.sleep(0.2)  # else the final report replaces the first before it is sent
    sink.finished(True)
    assert [b["trainerStatus"]["progressPercentage"] for b in endpoint.accepted] == [50, 100]


def test_a_refused_token_stops_the_reports_with_one_line_and_no_secret(
    endpoint: StatusEndpoint, capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint.mode = "refuse"
    sink = sink_for(endpoint, interval_s=0.05)
    sink.started(INFO)
    feed(sink, range(1, 60), pause_s=0.01)
    sink.finished(True)
    out = capsys.readouterr().out
    port = endpoint.url.split("/")[2]
    assert (
        out
        == f"trainer: TrainJob progress report to {port} failed: HTTP 403: Forbidden; no further reports\n"
    )
    assert endpoint.token_file.read_text().strip() not in out
    assert len(endpoint.requests) == 1


def test_an_endpoint_that_fails_is_tried_again_with_one_line(
    endpoint: StatusEndpoint, capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint.mode = "error"
    sink = sink_for(endpoint, interval_s=0.05)
    sink.started(INFO)
    feed(sink, range(1, 30), pause_s=0.01)
    endpoint.mode = "ok"
    sink.finished(True)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and "HTTP 500: Internal error; training goes on" in lines[0]
    assert len(endpoint.requests) >= 3
    assert endpoint.trainer_status is not None and endpoint.trainer_status["progressPercentage"] == 100


def test_no_endpoint_costs_the_loop_nothing(
    endpoint: StatusEndpoint, capsys: pytest.CaptureFixture[str]
) -> None:
    from infra.local.ports import free_port

    closed = (
        f"https://127.0.0.1:{free_port()}/apis/trainer.kubeflow.org/v1alpha1/namespaces/a/trainjobs/b/status"
    )
    sink = sink_for(endpoint, url=closed, interval_s=0.01)
    sink.started(INFO)
    longest = feed(sink, range(1, 201), pause_s=0.002)
    start = time.perf_counter()
    sink.finished(True)
    assert time.perf_counter() - start < 1.0
    assert longest < 0.2, longest  # no point waits on the closed port: it only hands a body over
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and "refused" in lines[0].lower() and "training goes on" in lines[0], lines


def test_a_slow_endpoint_never_holds_the_loop_and_finish_is_bounded(
    endpoint: StatusEndpoint, capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint.mode, endpoint.delay_s = "slow", 3.0
    sink = sink_for(endpoint, interval_s=0.05, timeout_s=0.4, finish_wait_s=1.0)
    sink.started(INFO)
    longest = feed(sink, range(1, 201), pause_s=0.003)
    start = time.perf_counter()
    sink.finished(True)
    waited = time.perf_counter() - start
    # Each point only hands a body to the reporting thread: far below the endpoint's 0.4-s timeout or
    # 3-s delay that a blocking call would wait out (0.2 s leaves room for a loaded machine's scheduling).
    assert longest < 0.2, longest
    assert waited < 1.3, waited
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and "timed out" in lines[0], lines


@pytest.mark.parametrize(
    ("present", "made"),
    [((URL_ENV, CA_CERT_ENV, TOKEN_ENV), 1), ((URL_ENV, TOKEN_ENV), 0), ((), 0)],
)
def test_the_sink_exists_only_where_trainer_injected_all_three_variables(
    present: tuple[str, ...], made: int
) -> None:
    environ = {name: f"/var/run/secrets/kubeflow/trainer/{name}" for name in present}
    assert len(sinks_from_env(environ)) == made


@pytest.mark.slow  # a real trainer process
@pytest.mark.parametrize("mode", ["ok", "down"])
def test_the_trainer_reports_to_the_endpoint_trainer_injects(
    procs: Any, mnist_root: Path, tmp_path: Path, mode: str
) -> None:
    with status_endpoint(tmp_path / "endpoint") as endpoint:
        url = endpoint.url
        if mode == "down":
            from infra.local.ports import free_port

            url = url.replace(url.split("/")[2], f"127.0.0.1:{free_port()}")
        env = procs.env(
            **{URL_ENV: url, CA_CERT_ENV: str(endpoint.ca_file), TOKEN_ENV: str(endpoint.token_file)}
        )
        start = time.perf_counter()
        result = procs.run(
            "trainer",
            [f"--data={mnist_root}", f"--checkpoint-dir={tmp_path / 'ckpt'}", "--epochs=1", "--batch-size=64"]
            + ["--train-limit=256", "--log-every=1"],
            env=env,
        )
        took = time.perf_counter() - start
    assert result.returncode == 0, result.stderr[-3000:]
    token = endpoint.token_file.read_text().strip()
    assert token not in result.stdout + result.stderr
    failures = [line for line in result.stdout.splitlines() if "TrainJob progress report" in line]
    if mode == "down":
        assert len(failures) == 1 and "training goes on" in failures[0], failures
        assert endpoint.requests == []
        return
    assert failures == []
    assert [r["code"] for r in endpoint.requests] == [200] * len(endpoint.requests)
    assert endpoint.unknown_fields == []
    status = endpoint.trainer_status
    assert (
        status is not None
        and status["progressPercentage"] == 100
        and status["estimatedRemainingSeconds"] == 0
    )
    found = {m["name"]: m["value"] for m in status["metrics"]}
    assert found["step"] == found["total_steps"] == "4" and found["epoch"] == "1/1"
    assert 0.0 <= float(found["test_accuracy"]) <= 1.0
    assert took < 120
