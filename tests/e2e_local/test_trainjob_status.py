"""The TrainJob progress report with the real Trainer v2.3.0 controller and its status server:

24. the platform stack, updated with `trainerProgress`, runs the controller with the TrainJobStatus gate
    and it stays up (its status server finds the API server's service-account issuer by OpenID
    discovery at start, `pkg/statusserver/auth.go` Init); a TrainJob stack with `trainerProgress`
    trains, and its trainer pods carry what the controller injects (the endpoint's URL, CA and token
    files, the projected token for the TrainJob's own audience and the CA ConfigMap); a report sent by
    `trainer/trainjob_status.py`'s sink, with a token minted for that audience, reaches the controller
    at the injected URL and lands in `status.trainerStatus`, which the stack's `statusCommand` prints;
    a token for another TrainJob's audience is refused (403) and ends the reports.

Pods under KWOK run no process, so the test stands where rank 0 would: it mints the token the kubelet
would project (TokenRequest, same service account and audience), takes the CA from the ConfigMap the
controller made, and reaches the Service named in the URL through the tier's Service proxy (the
supervisor's CONNECT proxy on its Unix socket, which the API server uses for webhooks), as
`https_proxy` for the sink's own `urllib` request.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.local.ports import free_port
from infra.localcluster import cluster
from infra.program.common.meta import STATUS_SERVER_PORT
from infra.program.platform.trainer_v2 import PROGRESS_GATE
from tests.e2e import live
from tests.e2e.project import Backend
from tests.e2e_local import scenario
from trainer.progress import RunInfo
from trainer.trainjob_status import CA_CERT_ENV, TOKEN_ENV, URL_ENV, TrainJobStatusSink

pytestmark = pytest.mark.e2e_local

NAMESPACE = "ddp-mnist-local-progress"
TRAINER_NAMESPACE = "kubeflow-system"
CONTROLLER = "kubeflow-trainer-controller-manager"
# v2.3.0 pkg/runtime/framework/plugins/trainjobstatus/trainjobstatus.go: where the files are mounted,
# the projected volume's name; pkg/statusserver/utils.go: the audience and the URL's path.
MOUNT = "/var/run/secrets/kubeflow/trainer"
TOKEN_VOLUME = "kubeflow-trainer-token"


def audience(namespace: str, name: str) -> str:
    return f"trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"


@pytest.fixture(scope="module")
def platform_progress(platform: dict) -> Iterator[dict]:
    """The session's platform stack with Trainer v2 and the TrainJobStatus gate; the gate off again
    after the module, so later scenarios see the controller as scenario 11 left it."""
    on = {
        "ddp-mnist:trainerInstall": "true",
        "ddp-mnist:allowBothOperators": "true",
        "ddp-mnist:trainerProgress": "true",
    }
    result = scenario.update_platform(platform, on)
    yield {"outputs": scenario.outputs(result), "result": result}
    if not scenario.KEEP:
        scenario.update_platform(platform, {"ddp-mnist:trainerProgress": "false"})


@pytest.fixture(scope="module")
def progress_job(backend: Backend, platform_progress: dict) -> Iterator[dict]:
    yield from scenario.job_stack(
        backend, "progress", NAMESPACE, jobKind="trainjob", trainerPresent="true", trainerProgress="true"
    )


@contextlib.contextmanager
def service_proxy(egress_socket: Path) -> Iterator[str]:
    """`http://127.0.0.1:<port>`: each connection is carried to the supervisor's CONNECT proxy, which
    sends a `CONNECT <service>.<namespace>.svc:<port>` on to the stand-in process behind that Service."""
    listener = socket.create_server(("127.0.0.1", free_port()))
    listener.settimeout(0.5)
    stopping = threading.Event()

    def pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def serve() -> None:
        while not stopping.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(str(egress_socket))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=pipe, args=(source, sink), daemon=True).start()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stopping.set()
        server.join(5)
        listener.close()


def mint_token(account: str, aud: str) -> str:
    """What the kubelet projects into the pod: a token of its service account for `aud`."""
    return live.kubectl(
        "create", "token", account, "-n", NAMESPACE, "--audience", aud, "--duration", "10m"
    ).strip()


def report(url: str, ca: Path, token: Path) -> TrainJobStatusSink:
    """One run's reports as rank 0 sends them: the first at `started` (step 3 of 8), the last at
    `finished` (100%, nothing left); the sink, once its last report is answered."""
    sink = TrainJobStatusSink(url, str(ca), str(token), timeout_s=15, finish_wait_s=40)
    sink.started(RunInfo(8, 3, 4, 2, 64, 1, "gloo"))
    sink.finished(True)
    return sink


def test_24_the_controller_with_the_gate_takes_a_report_into_the_trainjob_status(
    progress_job: dict,
    platform_progress: dict,
    local_cluster: cluster.State,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deployment = live.get("deployment", CONTROLLER, TRAINER_NAMESPACE)
    manager = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "manager")
    assert PROGRESS_GATE in manager["args"], manager["args"]

    outputs = scenario.outputs(progress_job["stack"].up(on_output=print, show_secrets=False))
    assert outputs["jobOutcome"] == "Complete", outputs["jobOutcome"]
    job = outputs["jobName"]

    # What the controller injected into the trainer's pods (the TrainJobStatus plugin).
    pods = scenario.wait_for_pods(NAMESPACE, f"jobset.sigs.k8s.io/jobset-name={job}")
    assert pods
    url = (
        f"https://{CONTROLLER}.{TRAINER_NAMESPACE}.svc:{STATUS_SERVER_PORT}"
        f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{NAMESPACE}/trainjobs/{job}/status"
    )
    for pod in pods:
        for container in pod["spec"]["containers"]:
            env = {e["name"]: e.get("value") for e in container.get("env", [])}
            assert env[URL_ENV] == url
            assert env[CA_CERT_ENV] == f"{MOUNT}/ca.crt"
            assert env[TOKEN_ENV] == f"{MOUNT}/token"
            mounts = [m for m in container["volumeMounts"] if m["name"] == TOKEN_VOLUME]
            assert mounts == [{"name": TOKEN_VOLUME, "mountPath": MOUNT, "readOnly": True}], mounts
        (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == TOKEN_VOLUME]
        token_source, ca_source = volume["projected"]["sources"]
        assert token_source["serviceAccountToken"] == {
            "audience": audience(NAMESPACE, job),
            "expirationSeconds": 3600,
            "path": "token",
        }
        assert ca_source["configMap"]["name"] == f"{job}-tls-config"
        assert ca_source["configMap"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]

    # Rank 0's side: the files the kubelet would mount, and the sink's own request.
    account = pods[0]["spec"].get("serviceAccountName") or "default"
    ca = tmp_path / "ca.crt"
    ca.write_text(live.get("configmap", f"{job}-tls-config", NAMESPACE)["data"]["ca.crt"])
    token = tmp_path / "token"
    token.write_text(mint_token(account, audience(NAMESPACE, job)))
    other = tmp_path / "other-token"
    other.write_text(mint_token(account, audience(NAMESPACE, "another-job")))
    for name in ("no_proxy", "NO_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    with service_proxy(local_cluster.egress_socket) as proxy:
        monkeypatch.setenv("https_proxy", proxy)
        refused = report(url, ca, other)
        taken = report(url, ca, token)
    assert (refused.sent, refused.failures) == (0, 1)  # 403, which ends the reports
    assert taken.failures == 0 and taken.sent >= 1  # the first report may be replaced by the last

    deadline = time.monotonic() + 30
    while "trainerStatus" not in (status := live.get("trainjob", job, NAMESPACE).get("status", {})):
        assert time.monotonic() < deadline, status
        time.sleep(1)
    reported = status["trainerStatus"]
    assert reported["progressPercentage"] == 100
    assert reported["estimatedRemainingSeconds"] == 0
    assert reported["metrics"] == [{"name": "step", "value": "3"}, {"name": "total_steps", "value": "8"}]
    assert reported["lastUpdatedTime"]
    shown = subprocess.run(outputs["statusCommand"], shell=True, capture_output=True, text=True, timeout=30)
    assert shown.stdout.startswith(f"{job} "), (shown.stdout, shown.stderr)
    assert "progress=100% eta=0s" in shown.stdout and "step=3 total_steps=8" in shown.stdout, shown.stdout

    # The controller took the gate and kept running: its status server initialised once, no failure.
    log = local_cluster.log(f"pod-{TRAINER_NAMESPACE}-{CONTROLLER}").read_text(errors="replace")
    assert "Starting runtime status server with TLS" in log
    assert "token authorizer initialization failed" not in log
