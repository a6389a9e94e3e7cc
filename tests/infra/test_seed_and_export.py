"""Data in and model out through the stack: the seed Job, model export, and waits that end on failure."""

from __future__ import annotations

import ipaddress
from typing import Any

import pulumi
import pytest

from infra.program.checks import ConfigError
from infra.review.cluster import cluster_view
from infra.review.manifest import RecordingMocks, run_program
from tests.infra.conftest import BASE, by_kind, pod_templates, render_config, stack_config

# An existing Secret needs a namespace prepared beforehand (createNamespace false).
S3 = {
    "minioEndpoint": "minio.minio.svc:9000",
    "minioTls": False,
    "minioExistingSecret": "minio-creds",
    "createNamespace": False,
}


def _seed(rendering) -> dict[str, Any]:
    (job,) = [j for j in by_kind(rendering, "Job") if j["metadata"]["name"] == "ddp-mnist-seed"]
    return job


def test_the_seed_job_fetches_from_https_mirrors_onto_the_data_volume():
    mirrors = ["https://mirror-a.example/mnist/", "https://mirror-b.example/"]
    rendering = render_config({"seedSource": "https", "seedMirrors": mirrors})
    job = _seed(rendering)
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["python", "-m", "trainer.seed"]
    assert container["args"] == [
        "--to=/data/mnist",
        "--mirror=https://mirror-a.example/mnist/",
        "--mirror=https://mirror-b.example/",
    ]
    assert {m["mountPath"]: m.get("readOnly", False) for m in container["volumeMounts"]} == {
        "/data": False,
        "/tmp": False,
    }
    assert not any(e["name"].startswith("AWS_") for e in container.get("env", []))
    assert pod["automountServiceAccountToken"] is False and pod["restartPolicy"] == "Never"
    assert job["spec"]["backoffLimit"] == 4
    assert job["spec"]["activeDeadlineSeconds"] == 1800  # a stalled source never holds a node for long
    ignore, fail = job["spec"]["podFailurePolicy"]["rules"]
    assert fail["action"] == "FailJob" and fail["onExitCodes"] == {
        "containerName": "seed",
        "operator": "In",
        "values": list(range(1, 128)),
    }
    assert ignore["action"] == "Ignore"
    (policy,) = [p for p in by_kind(rendering, "NetworkPolicy") if p["metadata"]["name"] == "ddp-mnist-seed"]
    assert "ingress" not in policy["spec"] and policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    https = policy["spec"]["egress"][1]
    assert https["ports"] == [{"protocol": "TCP", "port": 443}]
    # The public internet: a mirror's address passes, the cluster's, the VPC's and the metadata's do not.
    for address, allowed in (
        ("52.216.1.1", True),  # an S3 address
        ("2600:1f18::1", True),
        ("169.254.169.254", False),
        ("10.96.0.10", False),
        ("172.20.3.4", False),
        ("192.168.1.1", False),
        ("100.64.0.5", False),
        ("fd00::1", False),
    ):
        assert admits(https["to"], address) == allowed, address
    narrowed = render_config({"seedSource": "https", "seedHttpsEgressCidrs": ["10.20.0.0/16"]})
    (policy,) = [p for p in by_kind(narrowed, "NetworkPolicy") if p["metadata"]["name"] == "ddp-mnist-seed"]
    assert policy["spec"]["egress"][1]["to"] == [{"ipBlock": {"cidr": "10.20.0.0/16"}}]


def admits(peers: list[dict], address: str) -> bool:
    """Whether any ipBlock peer admits `address`, as a network plugin reads cidr and except."""
    ip = ipaddress.ip_address(address)
    for peer in peers:
        block = peer["ipBlock"]
        cidr = ipaddress.ip_network(block["cidr"])
        excepted = any(
            ip in ipaddress.ip_network(e) for e in block.get("except", []) if ip.version == cidr.version
        )
        if ip.version == cidr.version and ip in cidr and not excepted:
            return True
    return False


