"""A local HTTPS mirror of MNIST for the real node's pods: the four `.gz` files of `../shared/data/mnist`
served on the node's address, what a `seedMirrors` URL names (https only; every file checked against its
canonical sha256 by `trainer.seed`).

Its certificate is signed by a CA of the tier's, kept in the cache (`$DDP_MNIST_CACHE/realcluster/node/
mirror-ca`): the node's trainer base trusts it (images.py puts it into the base's CA bundle, as an
organisation's base image carries its own CA), so the image built from our Dockerfile on that base
verifies the mirror as it would verify a public one.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import ssl
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from infra.localcluster import pki
from infra.localcluster.node.config import NODE_IP

PORT = 8443
FILES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)
CA_DAYS = 3650


def ca_certificate(cache: Path) -> Path:
    """The mirror CA's certificate, made once in `cache/mirror-ca`."""
    directory = cache / "mirror-ca"
    if not (directory / "ca.crt").exists():
        scratch = Path(tempfile.mkdtemp(prefix="mirror-ca-", dir=cache))
        pki.certificate_authority(scratch, "ddp-mnist-local-mirror-ca", CA_DAYS)
        scratch.replace(directory)
    return directory / "ca.crt"


class _Files(http.server.SimpleHTTPRequestHandler):
    """GET of the four MNIST files alone; anything else is a 404. No request is logged."""

    def send_head(self):  # type: ignore[no-untyped-def]
        if self.path.lstrip("/") not in FILES:
            self.send_error(404)
            return None
        return super().send_head()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        return


@contextlib.contextmanager
def serving(mnist: Path, cache: Path) -> Iterator[str]:
    """Serve `mnist`'s files on https://NODE_IP:PORT/ while the block runs; yields that base URL."""
    ca = ca_certificate(cache)
    with tempfile.TemporaryDirectory(prefix="mirror-") as work:
        certs = Path(work)
        for name in ("ca.crt", "ca.key"):
            (certs / name).write_bytes((ca.parent / name).read_bytes())
        crt, key = pki.server_certificate(certs, "mirror", NODE_IP)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(crt, key)
        handler = functools.partial(_Files, directory=str(mnist))
        server = http.server.ThreadingHTTPServer((NODE_IP, PORT), handler)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"https://{NODE_IP}:{PORT}/"
        finally:
            server.shutdown()
            server.server_close()
