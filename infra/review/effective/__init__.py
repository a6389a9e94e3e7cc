"""What the cluster runs: the pods (and Services) that controllers create from the rendered objects.

Every check of rendered objects misses what controllers add before anything runs: the training
operator's env, init container and Services, the Job controller's pod names, hostnames and completion
index, JobSet's Jobs, KServe's predictor. `derive` returns those effective objects, one module per
workload kind (`pytorchjob`, `job`, `trainjob`, `serving` for Deployments and InferenceServices); a new
kind is one more module registered in `DERIVERS`. Admission
(`infra.review.admission`) then decides whether the API server accepts each pod, and the local
scheduler runs exactly these pods.
"""

from __future__ import annotations

import copy

from infra.review.effective.base import (  # noqa: F401 (the package's names)
    DERIVERS,
    Controllers,
    Deriver,
    Effective,
    EffectivePod,
    Obj,
    _group,
    deriver,
    field_value,
    is_workload,
    pod_from_template,
)


def derive(objects: list[Obj], controllers: Controllers) -> Effective:
    """The effective pods and Services of every workload among `objects`, in their order."""
    import dataclasses

    from infra.review.effective import job, pytorchjob, serving, trainjob  # noqa: F401 (registers the kinds)

    controllers = dataclasses.replace(controllers, rendered=tuple(copy.deepcopy(objects)))
    effective = Effective()
    for obj in objects:
        fn = DERIVERS.get((_group(obj.get("apiVersion", "")), obj.get("kind", "")))
        if fn is not None:
            effective.extend(fn(copy.deepcopy(obj), controllers))
    return effective
