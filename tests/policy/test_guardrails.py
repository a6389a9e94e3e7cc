"""The guardrails on what every stack renders (all compliant) and on mutated copies (each reported)."""

from __future__ import annotations

import guardrails as g
import pytest

from tests.infra.conftest import render_config
from tests.policy.conftest import STACKS, job_of, stack_objects, templates_of

RESOURCE_RULES = [
    g.gpu_limits_match_processes,
    g.images_pinned,
    g.pod_security_restricted,
    g.no_secret_literals_in_env,
    g.requests_and_limits_set,
]
# One stack per job kind and device: PyTorchJob on CPU, PyTorchJob on GPUs, Indexed Job on GPUs.
KINDS = ["dev", "gke-gpu", "eks-gpu"]
CANARY = "canary-Token-Value-5e4d3c"


def _container(template):
    (container,) = template["spec"]["containers"]
    return container


@pytest.mark.parametrize("stack", STACKS)
def test_every_rendered_object_passes_every_rule(stack):
    objects = stack_objects(stack)
    for obj in objects:
        for rule in RESOURCE_RULES:
            assert rule(obj) == [], (rule.__name__, obj["kind"])
        assert g.job_within_budget(obj, max_nodes=16, max_gpus=64) == []
    assert g.shared_claims_read_write_many(objects) == []


def test_pod_templates_of_both_job_kinds():
    pytorch = g.pod_templates(job_of(stack_objects("gke-gpu")))
    assert [(t.where, t.pods, t.procs_per_pod) for t in pytorch] == [
        ("PyTorchJob mnist-r1 Master", 1, 1),
        ("PyTorchJob mnist-r1 Worker", 3, 1),
    ]
    (indexed,) = g.pod_templates(job_of(stack_objects("eks-gpu")))
    assert (indexed.where, indexed.pods, indexed.procs_per_pod, indexed.namespace) == (
        "Job mnist-r1",
        2,
        4,
        "ddp-mnist",
    )
    assert g.pod_templates({"apiVersion": "v1", "kind": "Service", "spec": {}}) == []


# --- GPUs --------------------------------------------------------------------------------------


def test_gpu_limit_below_pytorchjob_processes_is_reported():
    job = job_of(stack_objects("gke-gpu"))
    job["spec"]["nprocPerNode"] = "2"
    assert g.gpu_limits_match_processes(job) == [
        f"PyTorchJob mnist-r1 {r}: 1 nvidia.com/gpu per pod for 2 processes per node; "
        "set the GPU limit equal to the processes per node (one GPU per process)"
        for r in ("Master", "Worker")
    ]


def test_gpu_limit_above_indexed_job_processes_is_reported():
    job = job_of(stack_objects("eks-gpu"))
    env = _container(job["spec"]["template"])["env"]
    next(e for e in env if e["name"] == "PET_NPROC_PER_NODE")["value"] = "2"
    (message,) = g.gpu_limits_match_processes(job)
    assert message.startswith("Job mnist-r1: 4 nvidia.com/gpu per pod for 2 processes per node")


def test_gpu_request_without_limit_or_different_from_it_is_reported():
    job = job_of(stack_objects("eks-gpu"))
    resources = _container(job["spec"]["template"])["resources"]
    del resources["limits"]["nvidia.com/gpu"]
    assert g.gpu_limits_match_processes(job) == [
        "Job mnist-r1: container pytorch requests nvidia.com/gpu without a limit"
    ]
    resources["limits"]["nvidia.com/gpu"] = "4"
    resources["requests"]["nvidia.com/gpu"] = "2"
    assert g.gpu_limits_match_processes(job) == [
        "Job mnist-r1: container pytorch requests 2 nvidia.com/gpu but its limit is 4"
    ]


# --- images ------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", KINDS)
@pytest.mark.parametrize(
    ("image", "problem"),
    [
        ("ghcr.io/ddp-mnist/trainer:latest", "uses :latest, which moves"),
        ("ghcr.io/ddp-mnist/trainer", "is untagged (that means :latest)"),
        ("localhost:5000/trainer", "is untagged (that means :latest)"),
        ("localhost:5000/trainer:0.1.0", None),
        ("ghcr.io/ddp-mnist/trainer@sha256:" + "a" * 64, None),
        ("ghcr.io/ddp-mnist/trainer:latest@sha256:" + "b" * 64, None),
    ],
)
def test_unpinned_images_are_reported(stack, image, problem):
    job = job_of(stack_objects(stack))
    for template in templates_of(job):
        _container(template)["image"] = image
    expected = [
        f"{t.where}: container pytorch image {image} {problem}; pin a version tag or an @sha256 digest"
        for t in g.pod_templates(job)
    ]
    assert g.images_pinned(job) == (expected if problem else [])


