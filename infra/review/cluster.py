"""What the cluster makes of a rendered stack: the controllers' effective pods and their admission.

Ties the rendering to `infra.review.effective` (what the training operator and the Job controller
create, as this stack's operator is configured) and `infra.review.admission` (what the API server
accepts in the stack's namespace). `render --validate`, the golden files and the local scheduler all
go through `cluster_view`, so they judge the same pods.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from infra.program.platform.training_operator import MAX_TRIES, RESTRICTED_INIT_CONTAINER_TEMPLATE
from infra.program.settings import Settings
from infra.review.admission import Admission, Namespace, admit, namespace_of
from infra.review.effective import Controllers, Effective, EffectivePod, derive
from infra.review.effective.pytorchjob import UPSTREAM_INIT_CONTAINER_IMAGE, UPSTREAM_INIT_CONTAINER_TEMPLATE


def controllers_for(settings: Settings) -> Controllers:
    """The operator as this stack has it: installed by the stack (our restricted template and init
    image), present and declared compliant (modelled as the same template), or present as upstream
    ships it (upstream's template and `alpine:3.10`)."""
    if settings.operator_install or settings.operator_init_container_restricted:
        return Controllers(
            RESTRICTED_INIT_CONTAINER_TEMPLATE, settings.operator_init_container_image, MAX_TRIES
        )
    return Controllers(UPSTREAM_INIT_CONTAINER_TEMPLATE, UPSTREAM_INIT_CONTAINER_IMAGE, MAX_TRIES)


@dataclass
class ClusterView:
    effective: Effective
    namespace: Namespace  # the stack's namespace
    admission: Admission
    # Every namespace a pod lands in (the stack's, and the smoke check's own), by name.
    namespaces: dict[str, Namespace] = field(default_factory=dict)

    def level_of(self, pod: EffectivePod) -> str:
        """The Pod Security level the pod was judged under."""
        space = self.namespaces.get(pod.manifest["metadata"].get("namespace", ""), self.namespace)
        return space.level


def cluster_view(objects: list[dict[str, Any]], settings: Settings) -> ClusterView:
    effective = derive(objects, controllers_for(settings))
    namespace = namespace_of(objects, settings.namespace, settings.namespace_pod_security)
    namespaces = {namespace.name: namespace}
    # Workloads run one after another (the training job waits for the seed Job, whose finished pod
    # no longer counts against a quota): each is admitted against its namespace on its own. A
    # namespace other than the stack's (the smoke check's) enforces what its Namespace object says.
    admission = Admission()
    for owner in dict.fromkeys(pod.owner for pod in effective.pods):
        pods = [p for p in effective.pods if p.owner == owner]
        name = pods[0].manifest["metadata"].get("namespace") or namespace.name
        if name not in namespaces:
            namespaces[name] = namespace_of(objects, name, "privileged")
        admitted = admit(pods, namespaces[name])
        admission.pods += admitted.pods
        admission.refusals += admitted.refusals
    return ClusterView(effective, namespace, admission, namespaces)


def effective_yaml(view: ClusterView, stack: str) -> str:
    """The admitted pods and the controllers' Services, deterministic YAML for review (not to apply)."""
    header = [
        f"# Stack '{stack}': the pods and Services the controllers create from the rendered objects,",
        f"# as admitted in namespace {view.namespace.name} (Pod Security '{view.namespace.level}').",
        *(
            f"# The pods in namespace {n.name} are admitted under its own Pod Security '{n.level}'."
            for n in view.namespaces.values()
            if n.name != view.namespace.name
        ),
        "# For review only: the controllers create these; never apply this file.",
    ]
    header += [f"# REFUSED: {line}" for line in view.admission.refusals]
    documents = [pod.manifest for pod in view.admission.pods] + view.effective.services
    body = yaml.safe_dump_all(
        documents, sort_keys=True, default_flow_style=False, explicit_start=True, width=120
    )
    return "\n".join(header) + "\n" + body
