"""The prerequisites stack (`stackRole: prerequisites`): what it creates, what it tells the job stacks,
that its keys stay secret, and its config errors."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from infra.program.checks import ConfigError
from infra.program.settings import PROJECT
from infra.program.settings.prerequisites import (
    MINIO_IMAGE,
    NFS_CSI_CHART,
    NFS_CSI_CHART_SHA256,
    NFS_CSI_CHART_URL,
    NFS_SERVER_IMAGE,
)
from infra.review.manifest import REDACTED, RecordingMocks, render, run_program, to_yaml
from infra.stackconfig import ROOT, load_stack
from tests.infra.conftest import BASE, shipped, stack_config

CANARY_ID = "AKIACANARY7Q2XW"
CANARY_KEY = "canary-Secret-Value-9f8e7d"
KEYS = {"minioAccessKey": CANARY_ID, "minioSecretKey": CANARY_KEY}
PREREQUISITES: dict[str, Any] = {"stackRole": "prerequisites", "jobImage": "registry.example/trainer:1.2.3"}
SECRET_MARKER = "4dabf18193072939515e22adb298388d"  # Pulumi's marker of a serialized secret


def _render(values: dict[str, Any] | None = None, mocks: RecordingMocks | None = None):
    return render(stack_config({**PREREQUISITES, **(values or {})}, KEYS), mocks)


def _named(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (obj,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def _container(workload: dict[str, Any]) -> dict[str, Any]:
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    return container


def test_the_nfs_server_is_privileged_alone_in_a_namespace_that_says_so():
    objects = _render().objects
    namespace = _named(objects, "Namespace", "nfs-system")
    labels = namespace["metadata"]["labels"]
    assert {labels[f"pod-security.kubernetes.io/{m}"] for m in ("enforce", "warn", "audit")} == {"privileged"}
    assert "in-kernel NFS server" in namespace["metadata"]["annotations"][f"{PROJECT}.io/pod-security-reason"]
    server = _named(objects, "Deployment", "nfs-server")
    assert server["metadata"]["namespace"] == "nfs-system"
    assert server["spec"]["strategy"] == {"type": "Recreate"}
    container = _container(server)
    assert container["image"] == NFS_SERVER_IMAGE and "@sha256:" in NFS_SERVER_IMAGE
    assert container["securityContext"] == {"privileged": True}
    assert container["env"] == [{"name": "SHARED_DIRECTORY", "value": "/exports"}]
    service = _named(objects, "Service", "nfs-server")
    assert [(p["port"], p["protocol"]) for p in service["spec"]["ports"]] == [(2049, "TCP"), (111, "UDP")]
    assert service["spec"]["selector"].items() <= server["spec"]["template"]["metadata"]["labels"].items()
    # Nothing else runs in nfs-system: every other workload is in minio.
    workloads = [o for o in objects if o["kind"] in ("Deployment", "Job")]
    assert {o["metadata"]["namespace"] for o in workloads if o is not server} == {"minio"}


def test_minio_and_the_fill_job_meet_restricted_and_read_the_keys_from_the_secret():
    objects = _render().objects
    labels = _named(objects, "Namespace", "minio")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    minio = _named(objects, "Deployment", "minio")
    container = _container(minio)
    assert container["image"] == MINIO_IMAGE
    assert container["env"] == [
        {"name": name, "valueFrom": {"secretKeyRef": {"name": "minio-root", "key": key}}}
        for name, key in (
            ("MINIO_ROOT_USER", "AWS_ACCESS_KEY_ID"),
            ("MINIO_ROOT_PASSWORD", "AWS_SECRET_ACCESS_KEY"),
        )
    ]
    assert _named(objects, "Service", "minio")["spec"]["ports"] == [
        {"name": "s3", "port": 9000, "protocol": "TCP"}
    ]
    fill = _named(objects, "Job", "minio-mnist")
    container = _container(fill)
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["AWS_ENDPOINT_URL"] == "http://minio.minio.svc.cluster.local:9000"
    assert env["AWS_ACCESS_KEY_ID"] == {"secretKeyRef": {"name": "minio-root", "key": "AWS_ACCESS_KEY_ID"}}
    assert env["AWS_SECRET_ACCESS_KEY"] == {
        "secretKeyRef": {"name": "minio-root", "key": "AWS_SECRET_ACCESS_KEY"}
    }
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_the_fill_job_seeds_the_bucket_with_the_trainer_image_once_minio_is_ready():
    mocks = RecordingMocks()
    values = {
        "minioBucket": "datasets",
        "minioPrefix": "mnist/v1",
        "seedMirrors": ["https://mirror.example/mnist/", "https://other.example/m/"],
        "jobImagePullPolicy": "Always",
    }
    objects = _render(values, mocks).objects
    container = _container(_named(objects, "Job", "minio-mnist"))
    assert container["image"] == "registry.example/trainer:1.2.3"
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"  # the watch shows its cause
    assert container["imagePullPolicy"] == "Always"
    assert [*container["command"], *container["args"]] == [
        "python",
        "-m",
        "trainer.seed",
        "--to=s3://datasets/mnist/v1",
        "--mirror=https://mirror.example/mnist/",
        "--mirror=https://other.example/m/",
    ]
    (job,) = [r for r in mocks.registrations if r.type == "kubernetes:batch/v1:Job"]
    assert set(job.dependencies) >= {"minio-deployment", "minio-service", "minio-secret"}
    annotations = job.inputs["metadata"]["annotations"]
    assert annotations["pulumi.com/replaceUnready"] == "true"  # a failed fill runs again at the next up


def test_the_outputs_are_what_the_dev_stack_names_and_no_secret():
    rendering = _render()
    assert {k: v for k, v in rendering.outputs.items() if k != "bucketFillOutcome"} == {
        "stackRole": "prerequisites",
        "nfsServer": "nfs-server.nfs-system.svc.cluster.local",
        "nfsShare": "/",
        "storageProvisioner": "nfs.csi.k8s.io",
        "nfsCsiChart": NFS_CSI_CHART,
        "minioEndpoint": "minio.minio.svc.cluster.local:9000",
        "minioTls": False,
        "mnistBucket": "s3://mnist/mnist",
    }
    shipped_outputs = shipped("dev-prereqs").outputs
    dev = load_stack("dev").values
    for key in ("nfsServer", "nfsShare", "minioEndpoint"):
        assert dev[f"{PROJECT}:{key}"] == shipped_outputs[key], key
    assert dev[f"{PROJECT}:storageProvider"] == "nfs-csi"
    assert dev[f"{PROJECT}:minioTls"] == "false"
    bucket, prefix = dev[f"{PROJECT}:minioBucket"], dev[f"{PROJECT}:minioPrefix"]
    assert shipped_outputs["mnistBucket"] == f"s3://{bucket}/{prefix}"


def test_with_storage_none_the_stack_installs_minio_and_its_mnist_alone():
    """For a cluster with a ReadWriteMany class of its own: no NFS server, no CSI driver, no NFS outputs."""
    rendering = _render({"prerequisitesStorage": "none"})
    kinds = {(o["kind"], o["metadata"]["name"]) for o in rendering.objects}
    assert ("Deployment", "minio") in kinds and ("Job", "minio-mnist") in kinds
    assert not [name for kind, name in kinds if "nfs" in name]
    assert [r for r in rendering.registrations if r.type == "kubernetes:helm.sh/v4:Chart"] == []
    assert {k for k in rendering.outputs if k != "bucketFillOutcome"} == {
        "stackRole",
        "minioEndpoint",
        "minioTls",
        "mnistBucket",
    }


def test_the_keys_never_leave_the_secret_and_stay_pulumi_secrets():
    mocks = RecordingMocks()
    rendering = _render(mocks=mocks)
    text = to_yaml(rendering) + repr(rendering.outputs) + repr(rendering.objects)
    assert CANARY_ID not in text and CANARY_KEY not in text
    (secret,) = [r for r in mocks.registrations if r.type == "kubernetes:core/v1:Secret"]
    assert SECRET_MARKER in secret.inputs["stringData"]
    assert secret.inputs["stringData"]["value"] == {
        "AWS_ACCESS_KEY_ID": CANARY_ID,
        "AWS_SECRET_ACCESS_KEY": CANARY_KEY,
    }
    assert _named(rendering.objects, "Secret", "minio-root")["stringData"] == {
        "AWS_ACCESS_KEY_ID": REDACTED,
        "AWS_SECRET_ACCESS_KEY": REDACTED,
    }
    others = repr([r.inputs for r in mocks.registrations if r is not secret])
    assert CANARY_ID not in others and CANARY_KEY not in others


def test_csi_driver_nfs_comes_from_its_chart_at_the_pinned_tag_or_a_mirror():
    def chart(values: dict[str, Any] | None = None) -> dict[str, Any]:
        (reg,) = [r for r in _render(values).registrations if r.type == "kubernetes:helm.sh/v4:Chart"]
        return reg.inputs

    upstream = chart()
    # Upstream's archive, vendored and checked: nothing is fetched at up.
    assert (
        upstream["chart"] == str(ROOT / NFS_CSI_CHART) == str(ROOT / "infra/charts/csi-driver-nfs-4.11.0.tgz")
    )
    digest = hashlib.sha256((ROOT / NFS_CSI_CHART).read_bytes()).hexdigest()
    assert (
        digest == NFS_CSI_CHART_SHA256 == "e44bcd7f6934fe6cb07194a1b6e780ca4a428c5d37330a9db2bfa7a9300c8da5"
    )
    assert NFS_CSI_CHART_URL.endswith("/csi-driver-nfs/v4.11.0/charts/v4.11.0/csi-driver-nfs-4.11.0.tgz")
    assert upstream["namespace"] == "kube-system"
    assert upstream["values"] == {
        "controller": {"enableSnapshotter": False},
        "driver": {"mountPermissions": "0777"},
    }
    # A mirror: a path relative to the project root reaches the provider absolute; URLs as given.
    assert chart({"nfsCsiChart": "./mirror/csi-driver-nfs"})["chart"] == str(
        ROOT / "mirror" / "csi-driver-nfs"
    )
    assert chart({"nfsCsiChart": "/srv/charts/csi-driver-nfs-4.11.0.tgz"})["chart"] == (
        "/srv/charts/csi-driver-nfs-4.11.0.tgz"
    )
    mirror = "https://charts.example/csi-driver-nfs-4.11.0.tgz"
    assert chart({"nfsCsiChart": mirror})["chart"] == mirror
    assert "Helm chart" in to_yaml(_render({"nfsCsiChart": mirror})).split("---", 1)[0]


BAD = [
    (
        {},
        {},
        "config ddp-mnist:minioAccessKey=(unset) is invalid: must be set (with minioSecretKey, both "
        "--secret) when stackRole is prerequisites: they become MinIO's root user and password, the same "
        "pair the job stacks set",
    ),
    (
        {"nfsServer": "nfs.example.internal"},
        KEYS,
        "config ddp-mnist:nfsServer=nfs.example.internal is invalid: must be "
        "nfs-server.nfs-system.svc.cluster.local or empty when stackRole is prerequisites (the server it "
        "creates)",
    ),
    (
        {"nfsShare": "/exports"},
        KEYS,
        "config ddp-mnist:nfsShare=/exports is invalid: must be / when stackRole is prerequisites: its NFS "
        "server exports its directory as the NFSv4 root (fsid=0)",
    ),
    (
        {"minioEndpoint": "minio.minio.svc:9000"},
        KEYS,
        "config ddp-mnist:minioEndpoint=minio.minio.svc:9000 is invalid: must be "
        "minio.minio.svc.cluster.local:9000 or empty when stackRole is prerequisites (the server it creates)",
    ),
    (
        {"minioEndpoint": "minio.minio.svc.cluster.local:9000"},
        KEYS,
        "config ddp-mnist:minioTls=true is invalid: must be false when stackRole is prerequisites: its MinIO "
        "serves plain HTTP",
    ),
    (
        {"nfsCsiChart": "http://charts.example/csi-driver-nfs-4.11.0.tgz"},
        KEYS,
        "config ddp-mnist:nfsCsiChart=http://charts.example/csi-driver-nfs-4.11.0.tgz is invalid: must be a "
        "local chart directory or .tgz (/..., ./..., ../...) or an https URL of the chart archive (empty: "
        "upstream's chart)",
    ),
    (
        {},
        {"minioAccessKey": "ab", "minioSecretKey": CANARY_KEY},
        "config ddp-mnist:minioAccessKey=[secret] is invalid: must be at least 3 characters when stackRole "
        "is prerequisites: it becomes MinIO's root user, and MinIO refuses to start with a shorter one",
    ),
    (
        {},
        {"minioAccessKey": CANARY_ID, "minioSecretKey": "s3cr3t7"},
        "config ddp-mnist:minioSecretKey=[secret] is invalid: must be at least 8 characters when stackRole "
        "is prerequisites: it becomes MinIO's root password, and MinIO refuses to start with a shorter one",
    ),
    (
        {"prerequisitesStorage": "efs"},
        KEYS,
        "config ddp-mnist:prerequisitesStorage=efs is invalid: must be one of 'nfs' or 'none'",
    ),
    (
        {"nfsServerImage": "itsthenetwork/nfs-server-alpine:latest"},
        KEYS,
        "config ddp-mnist:nfsServerImage=itsthenetwork/nfs-server-alpine:latest is invalid: must be a pinned "
        "image: ':latest' moves; use a version tag or an @sha256 digest",
    ),
    (
        {"minioImage": "quay.io/minio/minio"},
        KEYS,
        "config ddp-mnist:minioImage=quay.io/minio/minio is invalid: must be a pinned image: add a version "
        "tag or an @sha256 digest (untagged means latest)",
    ),
]


@pytest.mark.parametrize(("values", "secrets", "message"), BAD, ids=[m.split("=")[0][18:] for *_, m in BAD])
def test_bad_prerequisites_config_fails_before_registering_anything(values, secrets, message):
    mocks = RecordingMocks()
    with pytest.raises(ConfigError) as raised:
        run_program(stack_config({**PREREQUISITES, **values}, secrets), mocks)
    assert str(raised.value) == message
    assert mocks.registrations == []


def test_an_existing_secret_is_refused_for_minios_root_keys():
    config = stack_config({**PREREQUISITES, "minioExistingSecret": "minio-creds", "createNamespace": False})
    with pytest.raises(ConfigError) as raised:
        run_program(config, RecordingMocks())
    assert str(raised.value).startswith("config ddp-mnist:minioAccessKey=(unset) is invalid")
    with pytest.raises(ConfigError) as raised:
        run_program(
            stack_config(
                {**PREREQUISITES, "minioExistingSecret": "minio-creds", "createNamespace": False}, KEYS
            ),
            RecordingMocks(),
        )
    assert str(raised.value) == (
        "config ddp-mnist:minioExistingSecret=minio-creds is invalid: must be empty when stackRole is "
        "prerequisites (MinIO's root keys are minioAccessKey and minioSecretKey)"
    )


def test_minios_shortest_root_keys_pass_and_job_stacks_keep_theirs():
    """MinIO's minimums are bytes (internal/auth/credentials.go counts len() of a Go string): 3 and 8
    pass, a 2-character user made of 4 bytes passes too; a job stack's key pair, for an S3 store this
    project does not run, is not held to MinIO's rule."""
    for keys in (
        {"minioAccessKey": "abc", "minioSecretKey": "12345678"},
        {"minioAccessKey": "éé", "minioSecretKey": "123456é"},
    ):
        assert render(stack_config(PREREQUISITES, keys)).objects
    assert render(stack_config(BASE, {"minioAccessKey": "a", "minioSecretKey": "b"})).objects


