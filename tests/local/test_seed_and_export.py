"""Local runs start where a fresh cluster starts: empty volumes. Every workload the stack renders runs
in dependency order (the seed Job, then the training job), the stack's MinIO is a local SeaweedFS, and
the model ends up in its bucket."""

from __future__ import annotations

import hashlib
import io
import re
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from infra.local.ports import free_port
from infra.local.s3 import local_s3
from infra.local.stack import run_rendering
from tests.infra.conftest import render_config

pytestmark = pytest.mark.slow  # local runs with the S3 stand-in and the trainer

SMALL = {
    "jobNodes": 2,
    "jobEpochs": 1,
    "jobCpuRequest": "1",
    "jobMemoryRequest": "1Gi",
    "jobMemoryLimit": "2Gi",
    "jobShmSize": "256Mi",
}
MINIO = {
    "minioEndpoint": "minio.minio.svc.cluster.local:9000",
    "minioTls": False,
    "minioBucket": "mnist",
    "minioPrefix": "mnist",
    "minioExistingSecret": "minio-credentials",
    "createNamespace": False,  # an existing Secret lives in a namespace prepared beforehand
}
DATA = Path("pvc/ddp-mnist-data/mnist/MNIST/raw")


def _run(values: dict, root: Path, overrides: dict[str, str] | None = None, timeout: float = 400):
    """The stack's workloads in order; the trainer on 512 images (two steps an epoch): what is under test
    is the order, the volumes and the bucket, not the accuracy (tests/local/test_local_scheduler.py)."""
    out = io.StringIO()
    rendering = render_config({**SMALL, **values})
    job, result = run_rendering(rendering, root, timeout, overrides or {}, out, train_limit=512)
    return job, result, out.getvalue()


def _bucket_objects(root: Path) -> dict[str, bytes]:
    """The stand-in's bucket as the run left it (its data directory persists between runs)."""
    with local_s3(root / "s3") as s3:
        client = s3.client()
        listed = client.list_objects_v2(Bucket="mnist", Prefix="mnist/models/").get("Contents", [])
        return {o["Key"]: client.get_object(Bucket="mnist", Key=o["Key"])["Body"].read() for o in listed}


@pytest.mark.parametrize("kind", ["pytorchjob", "indexed-job"])
def test_from_empty_volumes_seed_then_train_then_export_and_again_without_reseeding(kind, tmp_path):
    values = {**MINIO, "jobKind": kind, "seedSource": "s3", "jobModelExport": True}
    job, result, output = _run(values, tmp_path)
    assert result.succeeded, output[-4000:]
    assert "is a local stand-in here: SeaweedFS at http://127.0.0.1:" in output
    assert "[local] trainer.seed: wrote 4 files and SHA256SUMS to s3://mnist/mnist" in output
    assert f"[ddp-mnist-seed] trainer.seed: wrote 4 files and SHA256SUMS to {tmp_path / DATA}" in output
    assert output.index("[local] job ddp-mnist-seed Succeeded") < output.index(
        "[local] job mnist-r1 Succeeded"
    )
    objects = _bucket_objects(tmp_path)
    assert sorted(objects) == [
        f"mnist/models/mnist-r1/{n}" for n in ("SHA256SUMS", "lineage.json", "metrics.json", "model.pt")
    ]
    local_model = (job.output_dir / "model.pt").read_bytes()
    assert (
        hashlib.sha256(objects["mnist/models/mnist-r1/model.pt"]).digest()
        == hashlib.sha256(local_model).digest()
    )

    job, again, output = _run(values, tmp_path)
    assert again.succeeded, output[-4000:]
    assert (
        f"[ddp-mnist-seed] trainer.seed: {tmp_path / DATA} already holds MNIST (verified against SHA256SUMS); nothing to do"
        in output
    )
    assert "s3://mnist/mnist already holds MNIST" in output
    assert "trainer: epoch" not in output  # the finished run trains nothing
    assert "already holds this run's" in output  # and uploads nothing again


def test_a_corrupted_file_on_the_data_volume_is_seeded_again_before_training(tmp_path):
    values = {**MINIO, "seedSource": "s3", "jobEpochs": 1}
    _, first, output = _run(values, tmp_path)
    assert first.succeeded, output[-3000:]
    images = tmp_path / DATA / "train-images-idx3-ubyte.gz"
    images.write_bytes(images.read_bytes()[:1000])
    _, second, output = _run({**values, "jobRunId": "r2"}, tmp_path)
    assert second.succeeded, output[-3000:]
    assert f"[ddp-mnist-seed] trainer.seed: {images} does not match SHA256SUMS; seeding again" in output
    assert output.index("seeding again") < output.index("[mnist-r2-master-0]")


def test_seed_job_with_rejected_keys_fails_at_once_with_4(tmp_path):
    with local_s3(tmp_path / "s3") as s3:
        overrides = {
            "AWS_ENDPOINT_URL": s3.endpoint,
            "AWS_ACCESS_KEY_ID": "wrong",
            "AWS_SECRET_ACCESS_KEY": "wrong",
        }
        job, result, output = _run({**MINIO, "seedSource": "s3"}, tmp_path / "root", overrides, timeout=120)
    assert job.job_name == "ddp-mnist-seed" and not result.succeeded
    assert result.reason.startswith("pod ddp-mnist-seed exited with 4 (no retry for this exit code)"), (
        result.reason
    )
    assert "restarting" not in output and "[mnist-r1-" not in output


