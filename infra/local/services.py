"""Local stand-ins for the cluster services a stack's pods use: its S3 endpoint (MinIO in the
cluster) becomes a SeaweedFS server on 127.0.0.1 (`infra.local.s3`) with keys made for the
run, its bucket filled with MNIST once, as someone does for the cluster's MinIO.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from infra.local.plan import PlanError
from infra.local.s3 import LocalS3Error, Options, local_s3
from infra.program.settings import Settings
from infra.review.manifest import Rendering
from infra.stackconfig import ROOT

SHARED_MNIST = ROOT.parent / "shared" / "data" / "mnist"


def uses_stack_s3(settings: Settings) -> bool:
    return bool(settings.minio_endpoint) and (
        settings.job_data_source == "s3"
        or (settings.seeds_data and settings.seed_source == "s3")
        or settings.job_model_export
    )


@contextlib.contextmanager
def local_services(
    rendering: Rendering, root: Path, overrides: dict[str, str], out: TextIO
) -> Iterator[dict[str, str]]:
    """Stand-ins for the cluster services the stack uses, as env overrides for its pods; says so."""
    settings = rendering.settings
    if not uses_stack_s3(settings) or "AWS_ENDPOINT_URL" in overrides:
        yield {}
        return
    try:
        tls = self_signed(root / "s3-tls") if settings.minio_tls else None
        with local_s3(root / "s3", options=Options(tls=tls)) as s3:
            scheme = "https" if settings.minio_tls else "http"
            trust = (
                f", over TLS with a certificate made for this run (pods trust it through AWS_CA_BUNDLE in "
                f"place of {'minioCaBundle' if settings.minio_ca_bundle else 'the public CAs'})"
                if tls
                else ""
            )
            print(
                f"[local] S3 endpoint {scheme}://{settings.minio_endpoint} is a local stand-in here: "
                f"SeaweedFS at {s3.endpoint} (data in {root / 's3'}), with keys made for this run in place "
                f"of the stack's Secret{trust}",
                file=out,
                flush=True,
            )
            if settings.seeds_data and settings.seed_source == "s3" or settings.job_data_source == "s3":
                fill_bucket(settings, s3.env(), out)
            yield s3.env()
    except LocalS3Error as exc:
        raise PlanError(f"the stack's S3 endpoint needs a local stand-in: {exc}") from None


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made with openssl (the certificate is its own CA)."""
    directory.mkdir(parents=True, exist_ok=True)
    certificate, key = directory / "tls.crt", directory / "tls.key"
    if certificate.is_file() and key.is_file():
        return certificate, key
    if shutil.which("openssl") is None:
        raise PlanError("the stack's S3 endpoint uses TLS (minioTls): its local stand-in needs openssl")
    made = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30"]
        + ["-keyout", str(key), "-out", str(certificate), "-subj", "/CN=127.0.0.1"]
        + ["-addext", "subjectAltName=IP:127.0.0.1"],
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode != 0:
        raise PlanError(f"could not make the local S3 stand-in's certificate: {made.stderr.strip()}")
    return certificate, key


def fill_bucket(settings: Settings, env: dict[str, str], out: TextIO) -> None:
    """Put MNIST in the stand-in's bucket once (what someone does for the cluster's MinIO), from
    ../shared/data/mnist when present, else from the stack's HTTPS mirrors."""
    target = f"s3://{settings.minio_bucket}/{settings.minio_prefix}".rstrip("/")
    if SHARED_MNIST.is_dir():
        source = [f"--from={SHARED_MNIST}"]
    else:
        source = [f"--mirror={url}" for url in settings.seed_mirrors]
    seeded = subprocess.run(
        [sys.executable, "-m", "trainer.seed", *source, f"--to={target}"],
        cwd=ROOT,
        env={**os.environ, **env, "AWS_REGION": settings.minio_region},
        capture_output=True,
        text=True,
    )
    for line in (seeded.stdout + seeded.stderr).splitlines():
        print(f"[local] {line}", file=out, flush=True)
    if seeded.returncode != 0:
        raise PlanError(
            f"could not fill the local S3 bucket {target} (trainer.seed exited {seeded.returncode})"
        )
