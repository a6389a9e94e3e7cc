"""A stack that reaches its store over TLS (minioTls) runs locally against a stand-in that serves TLS
too: the pods get its certificate as AWS_CA_BUNDLE (in place of minioCaBundle or the public CAs), and
the local run says so."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from infra.local.services import local_services
from tests.infra.conftest import render_config

pytestmark = pytest.mark.slow  # a real S3 server and a bucket filled with MNIST

KEYS = {"minioAccessKey": "writer-key", "minioSecretKey": "writer-secret-0123"}


def test_a_tls_store_gets_a_tls_stand_in_the_pods_trust(tmp_path: Path) -> None:
    import boto3

    rendering = render_config(
        {"minioEndpoint": "minio.minio.svc:9000", "minioTls": True, "seedSource": "s3"}, secrets=KEYS
    )
    said = io.StringIO()
    with local_services(rendering, tmp_path, {}, said) as env:
        assert env["AWS_ENDPOINT_URL"].startswith("https://127.0.0.1:")
        assert Path(env["AWS_CA_BUNDLE"]).is_file()
        client = boto3.client(
            "s3",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            region_name="us-east-1",
            verify=env["AWS_CA_BUNDLE"],
        )
        listed = client.list_objects_v2(Bucket="mnist", Prefix="mnist/")
        assert "mnist/SHA256SUMS" in {o["Key"] for o in listed["Contents"]}
    assert "over TLS with a certificate made for this run" in said.getvalue()
