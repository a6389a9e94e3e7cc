"""MNIST from S3: layout, download into the node-local cache, sha256 verification.

Layout of ``s3://BUCKET/PREFIX``::

    PREFIX/train-images-idx3-ubyte.gz   PREFIX/train-labels-idx1-ubyte.gz
    PREFIX/t10k-images-idx3-ubyte.gz    PREFIX/t10k-labels-idx1-ubyte.gz
    PREFIX/SHA256SUMS                   (sha256sum format, one line per .gz file)

Files land in ``CACHE/MNIST/raw/`` (with the SHA256SUMS), so the cache dir is itself a valid
``--data`` root. Ranks on one node serialise on an exclusive lock file in the cache dir: the first
downloads and verifies, the others find a verified cache and download nothing.
Endpoint and keys come from the environment: ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION`` (default us-east-1). boto3 is imported only here.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.errors import (
    DataError,
    S3CredentialsError,
    S3UnreachableError,
    TrainerError,
    UsageError,
    write_line,
)
from trainer.fsio import atomic_write_bytes
from trainer.mnist_files import (
    FILES,
    S3_SEED_HINT,
    SUMS_FILE,
    format_sums,
    parse_sums,
    read_sums,
    sha256_file,
)

GZ_FILES = tuple(f"{name}.gz" for name in FILES)
CONNECT_TIMEOUT_S = 3
READ_TIMEOUT_S = 60
MAX_ATTEMPTS = 2
# A pod's first connections may be refused while the cluster's network policy agent still adds the new
# pod to the policies that admit it: on the real node (kube-router v2.10.0) a pod's connection to MinIO
# was refused in its first second and accepted after it. Each retry of the Job is a new pod, and meets
# the same second. So a process waits, once per endpoint, up to this long for a TCP connection before
# its first request; an endpoint that stays unreachable is then reported as before.
ENDPOINT_WAIT_S = 5.0
ENDPOINT_POLL_S = 0.25
_WAITED: set[tuple[str, int]] = set()
_CREDENTIAL_CODES = {
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "AccessDenied",
    "InvalidToken",
    "ExpiredToken",
    "InvalidClientTokenId",
    "AuthorizationHeaderMalformed",
    "403",
    "Forbidden",
}
_MISSING_CODES = {"NoSuchBucket", "NoSuchKey", "404", "NotFound"}


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str

    @classmethod
    def parse(cls, url: str) -> S3Location:
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        return cls(bucket, prefix.strip("/"))

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def url(self, name: str = "") -> str:
        return f"s3://{self.bucket}/{self.key(name)}" if name else f"s3://{self.bucket}/{self.prefix}"


def endpoint() -> str:
    return os.environ.get("AWS_ENDPOINT_URL") or "the default AWS endpoint"


def wait_for_endpoint(url: str | None, seconds: float = ENDPOINT_WAIT_S) -> float:
    """Until a TCP connection to ``url``'s host and port succeeds or ``seconds`` pass, once per process
    and endpoint; returns the seconds waited. Nothing is sent, and nothing fails here: the requests that
    follow report an endpoint that is still unreachable, with their usual line."""
    parsed = urllib.parse.urlsplit(url or "")
    if not parsed.hostname:
        return 0.0
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:  # a malformed port: botocore refuses the URL with its own line
        return 0.0
    if (parsed.hostname, port) in _WAITED:
        return 0.0
    _WAITED.add((parsed.hostname, port))
    start = time.monotonic()
    while True:
        try:
            with socket.create_connection((parsed.hostname, port), timeout=min(1.0, seconds or 1.0)):
                return time.monotonic() - start
        except OSError:
            if time.monotonic() - start >= seconds:
                return time.monotonic() - start
            time.sleep(ENDPOINT_POLL_S)


def make_client() -> Any:
    """An S3 client with short connect timeouts and few retries, path-style addressing, once the
    endpoint accepts connections (:func:`wait_for_endpoint`)."""
    import boto3
    from botocore.config import Config

    config = Config(
        connect_timeout=CONNECT_TIMEOUT_S,
        read_timeout=READ_TIMEOUT_S,
        retries={"max_attempts": MAX_ATTEMPTS, "mode": "standard"},
        s3={"addressing_style": "path"},
    )
    endpoint = os.environ.get("AWS_ENDPOINT_URL") or None
    wait_for_endpoint(endpoint)
    try:
        return boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
            config=config,
        )
    except ValueError as error:  # botocore rejects a malformed endpoint before any request
        raise UsageError(f"AWS_ENDPOINT_URL={endpoint!r} is not a valid endpoint URL ({error})") from None


def classify(error: Exception, what: str) -> TrainerError:
    """Map a botocore exception to the trainer's exit-code classes."""
    from botocore import exceptions as bx

    if isinstance(error, (bx.NoCredentialsError, bx.PartialCredentialsError)):
        return S3CredentialsError(
            f"no credentials for {what}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        )
    if isinstance(error, bx.ClientError):
        info = error.response.get("Error", {})
        code = str(info.get("Code", ""))
        if code in _CREDENTIAL_CODES:
            return S3CredentialsError(
                f"{endpoint()} rejected the credentials for {what} ({code}); "
                "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
            )
        if code in _MISSING_CODES:
            return DataError(f"{what} not found ({code}); {S3_SEED_HINT}")
        return DataError(f"{what}: S3 error {code}: {info.get('Message', '')}")
    if isinstance(error, (bx.ConnectionError, bx.HTTPClientError)):
        return S3UnreachableError(
            f"cannot reach the S3 endpoint {endpoint()} for {what} ({error}); "
            "check AWS_ENDPOINT_URL and that the server is up"
        )
    if isinstance(error, TrainerError):
        return error
    raise error


@contextmanager
def s3_errors(what: str) -> Iterator[None]:
    """Turn botocore errors raised inside the block into one-line TrainerErrors."""
    from boto3.exceptions import S3UploadFailedError
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except (BotoCoreError, ClientError) as error:
        raise classify(error, what) from None
    except S3UploadFailedError as error:
        # boto3's managed upload (upload_file) re-raises the ClientError as this, the original being
        # its context (boto3 `s3/transfer.py`, S3Transfer.upload_file).
        cause = error.__context__
        if isinstance(cause, (BotoCoreError, ClientError)):
            raise classify(cause, what) from None
        raise S3UnreachableError(f"upload of {what} failed: {error}") from None


@contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def fetch_dataset(
    location: S3Location, cache_dir: Path, local_rank: int = 0, report: Callable[[str], None] | None = None
) -> Path:
    """Download (once per node) and verify the four files; returns the cache root for --data.

    Each download is reported through ``report`` (default: a ``trainer: s3:`` line on stdout).
    """
    say = report or (lambda message: note(local_rank, message))
    raw_dir = cache_dir / "MNIST" / "raw"
    client = make_client()
    with exclusive_lock(cache_dir / ".lock"):
        with s3_errors(location.url(SUMS_FILE)):
            body = client.get_object(Bucket=location.bucket, Key=location.key(SUMS_FILE))["Body"]
            sums_text = body.read().decode()
        sums_path = raw_dir / SUMS_FILE
        atomic_write_bytes(sums_path, sums_text.encode())
        sums = read_sums(sums_path)
        for name in GZ_FILES:
            if name not in sums:
                raise DataError(f"{location.url(SUMS_FILE)} has no line for {name}; re-seed it")
            target = raw_dir / name
            if target.is_file() and sha256_file(target) == sums[name]:
                continue
            download_verified(client, location, name, target, sums[name])
            say(f"downloaded {location.url(name)} to {target} (sha256 verified)")
    return cache_dir


def download_verified(client: Any, location: S3Location, name: str, target: Path, expected: str) -> None:
    """Download to a temp name beside ``target``, check sha256, then rename into place."""
    partial = target.with_name(f".{name}.partial")
    with s3_errors(location.url(name)):
        client.download_file(location.bucket, location.key(name), str(partial))
    actual = sha256_file(partial)
    if actual != expected:
        partial.unlink(missing_ok=True)
        raise DataError(
            f"{location.url(name)}: sha256 {actual} does not match SHA256SUMS ({expected}); re-seed"
        )
    os.replace(partial, target)


def upload_dataset(
    location: S3Location, files: dict[str, Path], kept: dict[str, str] | None = None
) -> dict[str, str]:
    """Create the bucket if needed, upload ``{name: path}``, then a SHA256SUMS of those files and of
    the ``kept`` ones (``{name: sha256}``, already there and verified); returns the sums."""
    client = make_client()
    sums = {**(kept or {}), **{name: sha256_file(path) for name, path in files.items()}}
    ensure_bucket(client, location.bucket)
    for name, path in files.items():
        with s3_errors(location.url(name)):
            client.upload_file(str(path), location.bucket, location.key(name))
    with s3_errors(location.url(SUMS_FILE)):
        client.put_object(
            Bucket=location.bucket, Key=location.key(SUMS_FILE), Body=format_sums(sums).encode()
        )
    return sums


def verified_objects(location: S3Location, report: Callable[[str], None]) -> dict[str, str]:
    """``{name.gz: sha256}`` of the dataset objects under ``location`` that its SHA256SUMS verifies.

    Each object is downloaded and hashed (MNIST is 11 MB); the others are reported, one line each.
    Without a SHA256SUMS (a new bucket or prefix) nothing is verified and nothing is reported.
    """
    client = make_client()
    sums_url = location.url(SUMS_FILE)
    text = read_object(client, location, SUMS_FILE)
    if text is None:
        return {}
    try:
        sums = parse_sums(text.decode(errors="replace"), sums_url)
    except DataError:
        report(f"{sums_url} is not a {SUMS_FILE} file; seeding every file again")
        return {}
    verified: dict[str, str] = {}
    for name in GZ_FILES:
        url = location.url(name)
        actual = object_sha256(client, location, name) if name in sums else None
        if name not in sums:
            report(f"{url} is not listed in {SUMS_FILE}; seeding again")
        elif actual is None:
            report(f"{url} is missing; seeding again")
        elif actual != sums[name]:
            report(f"{url} does not match {SUMS_FILE}; seeding again")
        else:
            verified[name] = actual
    return verified


def error_code(error: Exception) -> str:
    return str(getattr(error, "response", {}).get("Error", {}).get("Code", ""))


def open_object(client: Any, location: S3Location, name: str) -> Any | None:
    """The body stream of ``name`` under ``location``, or None when it (or its bucket) does not exist."""
    from botocore.exceptions import ClientError

    with s3_errors(location.url(name)):
        try:
            return client.get_object(Bucket=location.bucket, Key=location.key(name))["Body"]
        except ClientError as error:
            if error_code(error) in _MISSING_CODES:
                return None
            raise


def read_object(client: Any, location: S3Location, name: str) -> bytes | None:
    """A small object's bytes, or None when it does not exist."""
    body = open_object(client, location, name)
    if body is None:
        return None
    with s3_errors(location.url(name)):
        return bytes(body.read())


def object_sha256(client: Any, location: S3Location, name: str) -> str | None:
    """sha256 of an object's content, read in chunks; None when it does not exist."""
    body = open_object(client, location, name)
    if body is None:
        return None
    digest = hashlib.sha256()
    with s3_errors(location.url(name)):
        for chunk in body.iter_chunks(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def ensure_bucket(client: Any, bucket: str) -> None:
    from botocore.exceptions import ClientError

    with s3_errors(f"s3://{bucket}"):
        try:
            client.head_bucket(Bucket=bucket)
        except ClientError as error:
            if str(error.response.get("Error", {}).get("Code")) not in _MISSING_CODES:
                raise
            client.create_bucket(Bucket=bucket)


def note(local_rank: int, message: str) -> None:
    write_line(f"trainer: s3: [local rank {local_rank}] {message}", sys.stdout)
