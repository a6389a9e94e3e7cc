"""A Job's pods as the Kubernetes Job controller (1.33) creates them.

Upstream (kubernetes/kubernetes, `pkg/controller/job/job_controller.go` `manageJob` and
`indexed_job_utils.go`): a NonIndexed Job's pods are named `<job>-` plus 5 random characters; an
Indexed Job gets per completion index one pod from the Job's template with
generateName `<job>-<index>-` (`podGenerateNameWithIndex`), hostname `<job>-<index>`, the
`batch.kubernetes.io/job-completion-index` annotation and label (PodIndexLabel, GA), the
`batch.kubernetes.io/job-index-failure-count` annotation when `backoffLimitPerIndex` is set, the
`batch.kubernetes.io/job-tracking` finalizer, and `JOB_COMPLETION_INDEX` (a fieldRef to that label)
appended to every init and regular container that does not set it. The API server adds the
`batch.kubernetes.io/job-name` and `controller-uid` labels to the template when the Job is created
(selector generation); the uid is shown as `<uid>`.
"""

from __future__ import annotations

from infra.review.effective.base import Controllers, Effective, EffectivePod, Obj, deriver, pod_from_template

INDEX_KEY = "batch.kubernetes.io/job-completion-index"
FAILURE_COUNT_KEY = "batch.kubernetes.io/job-index-failure-count"
TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
MAX_GENERATED_NAME = 58  # apiserver names.MaxGeneratedNameLength (63 - 5 random characters)


def generate_name(job: str, index: int) -> str:
    suffix = f"-{index}-"
    prefix = f"{job}{suffix}"
    return (
        prefix if len(prefix) <= MAX_GENERATED_NAME else prefix[: MAX_GENERATED_NAME - len(suffix)] + suffix
    )


def _controller_labels(meta: Obj, name: str) -> None:
    """The labels the API server adds to a Job's template when it generates the selector."""
    meta.setdefault("labels", {}).update(
        {
            "batch.kubernetes.io/controller-uid": "<uid>",
            "batch.kubernetes.io/job-name": name,
            "controller-uid": "<uid>",
            "job-name": name,
        }
    )
    meta["finalizers"] = [*meta.get("finalizers", []), TRACKING_FINALIZER]


def _non_indexed(job: Obj) -> Effective:
    spec, name = job["spec"], job["metadata"]["name"]
    count = min(int(spec.get("parallelism", 1)), int(spec.get("completions", 1)))
    effective = Effective()
    for index in range(count):
        pod = pod_from_template(spec["template"], None, job["metadata"].get("namespace", ""), f"{name}-")
        _controller_labels(pod["metadata"], name)
        effective.pods.append(EffectivePod(f"Job/{name}", "Pod", index, index, pod))
    return effective


def _add_index_env(container: Obj) -> None:
    if any(e.get("name") == "JOB_COMPLETION_INDEX" for e in container.get("env", [])):
        return
    container["env"] = [
        *container.get("env", []),
        {
            "name": "JOB_COMPLETION_INDEX",
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{INDEX_KEY}']"}},
        },
    ]


@deriver("batch", "Job")
def derive(job: Obj, controllers: Controllers) -> Effective:
    del controllers  # the Job controller's behaviour does not depend on the stack
    spec = job["spec"]
    if spec.get("completionMode", "NonIndexed") != "Indexed":
        return _non_indexed(job)
    name = job["metadata"]["name"]
    namespace = job["metadata"].get("namespace", "")
    effective = Effective()
    count = min(int(spec.get("parallelism", 1)), int(spec.get("completions", 1)))
    for index in range(count):
        pod = pod_from_template(spec["template"], None, namespace, generate_name(name, index))
        meta = pod["metadata"]
        _controller_labels(meta, name)
        meta["labels"][INDEX_KEY] = str(index)
        annotations = meta.setdefault("annotations", {})
        annotations[INDEX_KEY] = str(index)
        if spec.get("backoffLimitPerIndex") is not None:
            annotations[FAILURE_COUNT_KEY] = "0"
        pod["spec"]["hostname"] = f"{name}-{index}"
        for container in [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]:
            _add_index_env(container)
        effective.pods.append(EffectivePod(f"Job/{name}", "Index", index, index, pod))
    return effective
