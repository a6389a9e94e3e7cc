"""The same run id started again, on each job kind through the local scheduler: an edited schedule
trains afresh (the old schedule's files moved aside) instead of crash-looping, and a failed model
export is retried to completion by the rank-0 pod alone, the other nodes having already finished."""

from __future__ import annotations

import contextlib
import io
import json
import socket
import threading
from pathlib import Path

import pytest

from infra.local.plan import JobPlan
from infra.local.ports import free_port
from infra.local.s3 import local_s3
from infra.local.supervisor import Supervisor
from infra.local.workloads import plan_stack
from tests.infra.conftest import render_config
from tests.local.seeding import seed_data_volume

pytestmark = pytest.mark.slow  # local runs of the trainer

SMALL = {
    "jobNodes": 2,
    "jobEpochs": 1,
    "jobCpuRequest": "1",
    "jobMemoryRequest": "1Gi",
    "jobMemoryLimit": "2Gi",
    "jobShmSize": "256Mi",
}
KINDS = {
    "pytorchjob": {},
    "indexed-job": {"jobKind": "indexed-job"},
    "trainjob": {"jobKind": "trainjob", "trainerInstall": True, "operatorInstall": False},
}
MINIO = {
    "minioEndpoint": "minio.minio.svc.cluster.local:9000",
    "minioTls": False,
    "minioBucket": "mnist",
    "minioPrefix": "mnist",
    "minioExistingSecret": "minio-credentials",
    "createNamespace": False,  # an existing Secret lives in a namespace prepared beforehand
    "jobModelExport": True,
}


def _plan(values: dict, root: Path, overrides: dict[str, str] | None = None) -> JobPlan:
    job = plan_stack(render_config({**SMALL, **values}), root, overrides or {})
    for pod in job.pods:
        pod.argv.append("--train-limit=512")  # two steps an epoch: only the rules are under test
    return job


def _run(job: JobPlan, out: io.StringIO | None = None) -> tuple[bool, str, str]:
    out = out or io.StringIO()
    result = Supervisor(job, out, restart_delay=1).run(300)
    return result.succeeded, result.reason, out.getvalue()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_an_edited_schedule_under_the_same_run_id_trains_afresh_and_says_so(kind, tmp_path):
    seed_data_volume(tmp_path)
    ok, reason, output = _run(_plan(KINDS[kind], tmp_path))
    assert ok, f"{reason}\n{output[-3000:]}"
    job = _plan({**KINDS[kind], "jobEpochs": 2}, tmp_path)  # the edit: same jobRunId
    ok, reason, output = _run(job)
    assert ok, f"{reason}\n{output[-3000:]}"
    assert "trainer: schedule changed: " in output and "; starting at epoch 1" in output
    assert "restarting" not in output and "usage" not in output
    run_dir = job.output_dir
    assert run_dir is not None
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert (metrics["epochs"], len(metrics["history"]), metrics["resumed_from_epoch"]) == (2, 2, 0)
    (archive,) = [p for p in run_dir.iterdir() if p.is_dir() and p.name.startswith("superseded-")]
    assert json.loads((archive / "metrics.json").read_text())["epochs"] == 1


class Gate:
    """A TCP port that refuses connections until `open()`, then forwards them to `target`: an S3
    endpoint that is down at first and comes back."""

    def __init__(self, port: int, target: tuple[str, int]) -> None:
        self.port, self.target = port, target
        self.opened = threading.Event()

    def open(self) -> None:
        if self.opened.is_set():
            return
        self.opened.set()
        server = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._serve, args=(server,), daemon=True).start()

    def _serve(self, server: socket.socket) -> None:
        while True:
            client, _ = server.accept()
            upstream = socket.create_connection(self.target)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


class OpensOnFailure(io.StringIO):
    """The scheduler's output; the first failed export (exit 205) brings the S3 endpoint back."""

    def __init__(self, gate: Gate) -> None:
        super().__init__()
        self.gate = gate

    def write(self, text: str) -> int:
        if "exited with 205" in text:
            self.gate.open()
        return super().write(text)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_failed_export_is_retried_to_completion_by_rank_0_alone(kind, tmp_path):
    seed_data_volume(tmp_path)
    with local_s3(tmp_path / "s3") as s3:
        host, port = s3.endpoint.removeprefix("http://").split(":")
        gate = Gate(free_port(), (host, int(port)))
        overrides = {**s3.env(), "AWS_ENDPOINT_URL": f"http://127.0.0.1:{gate.port}"}
        job = _plan({**KINDS[kind], **MINIO, "jobBackoffLimit": 1}, tmp_path, overrides)
        ok, reason, output = _run(job, OpensOnFailure(gate))
        assert ok, f"{reason}\n{output[-4000:]}"
        client = s3.client()
        listed = client.list_objects_v2(Bucket="mnist", Prefix="mnist/models/mnist-r1/").get("Contents", [])
        model = client.get_object(Bucket="mnist", Key="mnist/models/mnist-r1/model.pt")["Body"].read()
    first, retry = output.split("exited with 205", 1)
    assert "model export failed: " in first  # the first export: endpoint down
    assert sorted(o["Key"].rsplit("/", 1)[1] for o in listed) == [
        "SHA256SUMS",
        "lineage.json",
        "metrics.json",
        "model.pt",
    ]
    assert job.output_dir is not None and model == (job.output_dir / "model.pt").read_bytes()
    # The retry: rank 0 exports without torchrun (no rendezvous, no training), nothing else runs.
    assert "launch: run already finished (" in retry and "retrying its export alone" in retry
    assert "trainer: " not in retry and "waiting for master" not in retry
    assert "exported model.pt, metrics.json, lineage.json and SHA256SUMS" in retry
    if kind == "trainjob":  # JobSet restarted every node: the other one ends at once, no rendezvous
        assert "node rank 1 has nothing to do" in retry
    restarts = json.loads((job.output_dir / "metrics.json").read_text())["restarts"]
    assert [r["epochs_trained"] for r in restarts] == [0]