def test_seed_job_with_an_unreachable_source_is_retried_then_fails_with_205(tmp_path):
    overrides = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}",
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
    }
    values = {**MINIO, "seedSource": "s3", "seedBackoffLimit": 1}
    job, result, output = _run(values, tmp_path, overrides, timeout=180)
    assert job.job_name == "ddp-mnist-seed" and not result.succeeded
    assert "[local] pod ddp-mnist-seed exited with 205; restarting in 10s (1/1" in output
    assert result.reason.startswith("pod ddp-mnist-seed exited with 205 (backoff limit reached)"), (
        result.reason
    )
    assert "[mnist-r1-" not in output  # the training job never starts


def _weed_argv(data_dir: Path) -> list[str]:
    """The command line of the `weed` process serving `data_dir`, read from /proc."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().decode(errors="replace").split("\0")
        except OSError:  # a process of another test that ended meanwhile
            continue
        if f"-dir={data_dir}" in argv:
            found.append(argv)
    (argv,) = found
    return argv


def test_the_s3_stand_in_leaves_nothing_outside_its_data_directory(tmp_path, monkeypatch):
    """SeaweedFS writes scratch volumes and its logs under $TMPDIR; the stand-in points that into its
    own data directory. Its Unix sockets are always in /tmp, named by its ports; the stand-in removes
    them once it stops. So a run leaves nothing in the machine's /tmp."""
    outside = tmp_path / "machine-tmp"
    outside.mkdir()
    monkeypatch.setenv("TMPDIR", str(outside))
    with local_s3(tmp_path / "s3") as s3:
        client = s3.client()
        client.create_bucket(Bucket="scratch-check")
        client.put_object(Bucket="scratch-check", Key="k", Body=b"x" * 100_000)
        assert client.get_object(Bucket="scratch-check", Key="k")["Body"].read() == b"x" * 100_000
        ports = [
            arg.split("=")[1]
            for arg in _weed_argv(tmp_path / "s3")
            if re.match(r"-[\w.]*port(\.grpc)?=", arg)
        ]
        sockets = [p for port in ports for p in Path("/tmp").glob(f"seaweedfs-*-{port}.sock")]
        assert any(p.name.startswith("seaweedfs-s3-") for p in sockets), sockets  # while it runs
    assert list(outside.iterdir()) == []
    assert any((tmp_path / "s3" / "tmp").iterdir())  # where they went instead
    assert [p for p in sockets if p.exists()] == []


def test_the_s3_stand_in_holds_more_buckets_than_the_disk_has_free_gib(tmp_path):
    """Each bucket takes a volume of its own, and `weed mini` allows free disk space / volume size
    volumes. At its own size for a large disk (1 GiB) a machine with 5 GiB free held four buckets and
    failed writes to the fifth with InternalError; with the stand-in's small volumes it holds 24 here
    on any machine with 1 GiB free, each written and read back."""
    with local_s3(tmp_path / "s3") as s3:
        client, buckets = s3.client(), [f"bucket-{n}" for n in range(24)]
        for bucket in buckets:
            client.create_bucket(Bucket=bucket)
        with ThreadPoolExecutor(8) as pool:  # each first write grows a volume: in parallel, 0.7 s
            list(pool.map(lambda b: client.put_object(Bucket=b, Key="k", Body=b.encode()), buckets))
        for bucket in buckets:
            assert client.get_object(Bucket=bucket, Key="k")["Body"].read() == bucket.encode()


def test_a_port_taken_before_weed_binds_it_starts_the_stand_in_again_on_new_ports(tmp_path, monkeypatch):
    """The stand-in picks free ports, then weed binds them: one taken in between (here the S3 port,
    held by a listener of the test's own) makes weed exit at once, and the stand-in starts it again."""
    from infra.local import s3 as stand_in

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        picks = iter([port])
        monkeypatch.setattr(stand_in, "free_port", lambda: next(picks, None) or free_port())
        with local_s3(tmp_path / "s3") as s3:
            assert s3.endpoint != f"http://127.0.0.1:{port}"
            s3.client().create_bucket(Bucket="after-a-clash")
            assert [b["Name"] for b in s3.client().list_buckets()["Buckets"]] == ["after-a-clash"]
    log = (tmp_path / "s3" / "weed.log").read_text()
    # The first start met the taken port; a loaded machine running other servers beside this test can
    # take one of the next start's random ports too, which the stand-in also starts again from. Served
    # once in the end, within its tries.
    clashes = stand_in.PORT_TAKEN.findall(log.encode())
    assert f"port {port} for S3" in log and 1 <= len(clashes) < stand_in.START_TRIES
    assert log.count("S3           ready") == 1


def test_the_s3_stand_in_serves_s3_alone_on_loopback_and_reports_nothing(tmp_path):
    """The `weed` process as it runs: bound to 127.0.0.1, no WebDAV gateway, telemetry off (SeaweedFS
    reports usage to its own server unless told not to)."""
    with local_s3(tmp_path / "s3"):
        flags = set(_weed_argv(tmp_path / "s3"))
    assert {"-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-webdav=false", "-master.telemetry=false"} <= flags
    log = (tmp_path / "s3" / "weed.log").read_text()
    assert "S3           ready" in log and "WebDAV       ready" not in log
