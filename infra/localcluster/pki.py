"""The local cluster's certificates, made with the openssl command (no Python dependency).

One CA signs the API server's serving certificate (127.0.0.1, localhost and the `kubernetes` Service's
names and ClusterIP) and the admin's client certificate (group `system:masters`, what every local
component and the tier use); a separate RSA key signs service account tokens.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

API_SERVER_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {args[0]}: {result.stderr.strip()}")


def _signed(pki: Path, name: str, subject: str, extensions: str) -> None:
    _openssl("genrsa", "-out", f"{name}.key", "2048", cwd=pki)
    _openssl("req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr", cwd=pki)
    (pki / f"{name}.ext").write_text(extensions)
    _openssl(
        "x509",
        "-req",
        "-in",
        f"{name}.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "30",
        "-sha256",
        "-extfile",
        f"{name}.ext",
        "-out",
        f"{name}.crt",
        cwd=pki,
    )


def certificate_authority(pki: Path, common_name: str, days: int = 30) -> None:
    """Write a self-signed CA, ca.{key,crt}, into `pki`."""
    pki.mkdir(parents=True, exist_ok=True)
    _openssl("genrsa", "-out", "ca.key", "2048", cwd=pki)
    _openssl(
        "req",
        "-x509",
        "-new",
        "-key",
        "ca.key",
        "-subj",
        f"/CN={common_name}",
        "-days",
        str(days),
        "-sha256",
        "-out",
        "ca.crt",
        cwd=pki,
    )


def server_certificate(pki: Path, name: str, ip: str) -> tuple[Path, Path]:
    """A serving certificate and key for the address `ip`, signed by the CA in `pki`."""
    _signed(
        pki,
        name,
        f"/CN={name}",
        f"subjectAltName=IP:{ip}\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n",
    )
    return pki / f"{name}.crt", pki / f"{name}.key"


def make(pki: Path, service_ip: str) -> None:
    """Write ca.{key,crt}, apiserver.{key,crt}, admin.{key,crt} and sa.{key,pub} into `pki`."""
    certificate_authority(pki, "ddp-mnist-local-ca")
    names = ",".join(f"DNS:{n}" for n in API_SERVER_NAMES)
    _signed(
        pki,
        "apiserver",
        "/CN=kube-apiserver",
        f"subjectAltName={names},IP:127.0.0.1,IP:{service_ip}\nextendedKeyUsage=serverAuth\n"
        "keyUsage=digitalSignature,keyEncipherment\n",
    )
    _signed(
        pki,
        "admin",
        "/O=system:masters/CN=ddp-mnist-admin",
        "extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n",
    )
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


def client_certificate(pki: Path, user: str, groups: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """A client certificate and key for `user` (and `groups`, as organizations) signed by the cluster's
    CA: an identity the API server authenticates like a cloud user, with only the rights RBAC gives it."""
    name = "user-" + "".join(c if c.isalnum() or c in "-." else "-" for c in user)
    subject = "".join(f"/O={group}" for group in groups) + f"/CN={user}"
    _signed(pki, name, subject, "extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n")
    return pki / f"{name}.crt", pki / f"{name}.key"
