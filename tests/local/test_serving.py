"""The local scheduler serves the trained model as the cluster would: the rendered server pod's own
command behind a local Service, the whole test set over HTTP with the trainer's accuracy, a rolling
update that never leaves the Service without a Ready server, and a corrupt model that never gets Ready."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from infra.local import cli, serve
from infra.local.evaluate import infer_body, load_test_set
from infra.local.serve import (
    LocalDeployment,
    ServeFailed,
    ServerPlan,
    ServerPod,
    local_service,
)
from infra.local.serve_stack import ServeOptions, serve_model
from infra.local.stack import run_rendering
from infra.local.workloads import plan_workloads
from infra.review.cluster import cluster_view
from infra.review.manifest import render
from infra.stackconfig import load_stack
from tests.infra.conftest import render_config
from tests.runcount import STAND_IN_FLAGS
from tests.serve.conftest import train
from tests.trainer.conftest import SHARED_MNIST, subprocess_env

pytestmark = pytest.mark.slow  # real trainer and model server processes

SERVE_PVC = {"jobWait": True, "serveKind": "deployment", "serveModelSource": "pvc", "serveReplicas": 1}


@pytest.fixture(scope="module")
def model_a(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not SHARED_MNIST.is_dir():
        pytest.skip(f"real MNIST not found at {SHARED_MNIST}")
    return train(tmp_path_factory.mktemp("model-a"))


@pytest.fixture(scope="module")
def model_b(model_a: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A's model with other weights (its last layer's bias shifted) and its own SHA256SUMS."""
    import torch

    from trainer.mnist_files import format_sums

    out = tmp_path_factory.mktemp("model-b")
    state = torch.load(model_a / "model.pt", weights_only=True)
    bias = [k for k in state if k.endswith("bias")][-1]
    state[bias] = state[bias] + torch.arange(state[bias].numel(), dtype=state[bias].dtype)
    torch.save(state, out / "model.pt")
    digest = hashlib.sha256((out / "model.pt").read_bytes()).hexdigest()
    (out / "SHA256SUMS").write_text(format_sums({"model.pt": digest}))
    return out


def _plan(model: Path, version: str, *flags: str) -> ServerPlan:
    argv = [sys.executable, "-m", "trainer.serve", f"--model-uri={model}", "--model-name=mnist", *flags]
    env = {**subprocess_env(), "OMP_NUM_THREADS": "1"}
    return ServerPlan(f"mnist-serve-{version}-0", [*argv, f"--model-version={version}"], env, version)


def _stack_with_model(model: Path, root: Path, values: dict | None = None):
    """A stack serving from the checkpoint PVC, its run's output directory holding `model`'s files."""
    rendering = render_config({**SERVE_PVC, **(values or {})})
    job = plan_workloads(rendering, root, {})[-1]
    assert job.output_dir is not None
    shutil.copytree(model, job.output_dir, dirs_exist_ok=True)
    pods = cluster_view(rendering.objects, rendering.settings).admission.pods
    return rendering, pods, job


def test_served_accuracy_equals_the_trainers_own_and_the_server_stops_on_sigterm(model_a, tmp_path):
    rendering, pods, job = _stack_with_model(model_a, tmp_path)
    out = io.StringIO()
    serve_model(rendering, pods, tmp_path, {}, job, out, ServeOptions(port=0))
    output = out.getvalue()
    trained = json.loads((model_a / "metrics.json").read_text())["final_test_accuracy"]
    correct = round(trained * 10000)
    assert f"served accuracy {correct / 100:.2f}% ({correct}/10000 test images over HTTP" in output
    assert f"final_test_accuracy {100 * trained:.2f}%" in output
    assert "local server process(es) stand in for its pods" in output
    assert "[mnist-serve-r1-0]" in output and str(job.output_dir) in output  # the PVC, mapped here
    assert "[local] latency per request p50" in output and "images/s" in output
    assert (
        "curl -s http://127.0.0.1:" in output
        and "/v2/models/mnist/infer -H 'Content-Type: application/json' -d @-" in output
    )
    assert (
        "[local] in the cluster: http://mnist-serve.ddp-mnist.svc.cluster.local:8080/v2/models/mnist"
        in output
    )
    assert "stopped (SIGTERM: exit 0)" in output


def test_a_served_accuracy_other_than_the_trainers_fails_the_run(model_b, tmp_path):
    rendering, pods, job = _stack_with_model(model_b, tmp_path)
    (job.output_dir / "metrics.json").write_text(json.dumps({"final_test_accuracy": 0.9999}))
    with pytest.raises(ServeFailed, match=r"^served accuracy \d+/10000 differs from the trainer's") as failed:
        serve_model(rendering, pods, tmp_path, {}, job, io.StringIO(), ServeOptions(port=0))
    assert "\n" not in str(failed.value)