def test_a_workload_container_by_tag_has_no_digest_and_init_containers_are_not_checked():
    job = job_of(stack_objects("gke-gpu"))
    master, worker = (job["spec"]["pytorchReplicaSpecs"][r]["template"] for r in ("Master", "Worker"))
    for template in (master, worker):
        template["spec"].setdefault("initContainers", []).append({"name": "init", "image": "busybox:1.36"})
        _container(template)["image"] = "ghcr.io/ddp-mnist/trainer@sha256:" + "d" * 64
    assert g.images_by_digest(job) == []
    _container(worker)["image"] = "ghcr.io/ddp-mnist/trainer:0.2.0"
    assert g.images_by_digest(job) == [
        "PyTorchJob mnist-r1 Worker: container pytorch image ghcr.io/ddp-mnist/trainer:0.2.0 has no @sha256 "
        "digest, and a tag can be re-pushed; set the digest a release names (docs/RELEASE.md)"
    ]


# --- shared claims -----------------------------------------------------------------------------


def _claim(objects, name):
    return next(o for o in objects if o["kind"] == "PersistentVolumeClaim" and o["metadata"]["name"] == name)


@pytest.mark.parametrize("stack", KINDS)
def test_written_shared_claim_must_be_read_write_many(stack):
    objects = stack_objects(stack)
    checkpoints = _claim(objects, "ddp-mnist-checkpoints")
    checkpoints["spec"]["accessModes"] = ["ReadWriteOnce"]
    nodes = g.job_size(job_of(objects))[0]
    # The model server mounts it read-only, one pod per replica: the model, or (from S3) the job's
    # SHA256SUMS the export must match.
    readers = sum(
        t.pods
        for o in objects
        if o["kind"] in ("Deployment", "InferenceService")
        for t in g.pod_templates(o)
        if any(
            (v.get("persistentVolumeClaim") or {}).get("claimName") == "ddp-mnist-checkpoints"
            for v in t.spec.get("volumes", [])
        )
    )
    assert g.shared_claims_read_write_many(objects) == [
        (
            checkpoints,
            f"PersistentVolumeClaim ddp-mnist-checkpoints is mounted by {nodes + readers} pods ({nodes} writing) but "
            "its accessModes are ['ReadWriteOnce']; a shared claim must be ReadWriteMany",
        )
    ]


def test_read_only_shared_claim_may_be_read_only_many():
    objects = [o for o in stack_objects("dev") if o["metadata"]["name"] != "ddp-mnist-seed"]  # the writer
    data = _claim(objects, "ddp-mnist-data")
    data["spec"]["accessModes"] = ["ReadOnlyMany"]
    assert g.shared_claims_read_write_many(objects) == []
    data["spec"]["accessModes"] = ["ReadWriteOncePod"]
    ((claim, message),) = g.shared_claims_read_write_many(objects)
    assert claim is data
    assert message.endswith(
        "(0 writing) but its accessModes are ['ReadWriteOncePod']; a shared claim "
        "must be ReadWriteMany or ReadOnlyMany"
    )


def test_claim_of_a_single_pod_is_not_shared():
    objects = [dict(o) for o in render_config({"jobNodes": 1}).objects]
    _claim(objects, "ddp-mnist-checkpoints")["spec"] = {"accessModes": ["ReadWriteOnce"]}
    assert g.shared_claims_read_write_many(objects) == []


# --- Pod Security "restricted" -----------------------------------------------------------------


def _pod_sc(t):
    return t["spec"].setdefault("securityContext", {})


def _container_sc(t):
    return _container(t).setdefault("securityContext", {})


