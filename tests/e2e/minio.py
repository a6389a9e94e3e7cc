"""Objects in the fixtures' MinIO, read from the test process through `kubectl port-forward`."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator

import boto3

from infra.local.ports import free_port
from tests.e2e.fixtures.cluster import MINIO_NAMESPACE


@contextlib.contextmanager
def port_forward() -> Iterator[str]:
    """`http://127.0.0.1:<port>` forwarded to the MinIO Service while the block runs."""
    port = free_port()
    process = subprocess.Popen(
        ["kubectl", "-n", MINIO_NAMESPACE, "port-forward", "svc/minio", f"{port}:9000"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("e2e: kubectl port-forward to svc/minio did not open")
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def read_objects(keys: tuple[str, str], bucket: str, prefix: str, names: list[str]) -> dict[str, bytes]:
    """The named objects under `s3://bucket/prefix/` (a missing one is left out)."""
    found: dict[str, bytes] = {}
    with port_forward() as endpoint:
        s3 = boto3.client(
            "s3", endpoint_url=endpoint, aws_access_key_id=keys[0], aws_secret_access_key=keys[1]
        )
        for name in names:
            with contextlib.suppress(s3.exceptions.NoSuchKey):
                found[name] = s3.get_object(Bucket=bucket, Key=f"{prefix}/{name}")["Body"].read()
    return found
