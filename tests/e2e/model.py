"""The offline model of a stack under test: its rendered objects and the pods the controllers create
from them (infra/review/effective through infra/review/cluster.py), to compare with the live ones."""

from __future__ import annotations

from typing import Any

from infra.review.cluster import ClusterView, cluster_view
from infra.review.manifest import Rendering, render
from tests.e2e.stacks import as_stack


def rendered(name: str, config: dict[str, str]) -> Rendering:
    return render(as_stack(name, config))


def modelled(name: str, config: dict[str, str]) -> ClusterView:
    rendering = rendered(name, config)
    return cluster_view(rendering.objects, rendering.settings)


def modelled_pod(view: ClusterView, role: str, index: int = 0) -> dict[str, Any]:
    """The admitted pod of `role` (Master, Worker, Index) and replica/completion `index`."""
    for pod in view.admission.pods:
        if pod.role == role and pod.index == index:
            return pod.manifest
    raise LookupError(f"the model has no admitted {role} pod {index}")