def test_the_seed_job_can_copy_from_the_stacks_bucket_with_the_stacks_secret():
    job = _seed(render_config({**S3, "seedSource": "s3", "minioBucket": "datasets", "minioPrefix": "mnist"}))
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["--to=/data/mnist", "--from=s3://datasets/mnist"]
    env = {e["name"]: e for e in container["env"]}
    assert env["AWS_ENDPOINT_URL"]["value"] == "http://minio.minio.svc:9000"
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "minio-creds",
        "key": "AWS_SECRET_ACCESS_KEY",
    }


@pytest.mark.parametrize(
    "values", [{"seedSource": "none"}, {**S3, "seedSource": "https", "jobDataSource": "s3"}]
)
def test_no_seed_job_when_nothing_reads_the_data_volume_or_it_is_filled_otherwise(values):
    rendering = render_config(values)
    assert [j["metadata"]["name"] for j in by_kind(rendering, "Job")] == []
    assert "seedOutcome" not in rendering.outputs


@pytest.mark.parametrize("kind", ["pytorchjob", "indexed-job"])
def test_the_training_job_waits_for_the_seed_job_and_both_are_admitted(kind):
    rendering = render_config({"jobKind": kind, "seedSource": "https"})
    (training,) = [
        r
        for r in rendering.registrations
        if r.custom
        and r.type in ("kubernetes:kubeflow.org/v1:PyTorchJob", "kubernetes:batch/v1:Job")
        and r.name == "trainer-job"
    ]
    assert "seed-job" in training.dependencies
    view = cluster_view(rendering.objects, rendering.settings)
    assert view.admission.refusals == []
    assert [p.owner for p in view.admission.pods][0] == "Job/ddp-mnist-seed"


def test_the_seed_job_is_created_for_the_programs_wait_and_replaced_unless_complete():
    annotations = _seed(render_config({"seedSource": "https"}))["metadata"]["annotations"]
    # The program waits for it (infra/program/job/runwatch.py); the provider only for its create and deletion.
    assert annotations == {
        "pulumi.com/waitFor": "jsonpath={.metadata.uid}",
        "pulumi.com/replaceUnready": "true",
    }


def test_model_export_goes_to_the_bucket_under_the_jobs_name():
    rendering = render_config({**S3, "jobModelExport": True, "minioBucket": "models", "minioPrefix": "team"})
    (job,) = by_kind(rendering, "PyTorchJob")
    args = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["args"]
    assert "--export-to=s3://models/team/models/mnist-r1" in args
    assert rendering.outputs["modelExport"] == "s3://models/team/models/mnist-r1"
    plain = render_config({})
    assert not any(
        "--export-to" in a
        for a in by_kind(plain, "PyTorchJob")[0]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"][
            "containers"
        ][0]["args"]
    )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"seedSource": "s3"},
            'config ddp-mnist:minioEndpoint="" is invalid: must be set when seedSource is s3',
        ),
        (
            {"jobModelExport": True, "minioEndpoint": "minio:9000"},
            "config ddp-mnist:minioAccessKey=(unset) is invalid: must be set (with minioSecretKey, both --secret) or minioExistingSecret given when jobModelExport is true",
        ),
        (
            {"seedMirrors": ["http://yann.lecun.com/exdb/mnist/"]},
            """config ddp-mnist:seedMirrors=["http://yann.lecun.com/exdb/mnist/"] is invalid: must be a list of https:// base URLs ('http://yann.lecun.com/exdb/mnist/' is not one)""",
        ),
    ],
)
def test_bad_seed_and_export_config_is_one_line_before_anything_is_registered(values, message):
    mocks = RecordingMocks()
    with pytest.raises(ConfigError) as raised:
        run_program(stack_config({**BASE, **values}), mocks)
    assert str(raised.value) == message
    assert mocks.registrations == []


class _FinishedJobs(RecordingMocks):
    """Mocks whose jobs come back from the wait with a final condition, as the provider returns them."""

    def __init__(self, kind: str, condition: dict[str, str]) -> None:
        super().__init__()
        self.kind, self.condition = kind, condition

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        rid, outputs = super().new_resource(args)
        name = (args.inputs.get("metadata") or {}).get("name")
        if args.typ.endswith(f":{self.kind}") and name == "mnist-r1":
            outputs = {**outputs, "status": {"conditions": [self.condition]}}
        return rid, outputs


