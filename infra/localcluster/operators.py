"""The operators the local cluster runs as stand-ins (standins.py), and what each needs to listen on
127.0.0.1 at free ports: the training operator (the platform stack's), Kueue (kueue.py), JobSet and
the Trainer v2 controller (the platform stack's Trainer v2 overlay), KServe's controller (its release
manifest, which the platform stack applies)."""

from __future__ import annotations

import yaml

from infra.localcluster.standins import LocalPod, StandIn
from infra.program.common import yamlio

# The operator's init container template flag and its default path (v1.9.4 pkg/config/config.go).
TEMPLATE_FLAG = "--pytorch-init-container-template-file"
TEMPLATE_DEFAULT = "/etc/config/initContainer.yaml"


def _training_operator_flags(pod: LocalPod) -> list[str]:
    # The webhook server's host is not settable in v1.9.4 (cmd/training-operator.v1/main.go:
    # webhook.NewServer(webhook.Options{Port: ...})): it listens on every interface, at a free port.
    flags = [
        f"--metrics-bind-address=127.0.0.1:{pod.ports[8080]}",
        f"--health-probe-bind-address=127.0.0.1:{pod.ports[8081]}",
        f"--webhook-server-port={pod.ports[9443]}",
    ]
    # Without the flag the operator reads the default path, where a pod sees a mount at /etc/config
    # and this process sees it under /tmp/.mounts (standins.py): the flag says so. With no such mount
    # the file is missing here as in a pod, and the operator falls back to upstream's template.
    container = next(c for c in pod.pod["spec"]["containers"] if c["name"] == "training-operator")
    if not any(a.startswith(TEMPLATE_FLAG) for a in container.get("args", [])):
        flags.append(f"{TEMPLATE_FLAG}={pod.seen_at(TEMPLATE_DEFAULT)}")
    return flags


def _kserve_flags(pod: LocalPod) -> list[str]:
    # cmd/manager/main.go (v0.20.0): --metrics-addr, --health-probe-addr, --webhook-port; the webhook
    # server's host is not settable (webhook.NewServer(webhook.Options{Port: ...})).
    return [
        f"--metrics-addr=127.0.0.1:{pod.ports[8080]}",
        f"--health-probe-addr=127.0.0.1:{pod.ports[8081]}",
        f"--webhook-port={pod.ports[9443]}",
    ]


MANAGER_CONFIG = "/controller_manager_config.yaml"


def _manager_config(mount_path: str, content: bytes, pod: LocalPod) -> bytes:
    """The Configuration file of Kueue, JobSet and Trainer v2 (one shape, from controller-runtime's
    component config) with its listeners on 127.0.0.1 at the local ports: their webhook's port and
    host are read from this file only (Kueue cmd/kueue/main.go, JobSet main.go, Trainer
    cmd/trainer-controller-manager/main.go have no flags for them)."""
    if mount_path != MANAGER_CONFIG:
        return content
    config = yamlio.load(content) or {}
    config.setdefault("health", {})["healthProbeBindAddress"] = f"127.0.0.1:{pod.ports[8081]}"
    config.setdefault("metrics", {})["bindAddress"] = f"127.0.0.1:{pod.ports[8443]}"
    webhook = config.setdefault("webhook", {})
    webhook["port"] = pod.ports[int(webhook.get("port") or 9443)]
    webhook["host"] = "127.0.0.1"
    if "statusServer" in config:  # Trainer v2's runtime status server (feature TrainJobStatus)
        config["statusServer"]["port"] = pod.ports[int(config["statusServer"].get("port") or 10443)]
    return yaml.safe_dump(config, sort_keys=False).encode()


STAND_INS = (
    StandIn(
        "kubeflow",
        "training-operator",
        "training-operator",
        "training-operator",
        (8080, 8081, 9443),  # metrics, health probes, webhook (cmd/training-operator.v1/main.go defaults)
        local_flags=_training_operator_flags,
    ),
    StandIn(
        "kueue-system",
        "kueue-controller-manager",
        "manager",
        "kueue",
        (8081, 8082, 8443, 9443),  # health probes, visibility, metrics, webhook
        # The on-demand visibility server writes its certificates to /visibility (pkg/visibility/
        # server.go), outside what a stand-in's pod has of its own, and is reached through an
        # APIService the local cluster does not register (kueue.py): it stays off here.
        local_flags=lambda _: ["--feature-gates=VisibilityOnDemand=false"],
        local_file=_manager_config,
    ),
    StandIn(
        "kubeflow-system",
        "jobset-controller-manager",
        "manager",
        "jobset",
        (8081, 8443, 9443),
        local_file=_manager_config,
    ),
    StandIn(
        "kubeflow-system",
        "kubeflow-trainer-controller-manager",
        "manager",
        "trainer-controller-manager",
        (8081, 8443, 9443, 10443),
        # The status server's port (feature TrainJobStatus) is also the port of the URL the controller
        # gives every TrainJob's trainer pods (v2.3.0 pkg/runtime/framework/plugins/trainjobstatus/
        # trainjobstatus.go createEnvVars: `https://<webhook service>.<namespace>.svc:<statusServer.port>`),
        # which the Service's port 10443 must match: it stays 10443 here.
        fixed_ports=(10443,),
        local_file=_manager_config,
    ),
    StandIn(
        "kserve",
        "kserve-controller-manager",
        "manager",
        "kserve-manager",
        (8080, 8081, 9443),  # metrics, health probes, webhook (cmd/manager/main.go defaults)
        local_flags=_kserve_flags,
    ),
)
