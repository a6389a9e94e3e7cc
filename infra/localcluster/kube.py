"""A minimal client of the local API server (the standard library's HTTPS with the admin certificate).

Enough for the cluster's own stand-ins (the volume provisioner, the operator's pod, the egress proxy's
Service lookups) and for the tier's checks; the tests also read objects with kubectl.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Obj = dict[str, Any]


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


@dataclass(frozen=True)
class Client:
    server: str  # https://127.0.0.1:<port>
    pki: Path

    def _context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        context.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return context

    def request(
        self,
        method: str,
        path: str,
        body: Obj | None = None,
        content_type: str = "application/json",
        timeout: float = 10,
    ) -> Obj:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self._context(), timeout=timeout) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")
            with contextlib.suppress(ValueError):
                detail = json.loads(detail).get("message", detail)
            raise ApiError(error.code, detail) from None
        return json.loads(text) if text.strip().startswith("{") else {"raw": text}

    def get(self, path: str) -> Obj | None:
        try:
            return self.request("GET", path)
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def items(self, path: str) -> list[Obj]:
        listed = self.get(path)
        return list(listed.get("items", [])) if listed else []

    def create(self, path: str, body: Obj) -> Obj:
        return self.request("POST", path, body)

    def apply(self, path: str, body: Obj) -> Obj:
        """Create `body` at the collection `path`, or replace its spec if it exists (server-side apply)."""
        name = body["metadata"]["name"]
        return self.request(
            "PATCH",
            f"{path}/{name}?fieldManager=ddp-mnist-local&force=true",
            body,
            content_type="application/apply-patch+yaml",
        )

    def delete(self, path: str) -> None:
        try:
            self.request("DELETE", path)
        except ApiError as error:
            if error.status != 404:
                raise

    def ready(self) -> bool:
        try:
            return self.request("GET", "/readyz", timeout=2).get("raw", "").strip() == "ok"
        except (OSError, ApiError, ValueError):
            return False