@pytest.mark.parametrize(
    ("job_kind", "kind", "done"),
    [("pytorchjob", "PyTorchJob", "Succeeded"), ("indexed-job", "Job", "Complete")],
)
def test_a_failed_job_ends_the_wait_and_fails_pulumi_up_with_one_line(job_kind, kind, done):
    config = stack_config({**BASE, "jobKind": job_kind, "jobWait": True})
    failed = {
        "type": "Failed",
        "status": "True",
        "reason": "BackoffLimitExceeded",
        "message": "Job has reached the specified backoff limit",
    }
    with pytest.raises(pulumi.RunError) as raised:
        run_program(config, _FinishedJobs(kind, failed))
    # A failed first `up` records no stack output: the message carries the command itself.
    assert str(raised.value) == (
        f"{kind} mnist-r1 failed (BackoffLimitExceeded): Job has reached the specified backoff limit; "
        "its pods' logs: kubectl -n ddp-mnist logs -l ddp-mnist.io/job=mnist-r1 --prefix --max-log-requests=3"
    )
    _, outputs = run_program(config, _FinishedJobs(kind, {"type": done, "status": "True"}))
    assert outputs["jobOutcome"] == done


class _SeedEndsWith(RecordingMocks):
    """Mocks whose seed Job comes back from the wait with a final condition."""

    def __init__(self, condition: dict[str, str]) -> None:
        super().__init__()
        self.condition = condition

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        rid, outputs = super().new_resource(args)
        if args.typ == "kubernetes:batch/v1:Job" and args.name == "seed-job":
            outputs = {**outputs, "status": {"conditions": [self.condition]}}
        return rid, outputs


@pytest.mark.parametrize(
    ("job_kind", "job_type"),
    [("pytorchjob", "kubernetes:kubeflow.org/v1:PyTorchJob"), ("indexed-job", "kubernetes:batch/v1:Job")],
)
def test_a_failed_seed_job_stops_pulumi_up_before_the_training_job_is_registered(job_kind, job_type):
    config = stack_config({**BASE, "seedSource": "https", "jobKind": job_kind})
    failed = {"type": "Failed", "status": "True", "reason": "PodFailurePolicy", "message": "exit code 3"}
    mocks = _SeedEndsWith(failed)
    with pytest.raises(pulumi.RunError) as raised:
        run_program(config, mocks)
    assert str(raised.value) == (
        "Job ddp-mnist-seed failed (PodFailurePolicy): exit code 3; its pods' logs: "
        "kubectl -n ddp-mnist logs -l ddp-mnist.io/job=ddp-mnist-seed --prefix --max-log-requests=5"
    )
    registered = {(r.type, r.name) for r in mocks.registrations}
    assert ("kubernetes:batch/v1:Job", "seed-job") in registered
    assert (job_type, "trainer-job") not in registered  # never created on an empty volume

    mocks = _SeedEndsWith({"type": "Complete", "status": "True"})
    _, outputs = run_program(config, mocks)
    assert outputs["seedOutcome"] == "Complete"
    (training,) = [r for r in mocks.registrations if (r.type, r.name) == (job_type, "trainer-job")]
    assert "seed-job" in training.dependencies


def test_a_seed_job_that_is_not_complete_in_the_cluster_runs_again_at_the_next_up():
    """pulumi-kubernetes replaces a Job annotated replaceUnready unless the live Job is Complete, deleting
    it first (it is named): a failed seed runs again once its cause is fixed, without `--replace`."""
    rendering = render_config({"seedSource": "https", "jobKind": "indexed-job"})
    assert _seed(rendering)["metadata"]["annotations"]["pulumi.com/replaceUnready"] == "true"
    (seed,) = [r for r in rendering.registrations if r.name == "seed-job"]
    assert seed.delete_before_replace is True
    # Only the seed: a running training job is never replaced just because it has not finished yet.
    (training,) = [r for r in by_kind(rendering, "Job") if r["metadata"]["name"] == "mnist-r1"]
    assert "pulumi.com/replaceUnready" not in training["metadata"]["annotations"]


