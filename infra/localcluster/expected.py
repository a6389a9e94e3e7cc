"""What a stack expects to find in the cluster rather than create (its platform stack, an existing
namespace, StorageClass or Secret, an operator it does not install, a PriorityClass, Kueue and its
ClusterQueue), read from the API server before a rehearsal runs the engine: one line per thing missing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from infra.localcluster.kube import Client
from infra.program.settings import Settings

API_PATHS = {
    "Namespace": "/api/v1/namespaces/{name}",
    "Secret": "/api/v1/namespaces/{namespace}/secrets/{name}",
    "StorageClass": "/apis/storage.k8s.io/v1/storageclasses/{name}",
    "PriorityClass": "/apis/scheduling.k8s.io/v1/priorityclasses/{name}",
    "CustomResourceDefinition": "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}",
    "ClusterQueue": "/apis/kueue.x-k8s.io/{kueue}/clusterqueues/{name}",
}


class Expected(NamedTuple):
    """An object a stack takes as already in the cluster, and the keys that say so."""

    kind: str
    name: str
    why: str
    namespace: str = ""

    def path(self, kueue_api_version: str) -> str:
        return API_PATHS[self.kind].format(name=self.name, namespace=self.namespace, kueue=kueue_api_version)

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name} ({self.why}) does not exist"


def _setting(settings: Settings, key: str) -> Any:
    """The setting of config key `key` (a field's alias)."""
    return next(getattr(settings, name) for name, f in Settings.model_fields.items() if f.alias == key)


EXISTING_SECRETS = ("minioExistingSecret", "minioReadExistingSecret", "mlflowExistingSecret")
# A job kind (jobKind) or server kind (serveKind): its CRD, what serves it, the key that installs that.
SERVED_BY = {
    "pytorchjob": ("pytorchjobs.kubeflow.org", "the training operator", "operatorInstall"),
    "trainjob": ("trainjobs.trainer.kubeflow.org", "Kubeflow Trainer v2", "trainerInstall"),
    "kserve": ("inferenceservices.serving.kserve.io", "KServe", "kserveInstall"),
}


def expected_objects(settings: Settings) -> Iterator[Expected]:
    """What a job stack takes as already in the cluster rather than creating it."""
    if settings.stack_role not in ("job", "all"):
        return
    if not settings.create_namespace:
        yield Expected("Namespace", settings.namespace, "createNamespace: false")
    if settings.storage_provider == "existing":
        for key in ("storageClassName", "dataStorageClassName"):
            if name := _setting(settings, key):
                yield Expected("StorageClass", name, f"{key}, storageProvider: existing")
    for key in EXISTING_SECRETS:
        if name := _setting(settings, key):
            yield Expected("Secret", name, key, settings.namespace)
    for kind in (settings.job_kind, settings.serve_kind):
        if kind in SERVED_BY and not _setting(settings, SERVED_BY[kind][2]):
            crd, what, install = SERVED_BY[kind]
            yield Expected("CustomResourceDefinition", crd, f"{what}: {install} false")
    if settings.job_queue_name:
        yield Expected("CustomResourceDefinition", "localqueues.kueue.x-k8s.io", "Kueue: jobQueueName")
        if settings.job_cluster_queue:
            yield Expected("ClusterQueue", settings.job_cluster_queue, "jobClusterQueue")
    priority = settings.job_priority_class_name
    if priority and priority not in settings.priority_class_values:
        yield Expected("PriorityClass", priority, "jobPriorityClassName")


def missing_prerequisites(
    values: dict[str, str],
    secret_keys: set[str],
    client: Client,
    platform_outputs: Callable[[str], dict[str, Any] | None],
) -> list[str]:
    """One line per thing the stack expects in the cluster that is not there. `platform_outputs` reads a
    stack of the rehearsal backend's outputs (None: no such stack). A config the program would refuse is
    left to the engine, which reports it with the program's own line."""
    from infra.program.checks import ConfigError
    from infra.program.common.config import settings_from_raw

    try:
        settings, _ = settings_from_raw(values, secret_keys)
    except ConfigError:
        return []
    lines = []
    if settings.platform_stack:
        outputs = platform_outputs(settings.platform_stack)
        if outputs is None or "platform" not in outputs:
            lines.append(
                f"the platform stack {settings.platform_stack} (platformStack) is not up in this "
                f"rehearsal's backend: rehearse it first (make rehearse STACK={settings.platform_stack})"
            )
    kueue = settings.kueue_api_version
    return lines + [str(e) for e in expected_objects(settings) if client.get(e.path(kueue)) is None]
