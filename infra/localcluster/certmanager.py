"""What cert-manager does for the operators' webhooks, standing in for it: its controllers cannot be
built here (their main packages are nested modules the Go module proxy does not serve), so the local
cluster has cert-manager's CRDs (from its pinned module, `parts/cert-manager`) and this stand-in:

- **Issuing**: a `Certificate` whose issuer (an `Issuer` in its namespace, or a `ClusterIssuer`) is
  `selfSigned` gets its Secret (`kubernetes.io/tls`: `tls.crt`, `tls.key`, and `ca.crt`, the
  certificate itself, as cert-manager's self-signed issuer writes it) for its `dnsNames`, and the
  condition `Ready`; it is issued again when its names change. Other issuers are left alone.
- **CA injection** (the cainjector): a webhook configuration or CRD annotated
  `cert-manager.io/inject-ca-from: <namespace>/<certificate>` gets that Secret's `ca.crt` as the
  `caBundle` of each webhook (of the CRD's conversion webhook).
"""

from __future__ import annotations

import base64
import subprocess
import tempfile
from pathlib import Path

from infra.localcluster.kube import ApiError, Client, Obj
from infra.program.common import yamlio

MODULE = "github.com/cert-manager/cert-manager"
GROUP = "/apis/cert-manager.io/v1"
INJECT = "cert-manager.io/inject-ca-from"
NAMES = "cert-manager.io/alt-names"
WEBHOOK_CONFIGS = (
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
    "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
)
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def self_signed(common_name: str, dns_names: list[str]) -> tuple[bytes, bytes]:
    """A self-signed serving certificate for `dns_names` and its key (PEM), made with openssl."""
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        sans = ",".join(f"DNS:{n}" for n in dns_names)
        done = subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "tls.key",
                "-out",
                "tls.crt",
                "-days",
                "90",
                "-subj",
                f"/CN={common_name}",
                "-addext",
                f"subjectAltName={sans}",
                "-addext",
                "extendedKeyUsage=serverAuth",
            ],
            cwd=directory,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"openssl req: {done.stderr.strip()}")
        return (directory / "tls.crt").read_bytes(), (directory / "tls.key").read_bytes()


def _issuer(client: Client, certificate: Obj) -> Obj | None:
    ref = certificate["spec"].get("issuerRef", {})
    if ref.get("kind", "Issuer") == "ClusterIssuer":
        return client.get(f"{GROUP}/clusterissuers/{ref['name']}")
    return client.get(f"{GROUP}/namespaces/{certificate['metadata']['namespace']}/issuers/{ref['name']}")


def _names(certificate: Obj) -> list[str]:
    spec = certificate["spec"]
    return list(spec.get("dnsNames") or ([spec["commonName"]] if spec.get("commonName") else []))


def issue(client: Client) -> None:
    for certificate in client.items(f"{GROUP}/certificates"):
        meta, spec = certificate["metadata"], certificate["spec"]
        issuer = _issuer(client, certificate)
        names = _names(certificate)
        if issuer is None or "selfSigned" not in issuer.get("spec", {}) or not names:
            continue
        path = f"/api/v1/namespaces/{meta['namespace']}/secrets"
        secret = client.get(f"{path}/{spec['secretName']}") or {}
        wanted = ",".join(names)
        annotations = secret.get("metadata", {}).get("annotations") or {}
        if annotations.get(NAMES) == wanted and (secret.get("data") or {}).get("tls.crt"):
            continue
        crt, key = self_signed(spec.get("commonName") or names[0], names)
        client.apply(
            path,
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "kubernetes.io/tls",
                "metadata": {
                    "name": spec["secretName"],
                    "namespace": meta["namespace"],
                    "annotations": {
                        NAMES: wanted,
                        "cert-manager.io/certificate-name": meta["name"],
                        "cert-manager.io/issuer-name": spec["issuerRef"]["name"],
                        "cert-manager.io/issuer-kind": spec["issuerRef"].get("kind", "Issuer"),
                    },
                },
                "data": {
                    name: base64.b64encode(value).decode()
                    for name, value in (("tls.crt", crt), ("tls.key", key), ("ca.crt", crt))
                },
            },
        )
        status = {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Ready",
                    "message": "Certificate is up to date and has not expired",
                    "observedGeneration": meta.get("generation", 1),
                }
            ]
        }
        client.request(
            "PATCH",
            f"{GROUP}/namespaces/{meta['namespace']}/certificates/{meta['name']}/status",
            {"status": status},
            content_type="application/merge-patch+json",
        )


def _ca_of(client: Client, reference: str) -> str | None:
    """The base64 `ca.crt` of the Secret of the Certificate `<namespace>/<name>`."""
    namespace, _, name = reference.partition("/")
    certificate = client.get(f"{GROUP}/namespaces/{namespace}/certificates/{name}")
    if certificate is None:
        return None
    secret = client.get(f"/api/v1/namespaces/{namespace}/secrets/{certificate['spec']['secretName']}")
    ca = ((secret or {}).get("data") or {}).get("ca.crt")
    return str(ca) if ca else None


def inject(client: Client) -> None:
    for collection in WEBHOOK_CONFIGS:
        for config in client.items(collection):
            reference = (config["metadata"].get("annotations") or {}).get(INJECT)
            ca = _ca_of(client, reference) if reference else None
            hooks = config.get("webhooks") or []
            if ca is None or all(h["clientConfig"].get("caBundle") == ca for h in hooks):
                continue
            for hook in hooks:
                hook["clientConfig"]["caBundle"] = ca
            _replace(client, f"{collection}/{config['metadata']['name']}", config)
    for crd in client.items(CRDS):
        reference = (crd["metadata"].get("annotations") or {}).get(INJECT)
        conversion = crd["spec"].get("conversion") or {}
        if not reference or conversion.get("strategy") != "Webhook":
            continue
        ca = _ca_of(client, reference)
        config = conversion.get("webhook", {}).get("clientConfig", {})
        if ca is None or config.get("caBundle") == ca:
            continue
        config["caBundle"] = ca
        _replace(client, f"{CRDS}/{crd['metadata']['name']}", crd)


def _replace(client: Client, path: str, body: Obj) -> None:
    try:
        client.request("PUT", path, body)
    except ApiError as error:
        if error.status != 409:  # changed meanwhile: the next pass sees the new version
            raise


def crds(module: Path) -> list[Obj]:
    """cert-manager's CRDs from its module's `deploy/crds` (plain manifests from v1.19)."""
    return [
        d
        for path in sorted((module / "deploy" / "crds").glob("*.yaml"))
        for d in yamlio.load_all(path.read_text())
        if d and d.get("kind") == "CustomResourceDefinition"
    ]