def test_on_a_zonal_class_the_seed_runs_on_the_jobs_nodes():
    """A WaitForFirstConsumer volume is created in its first pod's zone: the seed's, on the job's nodes."""
    from tests.infra.conftest import by_kind, render_config

    placement = {
        "jobNodeSelector": ["pool=gpu"],
        "jobGpusPerNode": 1,
        "jobNodeAffinity": ["topology.kubernetes.io/zone In z1,z2"],
    }
    zonal = {"storageProvider": "gke-filestore", "dataVolumeSize": "1Ti", "checkpointVolumeSize": "1Ti"}
    for storage, follows in (({}, False), (zonal, True)):
        rendering = render_config({"seedSource": "https", **storage, **placement})
        (seed,) = [j for j in by_kind(rendering, "Job") if j["metadata"]["name"] == "ddp-mnist-seed"]
        spec = seed["spec"]["template"]["spec"]
        assert ("nodeSelector" in spec) == follows
        if follows:
            assert spec["nodeSelector"] == {"pool": "gpu"}
            assert {t["key"] for t in spec["tolerations"]} == {"nvidia.com/gpu"}
            assert "podAntiAffinity" not in spec["affinity"] and "nodeAffinity" in spec["affinity"]
            assert "nvidia.com/gpu" not in str(spec["containers"][0]["resources"])


def test_with_seed_node_selector_the_seed_runs_on_those_nodes_tolerating_no_gpu_taint():
    placement = {
        "jobNodeSelector": ["pool=gpu"],
        "jobGpusPerNode": 1,
        "jobTolerations": ["sku=gpu:NoSchedule"],
    }
    zonal = {"storageProvider": "gke-filestore", "dataVolumeSize": "1Ti", "checkpointVolumeSize": "1Ti"}
    cpu = ["cloud.google.com/gke-nodepool=default-pool", "topology.kubernetes.io/zone=us-central1-a"]
    rendering = render_config({"seedSource": "https", **zonal, **placement, "seedNodeSelector": cpu})
    spec = _seed(rendering)["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {
        "cloud.google.com/gke-nodepool": "default-pool",
        "topology.kubernetes.io/zone": "us-central1-a",
    }
    assert "tolerations" not in spec and "affinity" not in spec
    with pytest.raises(
        ConfigError, match=r"^config ddp-mnist:seedNodeSelector=.*pool.* is invalid: must be entries"
    ):
        render_config({"seedSource": "https", "seedNodeSelector": ["pool"]})


@pytest.mark.parametrize("job_kind", ["pytorchjob", "indexed-job", "trainjob"])
def test_every_training_pod_tells_the_trainer_its_stack_job_and_image_for_lineage(job_kind):
    """trainer/lineage.py records these in lineage.json; the stack output `lineage` says where it lies."""
    image = "registry.example.com/team/ddp-mnist/trainer:dev@sha256:" + "ab" * 32
    values = {**S3, "jobKind": job_kind, "jobImage": image, "jobModelExport": True, "minioBucket": "models"}
    if job_kind == "trainjob":
        values |= {"trainerPresent": True, "kubernetesVersion": "1.31"}
    rendering = render_config(values)
    for template in pod_templates(rendering):
        (container,) = template["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        stack = template["metadata"]["labels"]["app.kubernetes.io/instance"]
        assert (env["DDP_MNIST_STACK"], env["DDP_MNIST_JOB"], env["DDP_MNIST_IMAGE"]) == (
            stack,
            "mnist-r1",
            image,
        )
    outputs = rendering.outputs
    assert outputs["lineage"] == {
        "claim": outputs["checkpointClaim"],
        "path": "/checkpoints/mnist-r1/lineage.json",
        "s3": "s3://models/mnist/models/mnist-r1/lineage.json",
    }
    assert render_config({}).outputs["lineage"]["s3"] is None  # no export, the claim alone
