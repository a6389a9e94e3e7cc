"""The guardrails see a TrainJob's pods (in its TrainingRuntime) and its size and GPUs (in the TrainJob)."""

from __future__ import annotations

import guardrails as g

from tests.policy.conftest import stack_objects


def _objects():
    objects = stack_objects("gke-trainjob")
    (runtime,) = [o for o in objects if o["kind"] == "TrainingRuntime"]
    (trainjob,) = [o for o in objects if o["kind"] == "TrainJob"]
    return objects, runtime, trainjob


def _node_container(runtime):
    (rjob,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    (container,) = rjob["template"]["spec"]["template"]["spec"]["containers"]
    return container


def test_the_runtimes_node_template_is_checked_and_passes():
    objects, runtime, trainjob = _objects()
    (template,) = g.pod_templates(runtime)
    assert (template.where, template.pods, template.procs_per_pod) == (
        "TrainingRuntime mnist-r1 node",
        4,
        None,
    )
    for rule in (
        g.images_pinned,
        g.pod_security_restricted,
        g.no_secret_literals_in_env,
        g.requests_and_limits_set,
    ):
        assert rule(runtime) == [], rule.__name__
    assert g.gpu_limits_match_processes(trainjob) == []
    assert g.job_size(trainjob) == (4, 4) and g.job_size(runtime) is None
    assert g.shared_claims_read_write_many(objects) == []


def test_violations_in_the_runtime_and_the_trainjob_are_reported():
    _, runtime, trainjob = _objects()
    container = _node_container(runtime)
    container["image"] = "ghcr.io/ddp-mnist/trainer:latest"
    container["securityContext"]["allowPrivilegeEscalation"] = True
    assert g.images_pinned(runtime) == [
        "TrainingRuntime mnist-r1 node: container node image ghcr.io/ddp-mnist/trainer:latest uses :latest, "
        "which moves; pin a version tag or an @sha256 digest"
    ]
    assert g.pod_security_restricted(runtime) != []
    trainjob["spec"]["trainer"]["numProcPerNode"] = 2
    assert g.gpu_limits_match_processes(trainjob) == [
        "TrainJob mnist-r1: 1 nvidia.com/gpu per pod for 2 processes per node; set the GPU limit equal to "
        "the processes per node (one GPU per process)"
    ]
    trainjob["spec"]["trainer"]["numNodes"] = 20
    assert g.job_within_budget(trainjob, max_nodes=16, max_gpus=64) == [
        "TrainJob mnist-r1 runs 20 nodes; this platform allows at most 16 per job"
    ]
