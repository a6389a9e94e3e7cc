"""trainer.seed from HTTPS mirrors (a local TLS server) and from a real S3 server: fallbacks, exit codes,
idempotency and repair."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from trainer.mirrors import CANONICAL_SHA256
from trainer.mnist_files import FILES, SUMS_FILE

pytestmark = pytest.mark.slow  # real seed processes, S3 and HTTPS servers

GZ = [f"{name}.gz" for name in FILES]
NOTHING_TO_DO = "already holds MNIST (verified against SHA256SUMS); nothing to do"


@dataclass
class Mirrors:
    """A TLS server on 127.0.0.1 whose first path segment picks how it behaves (see MirrorHandler)."""

    port: int
    cert: Path
    requests: list[str] = field(default_factory=list)

    def url(self, kind: str) -> str:
        return f"https://127.0.0.1:{self.port}/{kind}/"


class MirrorHandler(http.server.BaseHTTPRequestHandler):
    """/good/ serves ../shared's files; /missing/ answers 404; /notgzip/ an HTML page; /corrupt/ a
    valid gzip of wrong content for the t10k labels (the rest good); /tohttp/ redirects to http."""

    mirrors: Mirrors
    source: Path

    def do_GET(self) -> None:
        self.mirrors.requests.append(self.path)
        kind, _, name = self.path.strip("/").partition("/")
        if kind == "tohttp":
            self.send_response(301)
            self.send_header("Location", f"http://127.0.0.1:{self.mirrors.port}/good/{name}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = self.body(kind, name)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def body(self, kind: str, name: str) -> bytes | None:
        if name not in GZ or kind not in ("good", "notgzip", "corrupt"):
            return None
        if kind == "notgzip":
            return b"<html>mirror moved</html>"
        if kind == "corrupt" and name == "t10k-labels-idx1-ubyte.gz":
            return gzip.compress(bytes(10008))
        return (self.source / name).read_bytes()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def mirrors(tmp_path_factory: pytest.TempPathFactory, mnist_gz_dir: Path) -> Iterator[Mirrors]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl CLI not found (needed for a self-signed test certificate)")
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
        + ["-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), MirrorHandler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    state = Mirrors(server.server_address[1], cert)
    MirrorHandler.mirrors, MirrorHandler.source = state, mnist_gz_dir
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


def seed(procs: Any, mirrors: Mirrors, to: Path, *urls: str) -> subprocess.CompletedProcess[str]:
    args = [f"--to={to}", *(f"--mirror={url}" for url in urls)]
    return procs.run("trainer.seed", args, env=procs.env(SSL_CERT_FILE=str(mirrors.cert)), timeout=120)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def assert_holds_mnist(raw: Path, mnist_gz_dir: Path) -> None:
    """The four files, byte for byte, and a SHA256SUMS that lists exactly them."""
    for name in GZ:
        assert (raw / name).read_bytes() == (mnist_gz_dir / name).read_bytes(), name
    assert sorted(p.name for p in raw.iterdir()) == sorted([*GZ, SUMS_FILE])
    listed = dict(line.split()[::-1] for line in (raw / SUMS_FILE).read_text().splitlines())
    assert listed == {name: sha256((raw / name).read_bytes()) for name in GZ}


def test_canonical_digests_are_those_of_the_shared_raw_files(mnist_gz_dir: Path) -> None:
    listed = dict(line.split()[::-1] for line in (mnist_gz_dir / "SHA256SUMS.raw").read_text().splitlines())
    assert listed == CANONICAL_SHA256
    assert {name: sha256(gzip.decompress((mnist_gz_dir / f"{name}.gz").read_bytes())) for name in FILES} == (
        CANONICAL_SHA256
    )


def test_a_404_mirror_is_named_and_the_next_one_seeds_then_a_second_run_needs_no_network(
    procs: Any, mirrors: Mirrors, mnist_gz_dir: Path, tmp_path: Path
) -> None:
    missing, good = mirrors.url("missing"), mirrors.url("good")
    result = seed(procs, mirrors, tmp_path, missing, good)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"trainer.seed: mirror {missing} failed for {name}: HTTP 404 Not Found; trying the next mirror"
        for name in GZ
    ]
    raw = tmp_path / "MNIST" / "raw"
    assert result.stdout.splitlines() == [
        *(f"trainer.seed: downloaded {good}{name} (sha256 of its raw content verified)" for name in GZ),
        f"trainer.seed: wrote 4 files and SHA256SUMS to {raw}",
    ]
    assert_holds_mnist(raw, mnist_gz_dir)

    # Nothing is fetched again: the only mirror now is a closed port, and the server sees nothing.
    served = len(mirrors.requests)
    again = seed(procs, mirrors, tmp_path, f"https://127.0.0.1:{procs.free_port()}/")
    assert again.returncode == 0, again.stderr
    assert (again.stdout, again.stderr) == (f"trainer.seed: {raw} {NOTHING_TO_DO}\n", "")
    assert len(mirrors.requests) == served


def test_a_corrupted_file_on_the_target_is_named_and_seeded_again_alone(
    procs: Any, mirrors: Mirrors, mnist_gz_dir: Path, tmp_path: Path
) -> None:
    assert procs.run("trainer.seed", [f"--from={mnist_gz_dir}", f"--to={tmp_path}"]).returncode == 0
    raw = tmp_path / "MNIST" / "raw"
    labels = raw / "train-labels-idx1-ubyte.gz"
    labels.write_bytes(labels.read_bytes()[:1000])
    untouched = {name: (raw / name).stat().st_mtime_ns for name in GZ if name != labels.name}
    served = len(mirrors.requests)
    result = seed(procs, mirrors, tmp_path, mirrors.url("good"))
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [f"trainer.seed: {labels} does not match SHA256SUMS; seeding again"]
    assert result.stdout.splitlines()[-1] == f"trainer.seed: wrote 1 file and SHA256SUMS to {raw}"
    assert mirrors.requests[served:] == [f"/good/{labels.name}"]
    assert_holds_mnist(raw, mnist_gz_dir)
    assert {name: (raw / name).stat().st_mtime_ns for name in untouched} == untouched


def test_a_mirror_with_wrong_content_is_skipped_for_the_next(
    procs: Any, mirrors: Mirrors, mnist_gz_dir: Path, tmp_path: Path
) -> None:
    corrupt, good = mirrors.url("corrupt"), mirrors.url("good")
    result = seed(procs, mirrors, tmp_path, corrupt, good)
    assert result.returncode == 0, result.stderr
    [line] = result.stderr.splitlines()
    expected = CANONICAL_SHA256["t10k-labels-idx1-ubyte"]
    assert line == (
        f"trainer.seed: mirror {corrupt} failed for t10k-labels-idx1-ubyte.gz: raw sha256 "
        f"{sha256(bytes(10008))} is not MNIST's {expected} (wrong content); trying the next mirror"
    )
    assert f"trainer.seed: downloaded {good}t10k-labels-idx1-ubyte.gz " in result.stdout
    assert_holds_mnist(tmp_path / "MNIST" / "raw", mnist_gz_dir)


def test_when_every_mirror_fails_and_one_served_wrong_content_it_exits_3_and_writes_nothing(
    procs: Any, mirrors: Mirrors, tmp_path: Path
) -> None:
    missing, notgzip, corrupt = mirrors.url("missing"), mirrors.url("notgzip"), mirrors.url("corrupt")
    result = seed(procs, mirrors, tmp_path, missing, notgzip, corrupt)
    assert result.returncode == 3, result.stderr
    *attempts, last = result.stderr.splitlines()
    name = "t10k-labels-idx1-ubyte.gz"
    assert attempts[-3:] == [
        f"trainer.seed: mirror {missing} failed for {name}: HTTP 404 Not Found; trying the next mirror",
        f"trainer.seed: mirror {notgzip} failed for {name}: not a valid gzip file (Error -3 while "
        "decompressing data: incorrect header check); trying the next mirror",
        f"trainer.seed: mirror {corrupt} failed for {name}: raw sha256 {sha256(bytes(10008))} is not "
        f"MNIST's {CANONICAL_SHA256[name[:-3]]} (wrong content); no mirror left",
    ]
    assert last.startswith(f"trainer.seed: data: no mirror served a verified {name} ({missing}: HTTP 404")
    assert last.endswith("; a mirror serves wrong content: fix or drop it in --mirror")
    assert not (tmp_path / "MNIST").exists()


def test_when_no_mirror_can_be_reached_it_exits_205(procs: Any, mirrors: Mirrors, tmp_path: Path) -> None:
    closed, missing = f"https://127.0.0.1:{procs.free_port()}/mnist/", mirrors.url("missing")
    result = seed(procs, mirrors, tmp_path, closed, missing)
    assert result.returncode == 205, result.stderr
    name = "train-images-idx3-ubyte.gz"
    assert result.stderr.splitlines() == [
        f"trainer.seed: mirror {closed} failed for {name}: [Errno 111] Connection refused; "
        "trying the next mirror",
        f"trainer.seed: mirror {missing} failed for {name}: HTTP 404 Not Found; no mirror left",
        f"trainer.seed: download: no mirror could be reached for {name} ({closed}: [Errno 111] Connection "
        f"refused; {missing}: HTTP 404 Not Found); check the network and --mirror",
    ]


def test_https_only_redirects_and_verified_certificates(procs: Any, mirrors: Mirrors, tmp_path: Path) -> None:
    refused = procs.run("trainer.seed", [f"--to={tmp_path}", "--mirror=http://127.0.0.1/mnist/"])
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        "trainer.seed: usage: argument --mirror: 'http://127.0.0.1/mnist/' is not an https://HOST/... URL; "
        "mirrors are fetched over https only (see 'python -m trainer.seed --help')"
    ]
    tohttp = mirrors.url("tohttp")
    redirected = seed(procs, mirrors, tmp_path, tohttp)
    assert redirected.returncode == 205
    assert redirected.stderr.splitlines()[0] == (
        f"trainer.seed: mirror {tohttp} failed for train-images-idx3-ubyte.gz: HTTP 301 redirect to "
        f"http://127.0.0.1:{mirrors.port}/good/train-images-idx3-ubyte.gz refused (https only); "
        "no mirror left"
    )
    # The test server's certificate is trusted only through SSL_CERT_FILE.
    untrusted = procs.run("trainer.seed", [f"--to={tmp_path}", f"--mirror={mirrors.url('good')}"])
    assert untrusted.returncode == 205
    assert "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr.splitlines()[0]
    assert not (tmp_path / "MNIST").exists()


# --- from and to a real S3 server ------------------------------------------------------------------

SOURCE = "s3://seed-source/mnist"


@pytest.fixture(scope="module")
def bucket(procs: Any, s3_server: Any, mnist_gz_dir: Path) -> Any:
    filled = procs.run("trainer.seed", [f"--from={mnist_gz_dir}", f"--to={SOURCE}"], env=s3_server.env())
    assert filled.returncode == 0, filled.stderr
    return s3_server


def test_seed_a_directory_from_a_bucket_then_again_without_contacting_it(
    procs: Any, bucket: Any, mnist_gz_dir: Path, tmp_path: Path
) -> None:
    result = procs.run("trainer.seed", [f"--from={SOURCE}", f"--to={tmp_path}"], env=bucket.env())
    assert result.returncode == 0, result.stderr
    raw = tmp_path / "MNIST" / "raw"
    assert result.stdout.splitlines()[-1] == f"trainer.seed: wrote 4 files and SHA256SUMS to {raw}"
    assert result.stdout.count(f"trainer.seed: downloaded {SOURCE}/") == 4
    assert_holds_mnist(raw, mnist_gz_dir)
    closed = bucket.env(AWS_ENDPOINT_URL=f"http://127.0.0.1:{procs.free_port()}")
    again = procs.run("trainer.seed", [f"--from={SOURCE}", f"--to={tmp_path}"], env=closed)
    assert again.returncode == 0, again.stderr
    assert (again.stdout, again.stderr) == (f"trainer.seed: {raw} {NOTHING_TO_DO}\n", "")


def test_seed_from_a_bucket_with_rejected_keys_exits_4(procs: Any, bucket: Any, tmp_path: Path) -> None:
    env = bucket.env(AWS_SECRET_ACCESS_KEY="not-the-secret")
    result = procs.run("trainer.seed", [f"--from={SOURCE}", f"--to={tmp_path}"], env=env)
    assert result.returncode == 4
    assert result.stderr.splitlines() == [
        f"trainer.seed: s3: {bucket.endpoint} rejected the credentials for {SOURCE}/SHA256SUMS "
        "(SignatureDoesNotMatch); check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
    ]
    assert not (tmp_path / "MNIST").exists()


def test_seed_from_an_unreachable_endpoint_exits_205(procs: Any, bucket: Any, tmp_path: Path) -> None:
    endpoint = f"http://127.0.0.1:{procs.free_port()}"
    result = procs.run(
        "trainer.seed", [f"--from={SOURCE}", f"--to={tmp_path}"], env=bucket.env(AWS_ENDPOINT_URL=endpoint)
    )
    assert result.returncode == 205
    [line] = result.stderr.splitlines()
    assert line.startswith(
        f"trainer.seed: s3: cannot reach the S3 endpoint {endpoint} for {SOURCE}/SHA256SUMS ("
    )


def test_a_bucket_is_seeded_once_and_a_corrupted_object_again(
    procs: Any, bucket: Any, mnist_gz_dir: Path, tmp_path: Path
) -> None:
    target = "s3://seed-target/mnist"
    args = [f"--from={mnist_gz_dir}", f"--to={target}"]
    assert procs.run("trainer.seed", args, env=bucket.env()).returncode == 0
    again = procs.run("trainer.seed", args, env=bucket.env())
    assert (again.returncode, again.stdout, again.stderr) == (
        0,
        f"trainer.seed: {target} {NOTHING_TO_DO}\n",
        "",
    )

    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=bucket.endpoint,
        region_name="us-east-1",
        aws_access_key_id=bucket.key_id,
        aws_secret_access_key=bucket.secret,
    )
    client.put_object(Bucket="seed-target", Key="mnist/t10k-images-idx3-ubyte.gz", Body=b"tampered")
    repaired = procs.run("trainer.seed", args, env=bucket.env())
    assert repaired.returncode == 0, repaired.stderr
    assert repaired.stderr.splitlines() == [
        f"trainer.seed: {target}/t10k-images-idx3-ubyte.gz does not match SHA256SUMS; seeding again"
    ]
    assert repaired.stdout.splitlines() == [f"trainer.seed: wrote 1 file and SHA256SUMS to {target}"]
    fetched = procs.run("trainer.seed", [f"--from={target}", f"--to={tmp_path}"], env=bucket.env())
    assert fetched.returncode == 0, fetched.stderr
    assert_holds_mnist(tmp_path / "MNIST" / "raw", mnist_gz_dir)


def test_a_seed_imports_no_torch(procs: Any, bucket: Any, mnist_gz_dir: Path, tmp_path: Path) -> None:
    """The seed Job's pod copies and checks files: it never pays torch's start-up (about 1.2 s of CPU and
    200 MB per start). Every module a real seed imports, bucket to directory and directory to bucket,
    as Python's import profile lists them."""

    def imported(args: list[str]) -> set[str]:
        result = procs.run("trainer.seed", args, env=bucket.env(PYTHONPROFILEIMPORTTIME="1"))
        assert result.returncode == 0, result.stderr[-2000:]
        lines = [line for line in result.stderr.splitlines() if line.startswith("import time:")]
        return {line.rsplit("|", 1)[1].strip() for line in lines[1:]}  # the first line is the header

    modules = imported([f"--from={SOURCE}", f"--to={tmp_path}"])
    modules |= imported([f"--from={mnist_gz_dir}", "--to=s3://seed-no-torch/mnist"])
    assert {"trainer.cli", "trainer.s3", "boto3"} <= modules
    assert not {m for m in modules if m.split(".")[0] == "torch"}
