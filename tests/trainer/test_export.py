"""--export-to against a real S3 server: the model lands in the bucket, a failed export keeps every
local file, and starting the finished run again completes it without training."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # a real S3 server and trainer processes

EPOCH = re.compile(r"^trainer: epoch \d+/\d+ ", re.MULTILINE)
HINT = "keeps model.pt and metrics.json; start the same run again to retry the export"


def _client(server: Any) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        region_name="us-east-1",
        aws_access_key_id=server.key_id,
        aws_secret_access_key=server.secret,
    )


def _objects(server: Any, bucket: str, prefix: str) -> dict[str, bytes]:
    client = _client(server)
    listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return {o["Key"]: client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _args(mnist_root: Path, ckpt: Path, export_to: str) -> list[str]:
    return [
        f"--data={mnist_root}",
        f"--checkpoint-dir={ckpt}",
        "--epochs=1",
        "--batch-size=64",
        "--train-limit=4096",
        f"--export-to={export_to}",
    ]


def _files(ckpt: Path) -> dict[str, tuple[bytes, int]]:
    """Bytes and mtime of every file the run keeps, but metrics.json (a restart appends to it); the
    tensorboard/ directory beside them is not a file."""
    return {
        p.name: (p.read_bytes(), p.stat().st_mtime_ns)
        for p in ckpt.iterdir()
        if p.is_file() and p.name != "metrics.json"
    }


def _figures(ckpt: Path) -> dict[str, Any]:
    metrics = json.loads((ckpt / "metrics.json").read_text())
    return {key: value for key, value in metrics.items() if key != "restarts"}


def test_the_model_metrics_and_sums_land_under_the_prefix(
    procs: Any, s3_server: Any, mnist_root: Path, tmp_path: Path
) -> None:
    ckpt, url = tmp_path / "ckpt", "s3://models/team/models/run-a"
    result = procs.run("trainer", _args(mnist_root, ckpt, url), env=s3_server.env())
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-1] == (
        f"trainer: exported model.pt, metrics.json, lineage.json and SHA256SUMS to {url}/"
    )
    objects = _objects(s3_server, "models", "team/models/run-a/")
    prefix = "team/models/run-a/"
    names = ("SHA256SUMS", "lineage.json", "metrics.json", "model.pt")
    assert sorted(objects) == [f"{prefix}{name}" for name in names]
    local = {name: (ckpt / name).read_bytes() for name in ("model.pt", "metrics.json", "lineage.json")}
    assert _sha256(objects[f"{prefix}model.pt"]) == _sha256(local["model.pt"])
    assert objects[f"{prefix}metrics.json"] == local["metrics.json"]
    assert objects[f"{prefix}lineage.json"] == local["lineage.json"]
    assert objects[f"{prefix}SHA256SUMS"].decode() == (
        f"{_sha256(local['lineage.json'])}  lineage.json\n"
        f"{_sha256(local['metrics.json'])}  metrics.json\n{_sha256(local['model.pt'])}  model.pt\n"
    )
    # The output dir's own SHA256SUMS: the model and its lineage (metrics.json changes on a restart).
    assert (ckpt / "SHA256SUMS").read_text() == (
        f"{_sha256(local['lineage.json'])}  lineage.json\n{_sha256(local['model.pt'])}  model.pt\n"
    )
    assert json.loads(local["lineage.json"])["model"]["sha256"] == _sha256(local["model.pt"])
    assert json.loads(local["metrics.json"])["final_test_accuracy"] > 0.9


def test_a_failed_export_keeps_the_run_and_a_restart_finishes_it_without_training(
    procs: Any, s3_server: Any, mnist_root: Path, tmp_path: Path
) -> None:
    ckpt, url = tmp_path / "ckpt", "s3://models/team/models/run-b"
    args = _args(mnist_root, ckpt, url)
    # Two ranks: rank 0 fails its upload after the others have finished; nobody reports a lost peer.
    rejected = procs.run(
        "trainer.launch", procs.launch_args(2, args), env=s3_server.env(AWS_SECRET_ACCESS_KEY="wrong")
    )
    assert rejected.returncode == 4, rejected.stderr[-3000:]
    assert len(EPOCH.findall(rejected.stdout)) == 1
    [line] = [x for x in rejected.stderr.splitlines() if x.startswith("trainer: ")]
    assert line == (
        f"trainer: s3: model export failed: {s3_server.endpoint} rejected the credentials for {url}/ "
        f"(SignatureDoesNotMatch); check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; {ckpt} {HINT}"
    )
    assert "launch: worker rank 0 failed with exit code 4 (S3 credentials missing or rejected)" in (
        rejected.stderr
    )
    assert "peer lost" not in rejected.stdout + rejected.stderr
    # Rank 1 had finished: the launcher's SIGTERM ends it at once, not its SIGKILL 30 s later.
    assert "Unable to shutdown process" not in rejected.stderr, rejected.stderr[-3000:]
    kept, figures = _files(ckpt), _figures(ckpt)
    assert sorted(kept) == ["SHA256SUMS", "ckpt-epoch-0001.pt", "lineage.json", "model.pt"]
    assert figures["world_size"] == 2

    closed = f"http://127.0.0.1:{procs.free_port()}"
    unreachable = procs.run("trainer", args, env=s3_server.env(AWS_ENDPOINT_URL=closed))
    assert unreachable.returncode == 205, unreachable.stderr[-3000:]
    [line] = unreachable.stderr.splitlines()
    assert line.startswith(
        f"trainer: s3: model export failed: cannot reach the S3 endpoint {closed} for {url}/"
    )
    assert line.endswith(f"; {ckpt} {HINT}")

    retried = procs.run("trainer", args, env=s3_server.env())
    assert retried.returncode == 0, retried.stderr[-3000:]
    assert EPOCH.findall(retried.stdout) == []
    assert retried.stdout.splitlines()[-3:] == [
        f"trainer: kept {ckpt / 'metrics.json'} and model.pt of the finished run; recorded this restart",
        f"trainer: retrying the export of the finished run to {url}/: no SHA256SUMS there yet",
        f"trainer: exported model.pt, metrics.json, lineage.json and SHA256SUMS to {url}/",
    ]
    assert _files(ckpt) == kept and _figures(ckpt) == figures
    objects = _objects(s3_server, "models", "team/models/run-b/")
    assert _sha256(objects["team/models/run-b/model.pt"]) == _sha256(kept["model.pt"][0])

    again = procs.run("trainer", args, env=s3_server.env())
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.splitlines()[-1] == (
        f"trainer: {url}/ already holds this run's model.pt and metrics.json (SHA256SUMS matches)"
    )
    assert _objects(s3_server, "models", "team/models/run-b/") == objects

    # Any other refusal by the server is exit 207, here a bucket name S3 does not allow.
    bad = "s3://ab/models/run-b"
    refused = procs.run("trainer", [*args[:-1], f"--export-to={bad}"], env=s3_server.env())
    assert refused.returncode == 207, refused.stderr[-3000:]
    assert refused.stderr.splitlines() == [
        f"trainer: export: model export to {bad}/ failed: S3 error InvalidBucketName: The specified bucket "
        f"is not valid.; {ckpt} {HINT}"
    ]
    assert _files(ckpt) == kept and _figures(ckpt) == figures
