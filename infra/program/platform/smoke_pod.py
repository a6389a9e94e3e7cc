"""The smoke checks' pod: a restricted, tiny pod running a shell script in the operator's init image, with
no token. The platform's checks (infra/program/platform/smoke.py, the GPU check of
infra/program/platform/device_plugin.py) all run it."""

from __future__ import annotations

from typing import Any

from infra.program.common.meta import labels
from infra.program.settings import Settings

SMOKE_COMPONENT = "smoke-check"
UID = 65534  # alpine's `nobody`, as in the operator's restricted init container


def _security() -> tuple[dict[str, Any], dict[str, Any]]:
    """Pod and container securityContext meeting Pod Security 'restricted'."""
    pod = {
        "runAsNonRoot": True,
        "runAsUser": UID,
        "runAsGroup": UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    container = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
    }
    return pod, container


def smoke_pod(settings: Settings, name: str, script: str, component: str = SMOKE_COMPONENT) -> dict[str, Any]:
    """A pod template running `sh -c script` in the operator's init image, restricted, tiny, no token."""
    pod_security, container_security = _security()
    return {
        "metadata": {
            "labels": labels(settings, component),
            "annotations": {"sidecar.istio.io/inject": "false"},
        },
        "spec": {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 5,
            "securityContext": pod_security,
            "containers": [
                {
                    "name": name,
                    "image": settings.operator_init_container_image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", script],
                    "resources": {
                        "requests": {"cpu": "10m", "memory": "16Mi"},
                        "limits": {"cpu": "100m", "memory": "32Mi"},
                    },
                    "securityContext": container_security,
                }
            ],
        },
    }