def test_a_fill_job_that_cannot_pull_its_image_fails_up_with_one_line_naming_the_pod():
    """The bucket fill is awaited by the program's watch, as a job stack's seed is: a fill pod stuck in
    ImagePullBackOff past the placement bound fails `pulumi up` at once, not when the wait runs out."""
    from datetime import UTC, datetime, timedelta

    import pulumi

    from infra.program.job.runwatch import RunWatch
    from tests.infra.test_runwatch import FakeCluster, job

    now = datetime(2026, 11, 27, 12, 0, 0, tzinfo=UTC)
    scheduled = (now - timedelta(seconds=301)).strftime("%Y-%m-%dT%H:%M:%SZ")
    waiting = {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "ddp-mnist/trainer:dev"'}
    pod = {
        "metadata": {"name": "minio-mnist-x7k2p", "creationTimestamp": scheduled},
        "spec": {},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled}],
            "containerStatuses": [{"name": "fill", "state": {"waiting": waiting}}],
        },
    }
    cluster = FakeCluster([job("Job")], [pod])
    watch = RunWatch(cluster, True, 300, poll_seconds=0, log=lambda m, r: None, wall=lambda: now)
    with pytest.raises(pulumi.RunError) as raised:
        run_program(stack_config(PREREQUISITES, KEYS), RecordingMocks(), watch=watch)
    assert str(raised.value) == (
        "Pod minio/minio-mnist-x7k2p: container fill cannot start after 301s (ImagePullBackOff): Back-off "
        'pulling image "ddp-mnist/trainer:dev"; more: kubectl -n minio describe pod minio-mnist-x7k2p '
        "(jobPlacementTimeoutSeconds=300; the Job is left in place: fix the cause and run `pulumi up` again "
        "to wait for it)"
    )
    assert "/apis/batch/v1/namespaces/minio/jobs/minio-mnist" in cluster.paths
    assert any(p.startswith("/api/v1/namespaces/minio/pods?") and "minio-mnist" in p for p in cluster.paths)


