"""KServe, installed from its vendored release manifest or another copy of it (`kserveSource`), or
assumed present (`kservePresent`).

Upstream (kserve/kserve, tag v0.20.0) publishes `kserve.yaml` with each release, and commits it with the
tag as `install/v0.20.0/kserve.yaml` (`hack/release/generate-install.sh`: `kustomize build
config/overlays/all` without its Namespace, `:latest` images set to the tag). By default the component
applies that file vendored from the pinned module (`infra/manifests/kserve/kserve.yaml`, checked by its
sha256 before it is applied: `infra/program/common/vendored.py`), as the yaml/v2 ConfigFile `kserve-manifests`
(the objects keep their Pulumi names whichever source a stack used before). The manifest holds the
CRDs (`serving.kserve.io` InferenceService, ServingRuntime, ...), the controller manager, its webhooks
and the ConfigMap `inferenceservice-config`, all in namespace `kserve`, which the manifest leaves out and
this component creates. The webhooks' serving certificate is a cert-manager `Certificate` signed by a
self-signed `Issuer` (`config/certmanager`), so cert-manager must already run in the cluster.

Only what the bundle uses is applied. The release manifest also holds two components the bundle never
runs, the LLM inference service controller (`llmisvc-*`: it may manage secrets, service accounts, roles
and cluster role bindings cluster-wide) and the local-model cache (`kserve-localmodel*`: a controller,
and an agent DaemonSet on every node with a `hostPath` volume and cluster-wide read of secrets). Their
23 objects (`UNUSED`: deployments, the DaemonSet, service accounts, RBAC, Services, certificates and
webhook configurations) are left out of the file the stack applies (`used_manifest`), whichever the
source; their CRDs stay, inert, as every KServe CRD is kept. A stack that applied them before deletes
them at its next `up`; the other objects keep their Pulumi names (the same ConfigFile, the same child
names), so nothing else is replaced. Without the agent's `hostPath`, namespace `kserve` enforces Pod
Security "restricted", which the controller manager's pod meets as upstream writes it (both containers
non-root, no privilege escalation, no capabilities, RuntimeDefault seccomp).

As for the training operator (`infra/program/platform/training_operator.py`), a transform keeps every CRD when
the stack is destroyed (deleting the InferenceService CRD deletes every team's InferenceServices), and sets
the default deployment mode in `inferenceservice-config` to "Standard" (upstream's default is
"Serverless", which needs Knative): plain Deployments and Services. The stack's own InferenceService
names its mode anyway (`infra/program/job/serving.py`).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.program.common import yamlio
from infra.program.common.meta import labels
from infra.program.common.vendored import KSERVE, vendored
from infra.program.platform import operator_ingress
from infra.program.platform.operator_ingress import CRD_DOCUMENT, DOCUMENT_START
from infra.program.platform.training_operator import (
    CRD_TYPE,
    kept_crd,
    kustomize_source,
    restricted_namespace,
)
from infra.program.settings import PROJECT, Settings

NAMESPACE = "kserve"
CONFIG_MAP = "inferenceservice-config"
CONFIG_MAP_TYPE = "kubernetes:core/v1:ConfigMap"


FETCH_TIMEOUT_S = 60
# The objects of the release manifest (v0.20.0) the bundle never uses, by kind and name: the LLM inference
# service controller and the local-model cache (controller and node agent). A release that renames or
# drops one of them fails tests/infra/test_serving.py, so an upgrade revisits the list.
UNUSED: frozenset[tuple[str, str]] = frozenset(
    {
        ("ServiceAccount", "llmisvc-controller-manager"),
        ("Role", "llmisvc-leader-election-role"),
        ("RoleBinding", "llmisvc-leader-election-rolebinding"),
        ("ClusterRole", "kserve-llmisvc-manager-role"),
        ("ClusterRoleBinding", "llmisvc-manager-rolebinding"),
        ("Service", "llmisvc-controller-manager-service"),
        ("Service", "llmisvc-webhook-server-service"),
        ("Deployment", "llmisvc-controller-manager"),
        ("Certificate", "llmisvc-serving-cert"),
        ("MutatingWebhookConfiguration", "llminferenceservice.serving.kserve.io"),
        ("ValidatingWebhookConfiguration", "llminferenceservice.serving.kserve.io"),
        ("ValidatingWebhookConfiguration", "llminferenceserviceconfig.serving.kserve.io"),
        ("ServiceAccount", "kserve-localmodel-controller-manager"),
        ("ServiceAccount", "kserve-localmodelnode-agent"),
        ("ClusterRole", "kserve-localmodel-manager-role"),
        ("ClusterRole", "kserve-localmodelnode-agent-role"),
        ("ClusterRoleBinding", "kserve-localmodel-manager-rolebinding"),
        ("ClusterRoleBinding", "kserve-localmodelnode-agent-rolebinding"),
        ("Service", "localmodel-webhook-server-service"),
        ("Deployment", "kserve-localmodel-controller-manager"),
        ("DaemonSet", "kserve-localmodelnode-agent"),
        ("Certificate", "localmodel-serving-cert"),
        ("ValidatingWebhookConfiguration", "localmodelcache.serving.kserve.io"),
    }
)
# A YAML stream's documents split at `---` lines (DOCUMENT_START); a CRD is kept whatever it is, so the
# 16 CRDs (most of the file's 7 MB) are never parsed here (CRD_DOCUMENT).


class KServeSourceError(ValueError):
    """kserveSource cannot be read; `str()` is the one line shown."""


def unused(obj: dict[str, Any]) -> bool:
    return (obj.get("kind"), (obj.get("metadata") or {}).get("name")) in UNUSED


def used_documents(text: str) -> str:
    """`text`, a YAML stream, without the documents of `UNUSED`; every other document as it is, byte for
    byte (the provider parses what upstream wrote, not a re-dump of it)."""
    kept = []
    for document in DOCUMENT_START.split(text):
        if not CRD_DOCUMENT.search(document):
            obj = yamlio.load(document)
            if isinstance(obj, dict) and unused(obj):
                continue
        kept.append(document.rstrip("\n") + "\n")
    return "---\n".join(d for d in kept if d.strip())


def _read(source: str) -> bytes:
    if source.startswith("https://"):
        try:
            with urllib.request.urlopen(source, timeout=FETCH_TIMEOUT_S) as response:  # noqa: S310 - https only
                return bytes(response.read())
        except OSError as error:
            raise KServeSourceError(
                f"config ddp-mnist:kserveSource={source}: cannot fetch it ({error})"
            ) from None
    try:
        return Path(source).read_bytes()
    except OSError as error:
        raise KServeSourceError(
            f"config ddp-mnist:kserveSource={source}: cannot read it ({error.strerror or error})"
        ) from None


def _own_directory() -> Path:
    """A directory of this user's in the temporary directory, writable by no one else (a file there is
    what the provider applies with cluster-admin)."""
    directory = Path(tempfile.gettempdir()) / f"{PROJECT}-{os.getuid()}"
    directory.mkdir(mode=0o700, exist_ok=True)
    info = directory.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise KServeSourceError(
            f"{directory} is not a directory of this user's that only it may write; remove it and run again"
        )
    return directory


def used_manifest(source: str) -> str:
    """The file the stack applies: `source` without `UNUSED`, written once per content (named by its
    sha256, atomically) into a directory of this user's; its path."""
    used = used_documents(_read(source).decode()).encode()
    digest = hashlib.sha256(used).hexdigest()
    path = _own_directory() / f"kserve-{digest[:16]}.yaml"
    if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == digest:
        return str(path)
    descriptor, partial = tempfile.mkstemp(dir=path.parent, prefix=".kserve-", suffix=".yaml")
    try:
        with os.fdopen(descriptor, "wb") as out:
            out.write(used)
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    return str(path)