def test_a_model_failing_its_checksum_is_never_ready_and_fails_the_run_in_one_line(model_a, tmp_path, capsys):
    rendering, pods, job = _stack_with_model(model_a, tmp_path)
    model = job.output_dir / "model.pt"
    model.write_bytes(model.read_bytes()[:-1] + b"x")
    out = io.StringIO()
    with pytest.raises(ServeFailed) as failed:
        serve_model(rendering, pods, tmp_path, {}, job, out, ServeOptions(port=0))
    message = str(failed.value)
    assert "\n" not in message
    assert message.startswith("server pod mnist-serve-r1-0 exited with 3 before it was Ready: ")
    assert "sha256" in message
    assert "Ready (model version" not in out.getvalue()

    # The same through the command line: exit 1 and that one line.
    def fail(*args, **kwargs):
        raise ServeFailed(message)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cli, "run_stack", fail)
        assert cli.main(["--stack", "dev"]) == cli.EXIT_FAILED
    assert capsys.readouterr().err == f"local: {message}\n"


def test_rollout_to_a_new_model_never_leaves_the_service_without_a_ready_server(model_a, model_b, tmp_path):
    """Under continuous load, through the Service stand-in that loses a pod's endpoint only
    ENDPOINT_LAG_S after the pod got SIGTERM (as kube-proxy does): no request fails, since the
    stopping server keeps answering for its drain period."""
    images, _ = load_test_set(SHARED_MNIST)
    body = infer_body(images[: 4 * 784])
    failures: list[str] = []
    versions: list[str] = []
    stop = threading.Event()

    with local_service(0) as service:
        deployment = LocalDeployment(service, io.StringIO(), Path.cwd(), ready_timeout=120)
        deployment.start([_plan(model_a, "A")])

        def client() -> None:
            while not stop.is_set():
                try:
                    with urllib.request.urlopen(service.url + "/v2/models/mnist", timeout=30) as meta:
                        version = json.loads(meta.read())["versions"][0]
                    request = urllib.request.Request(
                        service.url + "/v2/models/mnist/infer",
                        data=body,
                        headers={"Content-Type": "application/json"},
                        method="POST",
                    )
                    with urllib.request.urlopen(request, timeout=30) as answer:
                        assert len(json.loads(answer.read())["outputs"][0]["data"]) == 4
                    versions.append(version)
                except (OSError, AssertionError, KeyError, ValueError) as error:
                    failures.append(repr(error))

        poller = threading.Thread(target=client)
        poller.start()
        try:
            deadline = time.monotonic() + 60
            while not versions and time.monotonic() < deadline:
                time.sleep(0.05)
            deployment.rollout([_plan(model_b, "B")])
            seen = len(versions)
            while len(versions) < seen + 3 and time.monotonic() < deadline + 60:
                time.sleep(0.05)
        finally:
            stop.set()
            poller.join(60)
            deployment.stop()

    assert not failures, failures[:3]
    assert versions[0] == "A" and versions[-1] == "B"
    assert versions[-3:] == ["B"] * 3  # once A left the Service, only B answers


def test_dev_stack_run_ends_with_the_served_accuracy_equal_to_metrics_json(tmp_path):
    """`make run`'s stack (small epochs): seed, train, export to the S3 stand-in, serve from it."""
    out = io.StringIO()
    job, result = run_rendering(  # two steps an epoch: the serving path is under test
        render(load_stack("dev")), tmp_path, 600, {}, out, serving=ServeOptions(port=0), train_limit=512
    )
    output = out.getvalue()
    assert result.succeeded, output[-4000:]
    assert "[local] --train-limit: the trainer uses only the first 512 of 60000 training images" in output
    trained = json.loads((job.output_dir / "metrics.json").read_text())["final_test_accuracy"]
    correct = round(trained * 10000)
    assert f"served accuracy {correct / 100:.2f}% ({correct}/10000 test images over HTTP" in output
    assert "s3://mnist/mnist/models/mnist-r1" in output and "SeaweedFS at http://127.0.0.1:" in output
    assert "[mnist-serve-r1-0]" in output and "stopped (SIGTERM: exit 0)" in output
    assert output.index("[local] job mnist-r1 Succeeded") < output.index("server pod mnist-serve-r1-0 Ready")
    # It ends with the command that opens the run's curves, where the trainer wrote them.
    curves = tmp_path / "pvc" / "ddp-mnist-checkpoints" / "mnist-r1" / "tensorboard"
    assert list(curves.glob("events.out.tfevents.*"))
    assert output.splitlines()[-1] == (
        "[local] curves (the local stand-in for the stack's TensorBoard Deployment): "
        f"{Path(sys.executable).with_name('tensorboard')} --logdir {curves} --host 127.0.0.1 --port 6006, "
        "then open http://127.0.0.1:6006"
    )


