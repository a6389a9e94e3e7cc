"""The store's TLS as every pod that reaches it sees it: minioCaBundle's certificates in the ConfigMap
ddp-mnist-s3-ca, mounted read-only where botocore reads them (AWS_CA_BUNDLE); what the trainer's client
does with them is proven against a real TLS server in tests/trainer/test_s3_tls_and_read_only_keys.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.program.checks import ConfigError
from infra.program.common.config import settings_from_raw
from tests.infra.conftest import BASE, by_kind, render_config, stack_config

PEM = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUexample\n-----END CERTIFICATE-----\n"
S3 = {
    "minioEndpoint": "minio.minio.svc:9000",
    "minioTls": True,
    "seedSource": "s3",
    "jobModelExport": True,
    "serveKind": "deployment",
    "serveModelSource": "s3",
    "jobWait": True,
}
KEYS = {"minioAccessKey": "writer-key", "minioSecretKey": "writer-secret-0123"}


def _trusting(template: dict) -> bool:
    """Whether the pod's containers all trust the bundle: the volume, its mount and AWS_CA_BUNDLE."""
    volumes = {v["name"]: v for v in template["spec"].get("volumes", [])}
    if volumes.get("s3-ca", {}).get("configMap", {}).get("name") != "ddp-mnist-s3-ca":
        return False
    for container in template["spec"]["containers"]:
        mounts = {m["name"]: m for m in container.get("volumeMounts", [])}
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        mount = mounts.get("s3-ca")
        if not (
            mount and mount.get("readOnly") and env.get("AWS_CA_BUNDLE") == f"{mount['mountPath']}/ca.crt"
        ):
            return False
    return True


def test_every_pod_that_reaches_the_store_trusts_the_bundle(tmp_path: Path) -> None:
    bundle = tmp_path / "minio-ca.pem"
    bundle.write_text(PEM)
    rendering = render_config({**S3, "minioCaBundle": str(bundle)}, secrets=KEYS)
    (config_map,) = by_kind(rendering, "ConfigMap")
    assert config_map["metadata"]["name"] == "ddp-mnist-s3-ca" and config_map["data"] == {"ca.crt": PEM}
    (seed,) = [j for j in by_kind(rendering, "Job") if j["metadata"]["name"] == "ddp-mnist-seed"]
    (server,) = by_kind(rendering, "Deployment")
    (job,) = by_kind(rendering, "PyTorchJob")
    templates = [seed["spec"]["template"], server["spec"]["template"]]
    templates += [r["template"] for r in job["spec"]["pytorchReplicaSpecs"].values()]
    assert all(_trusting(t) for t in templates)
    # Without a bundle the image's public CAs decide, and nothing is mounted.
    plain = render_config(S3, secrets=KEYS)
    assert by_kind(plain, "ConfigMap") == []
    assert not any(_trusting(t) for t in [by_kind(plain, "Deployment")[0]["spec"]["template"]])


@pytest.mark.parametrize(
    ("values", "content", "message"),
    [
        ({"minioTls": False}, PEM, "must be empty with minioTls false"),
        ({}, None, "must be a readable PEM file"),
        ({}, "not a certificate", "must be a PEM file holding -----BEGIN CERTIFICATE----- blocks"),
    ],
)
def test_a_bundle_that_cannot_verify_anything_is_refused(tmp_path: Path, values, content, message) -> None:
    bundle = tmp_path / "ca.pem"
    if content is not None:
        bundle.write_text(content)
    stack = stack_config({**BASE, **S3, **values, "minioCaBundle": str(bundle)}, secrets=KEYS)
    with pytest.raises(ConfigError) as raised:
        settings_from_raw(stack.values, set(stack.secret_keys))
    assert str(raised.value).startswith(f"config ddp-mnist:minioCaBundle={bundle} is invalid: {message}")