def kserve_source(settings: Settings) -> str:
    """The override's manifest (a relative local path made absolute, as for the kustomize sources), else
    the vendored release manifest (checked)."""
    return kustomize_source(settings.kserve_source) or vendored(KSERVE).verified()


def standard_mode(props: dict[str, Any]) -> dict[str, Any]:
    """`inferenceservice-config` with `deploy.defaultDeploymentMode` Standard, and Pulumi's wait
    annotations in `inferenceService.serviceAnnotationDisallowedList` (KServe appends the list to its
    own: `pkg/apis/serving/v1beta1/configmap.go`), so they never reach a predictor's pod template: a
    change of a wait setting then restarts no server pod (a new dict)."""
    import copy

    from infra.program.job.serving import WAIT_ANNOTATIONS

    config = copy.deepcopy(props)
    data = config.setdefault("data", {})
    data["deploy"] = json.dumps({"defaultDeploymentMode": "Standard"})
    isvc = json.loads(data.get("inferenceService") or "{}")
    disallowed = list(isvc.get("serviceAnnotationDisallowedList") or [])
    isvc["serviceAnnotationDisallowedList"] = disallowed + [
        a for a in WAIT_ANNOTATIONS if a not in disallowed
    ]
    data["inferenceService"] = json.dumps(isvc)
    return config


def kserve_transform() -> Callable[[pulumi.ResourceTransformArgs], pulumi.ResourceTransformResult | None]:
    """A transform for the manifest's objects: CRDs kept on destroy, the ConfigMap in Standard mode."""

    def transform(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
        props: dict[str, Any] = dict(args.props)
        if args.type_ == CRD_TYPE:
            return kept_crd(args, adopt=False)
        if args.type_ == CONFIG_MAP_TYPE and (props.get("metadata") or {}).get("name") == CONFIG_MAP:
            return pulumi.ResourceTransformResult(props=standard_mode(props), opts=args.opts)
        return None

    return transform


class KServe(pulumi.ComponentResource):
    """Namespace `kserve` and KServe's release manifest applied into it (server-side, by the provider)."""

    def __init__(self, name: str, settings: Settings, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{PROJECT}:operator:KServe", name, {}, opts)
        self.source = kserve_source(settings)
        try:
            applied = used_manifest(self.source)
        except KServeSourceError as error:
            raise pulumi.RunError(str(error)) from None
        namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata=restricted_namespace(
                {"metadata": {"name": NAMESPACE, "labels": labels(settings, "kserve")}}
            )["metadata"],
            opts=pulumi.ResourceOptions(parent=self),
        )
        manifests = k8s.yaml.v2.ConfigFile(
            f"{name}-manifests",
            file=applied,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[namespace], transforms=[kserve_transform()]),
        )
        operator_ingress.apply(
            name,
            settings,
            "kserve",
            operator_ingress.read_objects(applied),
            pulumi.ResourceOptions(parent=self, depends_on=[namespace, manifests]),
        )
        self.register_outputs({"source": self.source})