RESTRICTED_MUTATIONS = {  # one per check of "restricted:latest", by the API server's check ID
    "windowsHostProcess": lambda t: _pod_sc(t).update(windowsOptions={"hostProcess": True}),
    "hostNamespaces": lambda t: t["spec"].update(hostPID=True),
    "privileged": lambda t: _container_sc(t).update(privileged=True),
    "capabilities_restricted": lambda t: _container_sc(t)["capabilities"].update(
        add=["NET_BIND_SERVICE", "SYS_ADMIN"]
    ),
    "hostPorts": lambda t: _container(t)["ports"][0].update(hostPort=23456),
    "appArmorProfile": lambda t: t["metadata"]["annotations"].update(
        {"container.apparmor.security.beta.kubernetes.io/pytorch": "unconfined"}
    ),
    "seLinuxOptions": lambda t: _container_sc(t).update(seLinuxOptions={"type": "spc_t"}),
    "procMount": lambda t: _container_sc(t).update(procMount="Unmasked"),
    "seccompProfile_restricted": lambda t: _pod_sc(t).update(seccompProfile={"type": "Unconfined"}),
    "sysctls": lambda t: _pod_sc(t).update(sysctls=[{"name": "kernel.msgmax", "value": "65536"}]),
    "restrictedVolumes": lambda t: t["spec"]["volumes"].append(
        {"name": "n", "nfs": {"server": "s", "path": "/"}}
    ),
    "allowPrivilegeEscalation": lambda t: _container_sc(t).update(allowPrivilegeEscalation=True),
    "runAsNonRoot": lambda t: _container_sc(t).update(runAsNonRoot=False),
    "runAsUser": lambda t: _container_sc(t).update(runAsUser=0),
}


def test_every_restricted_control_has_a_mutation():
    assert set(RESTRICTED_MUTATIONS) == set(g.RESTRICTED_CHECKS)


@pytest.mark.parametrize("stack", KINDS)
@pytest.mark.parametrize("control", sorted(RESTRICTED_MUTATIONS))
def test_each_restricted_control_reports_its_violation(stack, control):
    job = job_of(stack_objects(stack))
    for template in templates_of(job):
        assert g.RESTRICTED_CHECKS[control](template["spec"], template["metadata"]) is None
        RESTRICTED_MUTATIONS[control](template)
        assert g.RESTRICTED_CHECKS[control](template["spec"], template["metadata"]), control
    reported = g.pod_security_restricted(job)
    assert any(m.endswith(f"(restricted: {control})") for m in reported), reported


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda t: _container_sc(t)["capabilities"].update(drop=["NET_RAW"]),
            'unrestricted capabilities (container "pytorch" must set securityContext.capabilities.drop=["ALL"]) '
            "(restricted: capabilities_restricted)",
        ),
        (
            lambda t: _container_sc(t).update(appArmorProfile={"type": "Unconfined"}),
            'forbidden AppArmor profile (container "pytorch" must not set AppArmor profile type to "Unconfined") '
            "(restricted: appArmorProfile)",
        ),
        (
            lambda t: _pod_sc(t).pop("seccompProfile"),
            'seccompProfile (pod or container "pytorch" must set securityContext.seccompProfile.type to '
            '"RuntimeDefault" or "Localhost") (restricted: seccompProfile_restricted)',
        ),
        (
            lambda t: _container_sc(t).update(seLinuxOptions={"user": "system_u"}),
            'seLinuxOptions (container "pytorch" set forbidden securityContext.seLinuxOptions: user may not be set) '
            "(restricted: seLinuxOptions)",
        ),
        (
            lambda t: (_pod_sc(t).pop("runAsNonRoot"), _container_sc(t).pop("runAsNonRoot")),
            'runAsNonRoot != true (pod or container "pytorch" must set securityContext.runAsNonRoot=true) '
            "(restricted: runAsNonRoot)",
        ),
        (
            lambda t: _container_sc(t).pop("allowPrivilegeEscalation"),
            'allowPrivilegeEscalation != false (container "pytorch" must set '
            "securityContext.allowPrivilegeEscalation=false) (restricted: allowPrivilegeEscalation)",
        ),
        (
            lambda t: t["spec"].update(initContainers=[{"name": "init", "image": "busybox:1.36"}]),
            'unrestricted capabilities (containers "init", "pytorch" must set '
            'securityContext.capabilities.drop=["ALL"]) (restricted: capabilities_restricted)',
        ),
    ],
)
def test_restricted_controls_read_every_place_they_cover(mutate, message):
    job = job_of(stack_objects("eks-gpu"))
    mutate(job["spec"]["template"])
    if "initContainers" in job["spec"]["template"]["spec"]:
        _container_sc(job["spec"]["template"])["capabilities"]["drop"] = []
    assert f"Job mnist-r1: {message}" in g.pod_security_restricted(job)