def test_a_rollout_whose_new_pod_never_gets_ready_leaves_the_old_one_serving(model_a, tmp_path):
    corrupt = tmp_path / "corrupt"
    shutil.copytree(model_a, corrupt)
    (corrupt / "model.pt").write_bytes((corrupt / "model.pt").read_bytes()[:-1] + b"x")
    with local_service(0) as service:
        deployment = LocalDeployment(service, io.StringIO(), Path.cwd(), ready_timeout=120)
        try:
            deployment.start([_plan(model_a, "A")])
            with pytest.raises(ServeFailed, match="mnist-serve-C-0 exited with 3 before it was Ready"):
                deployment.rollout([_plan(corrupt, "C")])
            with urllib.request.urlopen(service.url + "/v2/models/mnist", timeout=30) as meta:
                assert json.loads(meta.read())["versions"] == ["A"]
            assert [p.plan.version for p in deployment.pods] == ["A"]
        finally:
            deployment.stop()


def test_a_taken_service_port_gives_way_unless_the_user_chose_it():
    """`make run` on a machine where the stack's servePort is taken still serves, on a free port, and
    says so; a port given with --serve-port is the user's choice and a taken one is one line."""
    import socket

    from infra.local.serve import ServeFailed, local_service

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = io.StringIO()
        with local_service(port, chosen=False, out=out) as service:
            assert service.port not in (0, port)
        assert out.getvalue() == (
            f"[local] port {port} (servePort) is taken on 127.0.0.1 (Address already in use); the local "
            f"Service listens on http://127.0.0.1:{service.port} instead (--serve-port picks one)\n"
        )
        refused = rf"^--serve-port={port}: cannot listen on 127.0.0.1:{port} "
        with pytest.raises(ServeFailed, match=refused), local_service(port, chosen=True):
            pass


def _stand_in_server(name: str, on_sigterm: int) -> ServerPlan:
    """A server pod's process that never gets Ready and exits `on_sigterm` on SIGTERM (no model, no HTTP)."""
    script = (
        "import signal, sys, time\n"
        f"signal.signal(signal.SIGTERM, lambda *_: sys.exit({on_sigterm}))\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    return ServerPlan(name, [sys.executable, *STAND_IN_FLAGS, "-c", script], {})


def test_a_server_pod_interrupted_before_it_is_ready_is_not_left_running(monkeypatch):
    """Ctrl-C (or the run's SIGTERM) while a new server pod is waited for: that pod is stopped too,
    though it is not yet one of the deployment's pods (it ran on, in a session of its own)."""
    started = []

    def interrupted(pod, timeout):
        started.append(pod)
        raise KeyboardInterrupt

    monkeypatch.setattr(ServerPod, "wait_ready", interrupted)
    with local_service(0) as service:
        deployment = LocalDeployment(service, io.StringIO(), Path.cwd(), ready_timeout=120)
        with pytest.raises(KeyboardInterrupt):
            deployment.start([_stand_in_server("mnist-serve-r1-0", on_sigterm=0)])
    (pod,) = started
    assert pod.proc.poll() is not None


def test_stopping_the_deployment_stops_every_pod_when_one_fails_to_stop_cleanly(monkeypatch):
    """One pod exiting 3 on SIGTERM is reported (the first error, raised at the end); the pods after
    it are still stopped, not left serving. (No endpoint lag: no request is in flight here.)"""
    monkeypatch.setattr(serve, "ENDPOINT_LAG_S", 0)
    with local_service(0) as service:
        out = io.StringIO()
        deployment = LocalDeployment(service, out, Path.cwd(), ready_timeout=120)
        plans = [_stand_in_server(f"mnist-serve-r1-{i}", on_sigterm=code) for i, code in enumerate((3, 0))]
        pods = [ServerPod(plan, out, deployment.lock, Path.cwd()) for plan in plans]
        deployment.pods.extend(pods)
        deadline = time.monotonic() + 30
        while not all("up" in pod.tail for pod in pods) and time.monotonic() < deadline:
            time.sleep(0.02)  # their handlers are set
        with pytest.raises(ServeFailed, match="server pod mnist-serve-r1-0 exited with 3 on SIGTERM"):
            deployment.stop()
    assert [pod.proc.poll() for pod in pods] == [3, 0]
    assert deployment.pods == []