def test_a_vendored_chart_changed_in_place_stops_the_preview_with_one_line(tmp_path, monkeypatch):
    from infra.program.common import vendored

    changed = tmp_path / NFS_CSI_CHART
    changed.parent.mkdir(parents=True)
    changed.write_bytes((ROOT / NFS_CSI_CHART).read_bytes() + b"\0")
    monkeypatch.setattr(vendored, "PROJECT_ROOT", tmp_path)
    with pytest.raises(vendored.ManifestMismatch) as refused:
        vendored.nfs_csi_chart()
    digest = hashlib.sha256(changed.read_bytes()).hexdigest()
    assert str(refused.value) == (
        f"vendored csi-driver-nfs chart v4.11.0: {NFS_CSI_CHART}: sha256 {digest}, not "
        f"upstream's {NFS_CSI_CHART_SHA256}; restore it (git checkout -- {NFS_CSI_CHART})"
    )


def _policies(rendering) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o["spec"]
        for o in rendering.objects
        if o["kind"] == "NetworkPolicy"
    }


def test_each_prerequisite_namespace_denies_by_default_and_each_pod_gets_what_it_serves_and_reaches():
    from tests.infra.test_isolation import DNS_RULE, PUBLIC

    rendering = _render()
    policies = _policies(rendering)
    assert set(policies) == {
        ("minio", "ddp-mnist-default-deny"),
        ("minio", "minio"),
        ("minio", "minio-mnist"),
        ("nfs-system", "ddp-mnist-default-deny"),
        ("nfs-system", "nfs-server"),
    }
    for namespace in ("minio", "nfs-system"):
        assert policies[(namespace, "ddp-mnist-default-deny")] == {
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
        }
    minio = policies[("minio", "minio")]
    assert (
        minio["podSelector"]["matchLabels"]
        == _named(rendering.objects, "Deployment", "minio")["spec"]["selector"]["matchLabels"]
    )
    assert minio["ingress"] == [
        {"from": [{"namespaceSelector": {}}], "ports": [{"protocol": "TCP", "port": 9000}]}
    ]
    assert minio["egress"] == [DNS_RULE]
    fill = policies[("minio", "minio-mnist")]
    assert fill["podSelector"] == {"matchLabels": {"ddp-mnist.io/job": "minio-mnist"}}
    assert "ingress" not in fill and fill["policyTypes"] == ["Ingress", "Egress"]
    dns, store, https = fill["egress"]
    assert dns == DNS_RULE
    assert store == {
        "to": [{"podSelector": minio["podSelector"]}],
        "ports": [{"protocol": "TCP", "port": 9000}],
    }
    assert https == {"to": PUBLIC, "ports": [{"protocol": "TCP", "port": 443}]}
    nfs = policies[("nfs-system", "nfs-server")]
    assert "egress" not in nfs and nfs["policyTypes"] == ["Ingress", "Egress"]
    assert nfs["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 2049}, {"protocol": "UDP", "port": 111}]
    # The fill starts once its policy is in place (the namespace's default deny would isolate it).
    regs = {r.name: r for r in rendering.registrations}
    assert {"minio-minio-mnist-policy", "minio-default-deny"} <= set(regs["mnist-bucket-job"].dependencies)


def test_a_mirror_inside_the_network_is_reached_at_its_declared_cidr_and_its_port():
    """Found on the real node: a mirror on 8443 was refused by a rule for 443 alone, and the fill failed."""
    values = {
        "seedHttpsEgressCidrs": ["10.1.2.3/32"],
        "seedMirrors": ["https://10.1.2.3:8443/", "https://mirror.example/mnist/"],
    }
    https = _policies(_render(values))[("minio", "minio-mnist")]["egress"][2]
    assert https == {
        "to": [{"ipBlock": {"cidr": "10.1.2.3/32"}}],
        "ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 8443}],
    }
