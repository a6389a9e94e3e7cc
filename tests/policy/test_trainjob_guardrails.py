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
    # The runtime's defaults are what a TrainJob that keeps them runs: counted like a job.
    assert g.job_size(trainjob) == g.job_size(runtime) == (4, 4)
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


# --- what the TrainJob sets itself ------------------------------------------------------------

CANARY = "canary-Token-Value-9b8c7d"


def test_a_trainjobs_own_image_env_and_args_get_the_container_rules():
    """spec.trainer's image, env and args replace or join the runtime's `node` container's; the
    initializers' env joins theirs: each is checked as a container's would be."""
    _, _, trainjob = _objects()
    trainer = trainjob["spec"]["trainer"]
    trainer["image"] = "ghcr.io/ddp-mnist/trainer"
    trainer["env"] = [{"name": "HF_TOKEN", "value": CANARY}, {"name": "EPOCHS", "value": "3"}]
    trainer["args"] = ["--epochs=3", "--api-key", CANARY]
    trainjob["spec"]["initializer"] = {
        "dataset": {"storageUri": "s3://d/x", "env": [{"name": "S3_KEY", "value": CANARY}]}
    }
    assert g.images_pinned(trainjob) == [
        "TrainJob mnist-r1: spec.trainer image ghcr.io/ddp-mnist/trainer is untagged (that means :latest); "
        "pin a version tag or an @sha256 digest"
    ]
    assert g.images_by_digest(trainjob) == [
        "TrainJob mnist-r1: spec.trainer image ghcr.io/ddp-mnist/trainer has no @sha256 digest, and a tag "
        "can be re-pushed; set the digest a release names (docs/RELEASE.md)"
    ]
    assert g.no_secret_literals_in_env(trainjob) == [
        "TrainJob mnist-r1: spec.trainer env HF_TOKEN has a literal value that looks secret; use "
        "valueFrom.secretKeyRef",
        "TrainJob mnist-r1: spec.trainer args[2] has a literal value that looks secret; put it in a Secret, "
        "pass it as an env var (valueFrom.secretKeyRef) and write $(VAR) in args",
        "TrainJob mnist-r1: spec.initializer.dataset env S3_KEY has a literal value that looks secret; use "
        "valueFrom.secretKeyRef",
    ]
    trainer["image"] = "ghcr.io/ddp-mnist/trainer@sha256:" + "f" * 64
    assert g.images_pinned(trainjob) == g.images_by_digest(trainjob) == []


# --- size, with the runtime's defaults ---------------------------------------------------------


def _gpus_per_node(runtime, gpus):
    resources = _node_container(runtime)["resources"]
    resources["limits"]["nvidia.com/gpu"] = resources["requests"]["nvidia.com/gpu"] = str(gpus)


def _budget(objects):
    return [m for o in objects for m in g.job_within_budget(o, max_nodes=16, max_gpus=64, objects=objects)]


def test_a_runtimes_defaults_count_against_the_budget():
    """A TrainJob that sets neither numNodes nor resourcesPerNode runs the runtime's 100 nodes of 8 GPUs."""
    objects, runtime, _ = _objects()
    runtime["spec"]["mlPolicy"]["numNodes"] = 100
    _gpus_per_node(runtime, 8)
    assert _budget([runtime]) == [
        "TrainingRuntime mnist-r1 (what a TrainJob that keeps its defaults gets) runs 100 nodes; this "
        "platform allows at most 16 per job",
        "TrainingRuntime mnist-r1 (what a TrainJob that keeps its defaults gets) uses 800 GPUs; this "
        "platform allows at most 64 per job",
    ]


def test_a_trainjob_counts_what_it_leaves_out_from_its_runtime():
    """The runtime's 4 nodes of 8 GPUs fit; the TrainJob's 12 nodes of the runtime's 8 GPUs do not."""
    objects, runtime, trainjob = _objects()
    _gpus_per_node(runtime, 8)
    del trainjob["spec"]["trainer"]["resourcesPerNode"]
    trainjob["spec"]["trainer"].update(numNodes=12, numProcPerNode=8)
    assert g.job_size(runtime) == (4, 32)
    assert g.job_size(trainjob, objects) == (12, 96)
    assert _budget(objects) == ["TrainJob mnist-r1 uses 96 GPUs; this platform allows at most 64 per job"]


def test_a_trainjob_whose_runtime_is_not_in_the_stack_must_state_its_size():
    """A ClusterTrainingRuntime of another stack cannot be read: the TrainJob states numNodes and its
    GPUs per node, or is refused."""
    objects, runtime, trainjob = _objects()
    trainjob["spec"]["runtimeRef"] = {"name": "torch-distributed"}  # a ClusterTrainingRuntime by default
    assert _budget(objects) == []  # numNodes 4 and 1 GPU per node: counted from the TrainJob alone
    del trainjob["spec"]["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"]
    assert _budget(objects) == [
        "TrainJob mnist-r1 leaves spec.trainer.resourcesPerNode.limits.nvidia.com/gpu to "
        "ClusterTrainingRuntime torch-distributed, which is not among this stack's objects, so its size "
        "cannot be counted; set them on the TrainJob (a GPU limit of 0 for none)"
    ]
    objects.remove(runtime)
    trainjob["spec"]["runtimeRef"] = {"name": "mnist-r1", "kind": "TrainingRuntime"}
    del trainjob["spec"]["trainer"]["numNodes"]
    (message,) = _budget(objects)
    assert message.startswith(
        "TrainJob mnist-r1 leaves spec.trainer.numNodes and spec.trainer.resourcesPerNode"
    )