def test_allowed_values_are_not_reported():
    template = job_of(stack_objects("dev"))["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    _container_sc(template)["capabilities"]["add"] = ["NET_BIND_SERVICE"]
    _pod_sc(template)["sysctls"] = [{"name": "net.ipv4.ip_local_port_range", "value": "32768 60999"}]
    _container_sc(template)["seccompProfile"] = {"type": "Localhost", "localhostProfile": "p.json"}
    _container_sc(template)["seLinuxOptions"] = {"type": "container_t", "level": "s0:c1,c2"}
    template["metadata"]["annotations"]["container.apparmor.security.beta.kubernetes.io/pytorch"] = (
        "runtime/default"
    )
    assert g.pod_security_restricted({"apiVersion": "v1", "kind": "PodTemplate", "template": template}) == []


# --- secrets in env ----------------------------------------------------------------------------


@pytest.mark.parametrize("stack", KINDS)
@pytest.mark.parametrize(
    ("name", "value", "reported"),
    [
        ("HF_TOKEN", CANARY, True),
        ("DB_PASSWORD", CANARY, True),
        ("AWS_SECRET_ACCESS_KEY", CANARY, True),
        ("AWS_ACCESS_KEY_ID", "AKIACANARY7Q2XWABCDE", True),
        ("NOTES", "key AKIACANARY7Q2XWABCDE", True),
        ("TLS_KEY_PEM", "-----BEGIN RSA PRIVATE KEY-----\nMII", True),
        ("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/secrets/token", False),
        ("WANDB_PROJECT", "mnist", False),
        ("API_KEY", "", False),
    ],
)
def test_secret_literals_in_env_are_reported_without_their_value(stack, name, value, reported):
    job = job_of(stack_objects(stack))
    for template in templates_of(job):
        _container(template)["env"].append({"name": name, "value": value})
    messages = g.no_secret_literals_in_env(job)
    assert messages == [
        f"{t.where}: container pytorch env {name} has a literal value that looks secret; "
        "use valueFrom.secretKeyRef"
        for t in g.pod_templates(job)
        if reported
    ]
    assert value not in "".join(messages) or not value


def test_secret_references_are_not_reported():
    rendering = render_config(
        {"jobDataSource": "s3", "minioEndpoint": "minio.minio.svc:9000"},
        secrets={"minioAccessKey": "AKIACANARY7Q2XWABCDE", "minioSecretKey": CANARY},
    )
    for obj in rendering.objects:
        assert g.no_secret_literals_in_env(obj) == []


# --- resources and job size --------------------------------------------------------------------


@pytest.mark.parametrize("stack", KINDS)
def test_missing_requests_and_limits_are_reported(stack):
    job = job_of(stack_objects(stack))
    for template in templates_of(job):
        resources = _container(template)["resources"]
        del resources["requests"]["cpu"]
        del resources["limits"]["memory"]
    assert g.requests_and_limits_set(job) == [
        f"{t.where}: container pytorch sets no requests.cpu, limits.memory" for t in g.pod_templates(job)
    ]


def test_cpu_limit_is_required_only_when_configured():
    job = job_of(stack_objects("dev"))
    assert g.requests_and_limits_set(job) == []
    assert g.requests_and_limits_set(job, require_cpu_limit=True) == [
        f"PyTorchJob mnist-r1 {r}: container pytorch sets no limits.cpu" for r in ("Master", "Worker")
    ]
    with_limit = job_of(render_config({"jobCpuLimit": "2"}).objects)
    assert g.requests_and_limits_set(with_limit, require_cpu_limit=True) == []


@pytest.mark.parametrize(
    ("stack", "size"), [("dev", (2, 0)), ("gke-gpu", (4, 4)), ("eks-gpu", (2, 8)), ("aks-gpu", (2, 2))]
)
def test_job_size_counts_nodes_and_gpus(stack, size):
    assert g.job_size(job_of(stack_objects(stack))) == size


def test_jobs_over_budget_are_reported():
    dev, eks = job_of(stack_objects("dev")), job_of(stack_objects("eks-gpu"))
    assert g.job_within_budget(dev, max_nodes=1, max_gpus=0) == [
        "PyTorchJob mnist-r1 runs 2 nodes; this platform allows at most 1 per job"
    ]
    assert g.job_within_budget(eks, max_nodes=2, max_gpus=7) == [
        "Job mnist-r1 uses 8 GPUs; this platform allows at most 7 per job"
    ]
    assert g.job_within_budget(eks, max_nodes=2, max_gpus=8) == []
