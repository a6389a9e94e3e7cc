"""S3 against a real SeaweedFS server: seed, train from a bucket, verify the cache, exits 3/4/205."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # a real S3 server and trainer processes

BUCKET_URL = "s3://mnist-test/v1"


@pytest.fixture(scope="module")
def seeded(procs: Any, s3_server: Any, mnist_gz_dir: Path) -> Any:
    result = procs.run("trainer.seed", [f"--from={mnist_gz_dir}", f"--to={BUCKET_URL}"], env=s3_server.env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"trainer.seed: wrote 4 files and SHA256SUMS to {BUCKET_URL}"
    return s3_server


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_train_from_bucket_with_verified_cache(
    procs: Any, seeded: Any, mnist_gz_dir: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    args = [
        f"--data={BUCKET_URL}",
        f"--cache-dir={cache}",
        f"--checkpoint-dir={tmp_path / 'c'}",
        "--epochs=1",
        "--batch-size=64",
        "--train-limit=4096",
    ]
    result = procs.run("trainer.launch", procs.launch_args(2, args), env=seeded.env())
    assert result.returncode == 0, result.stderr[-3000:]
    raw = cache / "MNIST" / "raw"
    originals = {p.name: _sha256(p) for p in mnist_gz_dir.glob("*.gz")}
    assert {p.name: _sha256(p) for p in raw.glob("*.gz")} == originals
    sums = dict(line.split()[::-1] for line in (raw / "SHA256SUMS").read_text().splitlines())
    assert sums == originals
    # Two ranks on one node share the cache: each file was downloaded exactly once.
    assert result.stdout.count("trainer: s3: [local rank ") == 4
    metrics = json.loads((tmp_path / "c" / "metrics.json").read_text())
    assert metrics["world_size"] == 2
    assert metrics["final_test_accuracy"] > 0.9


def test_wrong_credentials_exit_4(procs: Any, seeded: Any, tmp_path: Path) -> None:
    env = seeded.env(AWS_SECRET_ACCESS_KEY="not-the-secret")
    result = procs.run("trainer", [f"--data={BUCKET_URL}", f"--cache-dir={tmp_path}"], env=env)
    assert result.returncode == 4
    assert result.stderr.splitlines() == [
        f"trainer: s3: {seeded.endpoint} rejected the credentials for {BUCKET_URL}/SHA256SUMS "
        "(SignatureDoesNotMatch); check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
    ]


def test_unknown_access_key_exit_4(procs: Any, seeded: Any, tmp_path: Path) -> None:
    env = seeded.env(AWS_ACCESS_KEY_ID="nobody")
    result = procs.run("trainer", [f"--data={BUCKET_URL}", f"--cache-dir={tmp_path}"], env=env)
    assert result.returncode == 4
    assert "(InvalidAccessKeyId)" in result.stderr


def test_closed_port_exit_205(procs: Any, seeded: Any, tmp_path: Path) -> None:
    endpoint = f"http://127.0.0.1:{procs.free_port()}"
    env = seeded.env(AWS_ENDPOINT_URL=endpoint)
    result = procs.run("trainer", [f"--data={BUCKET_URL}", f"--cache-dir={tmp_path}"], env=env)
    assert result.returncode == 205
    [line] = result.stderr.splitlines()
    assert line.startswith(f"trainer: s3: cannot reach the S3 endpoint {endpoint} for ")
    assert line.endswith("check AWS_ENDPOINT_URL and that the server is up")


def test_missing_prefix_exit_3(procs: Any, seeded: Any, tmp_path: Path) -> None:
    url = "s3://mnist-test/absent"
    result = procs.run("trainer", [f"--data={url}", f"--cache-dir={tmp_path}"], env=seeded.env())
    assert result.returncode == 3
    assert result.stderr.splitlines() == [
        f"trainer: data: {url}/SHA256SUMS not found (NoSuchKey); "
        "seed it with 'python -m trainer.seed --from DIR --to s3://BUCKET/PREFIX'"
    ]


def test_corrupt_object_in_bucket_exit_3(procs: Any, seeded: Any, mnist_gz_dir: Path, tmp_path: Path) -> None:
    url = "s3://mnist-test/tampered"
    assert (
        procs.run("trainer.seed", [f"--from={mnist_gz_dir}", f"--to={url}"], env=seeded.env()).returncode == 0
    )
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=seeded.endpoint,
        region_name="us-east-1",
        aws_access_key_id=seeded.key_id,
        aws_secret_access_key=seeded.secret,
    )
    client.put_object(Bucket="mnist-test", Key="tampered/t10k-labels-idx1-ubyte.gz", Body=b"x")
    result = procs.run("trainer", [f"--data={url}", f"--cache-dir={tmp_path}"], env=seeded.env())
    assert result.returncode == 3
    [line] = [x for x in result.stderr.splitlines() if x.startswith("trainer: data: ")]
    assert line.startswith(f"trainer: data: {url}/t10k-labels-idx1-ubyte.gz: sha256 ")
    assert not (tmp_path / "MNIST" / "raw" / "t10k-labels-idx1-ubyte.gz").exists()
