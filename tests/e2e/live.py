"""Live objects, read with kubectl (installed wherever the tier runs; no extra Python client)."""

from __future__ import annotations

import json
import subprocess
from typing import Any

Obj = dict[str, Any]
READER = "e2e-reader"


def kubectl(*args: str, stdin: str | None = None, timeout: int = 120) -> str:
    result = subprocess.run(
        ["kubectl", *args], input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def get(kind: str, name: str, namespace: str | None = None) -> Obj:
    where = ["-n", namespace] if namespace else []
    return json.loads(kubectl("get", kind, name, *where, "-o", "json"))


def items(kind: str, namespace: str, selector: str = "") -> list[Obj]:
    flags = ["-l", selector] if selector else []
    return json.loads(kubectl("get", kind, "-n", namespace, *flags, "-o", "json"))["items"]


def exists(kind: str, name: str, namespace: str | None = None) -> bool:
    where = ["-n", namespace] if namespace else []
    return bool(kubectl("get", kind, name, *where, "--ignore-not-found", "-o", "name").strip())


def wait_for(kind: str, name: str, namespace: str, condition: str, timeout_s: int) -> None:
    kubectl(
        "wait",
        f"{kind}/{name}",
        "-n",
        namespace,
        f"--for=condition={condition}",
        f"--timeout={timeout_s}s",
        timeout=timeout_s + 30,
    )


def reader_pod(namespace: str, image: str, claims: dict[str, str], uid: int = 1000) -> Obj:
    """A pod that only sleeps, mounting `claims` (claim name -> mount path) read-only, Pod Security
    "restricted": the tier reads files on the job's volumes through it (`kubectl exec ... cat`)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": READER, "namespace": namespace, "labels": {"app": READER}},
        "spec": {
            "automountServiceAccountToken": False,
            "restartPolicy": "Never",
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": uid,
                "runAsGroup": uid,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "reader",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sleep", "3600"],
                    "resources": {
                        "requests": {"cpu": "50m", "memory": "64Mi"},
                        "limits": {"memory": "256Mi"},
                    },
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                        "readOnlyRootFilesystem": True,
                    },
                    "volumeMounts": [
                        {"name": claim, "mountPath": path, "readOnly": True} for claim, path in claims.items()
                    ],
                }
            ],
            "volumes": [
                {"name": claim, "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
                for claim in claims
            ],
        },
    }


def read_files(namespace: str, image: str, claims: dict[str, str], paths: list[str]) -> dict[str, str]:
    """The text of `paths` on the claims, read by a reader pod that is deleted afterwards."""
    kubectl("apply", "-f", "-", stdin=json.dumps(reader_pod(namespace, image, claims)))
    try:
        wait_for("pod", READER, namespace, "Ready", 300)
        return {path: kubectl("exec", "-n", namespace, READER, "--", "cat", path) for path in paths}
    finally:
        kubectl("delete", "pod", READER, "-n", namespace, "--ignore-not-found", "--wait=true")


def events(namespace: str) -> list[Obj]:
    return items("events", namespace)
