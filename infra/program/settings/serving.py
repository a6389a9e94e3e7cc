"""Settings: serving the trained model (a Deployment or a KServe InferenceService) and KServe itself."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from infra.program.settings.base import DNS_LABEL, SettingsGroup, key, quantity, release_tag

# The TensorBoard pod's requests (infra/program/job/tensorboard.py); they count against the namespace's
# quota (infra/program/checks/budget.py).
TENSORBOARD_REQUESTS = {"cpu": "100m", "memory": "256Mi"}


class ServingSettings(SettingsGroup):
    """The model server: its kind, model source, size, resources and callers."""

    serve_kind: Literal["none", "kserve", "deployment"] = key(
        "serveKind",
        "none",
        "Serve the trained model once the training job succeeded: 'kserve' a KServe InferenceService "
        "(Standard deployment mode: a plain Deployment, no Knative), 'deployment' a Deployment and a "
        "Service, 'none' no server. Needs jobWait true (the server waits for the job's success).",
    )
    serve_model_source: Literal["pvc", "s3"] = key(
        "serveModelSource",
        "pvc",
        "Where the server loads the model from: 'pvc' the run's checkpoint directory on the checkpoint "
        "PVC (mounted read-only), 's3' the run's export under models/<job>/ (needs jobModelExport).",
    )
    serve_replicas: int = key(
        "serveReplicas",
        2,
        "Server pods; with more than one a PodDisruptionBudget keeps at least one serving.",
        ge=1,
        le=100,
    )
    serve_wait_timeout_seconds: int = key(
        "serveWaitTimeoutSeconds",
        600,
        "How long `pulumi up` waits for the server to be Ready (a new run's pods too, during the rollout).",
        ge=60,
        le=3600,
    )
    serve_port: int = key("servePort", 8080, "Port the server listens on in its pod.", ge=1024, le=65535)
    serve_health_port: int = key(
        "serveHealthPort",
        8081,
        "The port of the server's liveness and readiness probes, its own (not in the Service, nor in the "
        "NetworkPolicy: the kubelet probes from the node), so that clients holding every connection of "
        "servePort never make the probes fail and the kubelet restart the server.",
        ge=1024,
        le=65535,
    )
    serve_max_batch: int = key(
        "serveMaxBatch", 256, "Most inputs the server accepts in one request.", ge=1, le=65536
    )
    serve_cpu_request: str = key("serveCpuRequest", "500m", "CPU request per server pod (a quantity).")
    serve_cpu_limit: str = key("serveCpuLimit", "1", "CPU limit per server pod (a quantity).")
    serve_memory_request: str = key(
        "serveMemoryRequest", "512Mi", "Memory request per server pod (a quantity)."
    )
    serve_memory_limit: str = key("serveMemoryLimit", "1Gi", "Memory limit per server pod (a quantity).")
    serve_drain_seconds: int = key(
        "serveDrainSeconds",
        5,
        "Seconds a stopping server pod (deleted, or replaced by a rollout) keeps answering after it "
        "turned not-ready, while its endpoint's removal reaches every node; the pod's grace period "
        "covers it.",
        ge=0,
        le=120,
    )
    serve_ingress_namespaces: list[str] = key(
        "serveIngressNamespaces",
        [],
        "Namespaces besides the stack's own whose pods may call the server (its NetworkPolicy lets in "
        "nobody else).",
    )

    tensorboard_deploy: bool = key(
        "tensorboardDeploy",
        False,
        "Serve the training curves: one TensorBoard pod (the trainer image's `tensorboard`, requests 100m "
        "CPU and 256Mi) over the checkpoint PVC, read-only, every run's tensorboard/ directory side by "
        "side; loopback only, no Service, a NetworkPolicy that admits nothing: open it with the "
        "tensorboardCommand output (kubectl port-forward).",
    )

    @field_validator("serve_cpu_request", "serve_cpu_limit", "serve_memory_request", "serve_memory_limit")
    @classmethod
    def _serve_quantity(cls, value: str) -> str:
        return quantity(value)

    @field_validator("serve_ingress_namespaces")
    @classmethod
    def _namespace_list(cls, value: list[str]) -> list[str]:
        for name in value:
            if len(name) > 63 or not DNS_LABEL.match(name):
                raise ValueError(f"a list of namespace names, DNS-1123 labels ({name!r} is not one)")
        return value


class KServeSettings(SettingsGroup):
    """Installing KServe, or declaring it present."""

    kserve_install: bool = key(
        "kserveInstall",
        False,
        "Install KServe (its release manifest kserve.yaml, vendored or kserveSource; CRDs kept on destroy, "
        "default deployment mode Standard) in namespace kserve; cert-manager must already be in the "
        "cluster. A platform or 'all' stack only.",
    )
    kserve_present: bool = key(
        "kservePresent",
        False,
        "With kserveInstall false: declare that KServe (with its CRDs and webhook) is already in the "
        "cluster, e.g. from the platform stack, so serveKind kserve may be used.",
    )
    kserve_version: str = key(
        "kserveVersion",
        "v0.20.0",
        "Pinned KServe release tag (vMAJOR.MINOR.PATCH) kserveInstall applies: the version vendored in "
        "infra/manifests/kserve, or, with kserveSource, the version that source holds.",
    )
    kserve_source: str = key(
        "kserveSource",
        "",
        "KServe's release manifest kserveInstall applies instead of the vendored one: a local file "
        "(absolute, or ./ or ../ relative to the directory of Pulumi.yaml) or an https URL; empty applies "
        "infra/manifests/kserve/kserve.yaml (the release's kserve.yaml from the pinned module, checked by "
        "its sha256; nothing is downloaded). Either is read by the program, which applies it less the "
        "components the bundle never uses (the LLM inference service, the local-model cache).",
    )

    @field_validator("kserve_version")
    @classmethod
    def _kserve_release_tag(cls, value: str) -> str:
        return release_tag(value)
