"""What fast networking adds to the training pods (jobExtraResources, jobExtraEnv, jobPodAnnotations,
jobHostPathMounts, jobAddCapabilities): the rendered pods of every job kind, the namespace's Pod Security
level judging them (the offline admission model, infra/review/admission), and the one-line refusals."""

from __future__ import annotations

import pytest

from infra.program.checks import ConfigError
from infra.review.cluster import cluster_view
from tests.infra.conftest import BASE, by_kind, pod_templates, render_config
from tests.infra.test_platform_stack import settings_of as _settings_of

GPU = {"jobGpusPerNode": 4, "jobProcsPerNode": 4}
EFA = {
    **GPU,
    "jobExtraResources": ["vpc.amazonaws.com/efa=4", "hugepages-2Mi=5120Mi"],
    "jobExtraEnv": ["FI_PROVIDER=efa", "FI_EFA_USE_DEVICE_RDMA=1", "NCCL_DEBUG=INFO"],
}
INFINIBAND = {
    **GPU,
    "jobExtraResources": ["rdma/shared_ib=1"],
    "jobAddCapabilities": ["IPC_LOCK"],
    "jobExtraEnv": ["NCCL_IB_HCA=mlx5"],
}


def settings_of(values: dict) -> object:
    return _settings_of({**BASE, **values})


def _container(template: dict) -> dict:
    (container,) = template["spec"]["containers"]
    return container


@pytest.mark.parametrize("kind", ["pytorchjob", "indexed-job", "trainjob"])
def test_efa_reaches_every_job_kinds_pods_under_restricted(kind: str) -> None:
    values = {**EFA, "jobKind": kind}
    if kind == "trainjob":
        values |= {"trainerInstall": True, "operatorInstall": False, "operatorSmokeCheck": False}
    rendering = render_config(values)
    for template in pod_templates(rendering):
        container = _container(template)
        if kind != "trainjob":  # a TrainJob's resources are its resourcesPerNode
            assert container["resources"]["limits"]["vpc.amazonaws.com/efa"] == "4"
            assert container["resources"]["requests"]["vpc.amazonaws.com/efa"] == "4"
            assert container["resources"]["limits"]["hugepages-2Mi"] == "5120Mi"
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert (env["FI_PROVIDER"], env["FI_EFA_USE_DEVICE_RDMA"], env["NCCL_DEBUG"]) == ("efa", "1", "INFO")
        assert [e["name"] for e in container["env"]].count("NCCL_DEBUG") == 1  # replaced, not doubled
    if kind == "trainjob":
        (trainjob,) = by_kind(rendering, "TrainJob")
        assert trainjob["spec"]["trainer"]["resourcesPerNode"]["limits"]["vpc.amazonaws.com/efa"] == "4"
    view = cluster_view(rendering.objects, rendering.settings)
    assert view.admission.refusals == []
    assert {view.level_of(p) for p in view.admission.pods} == {"restricted"}


def test_gke_network_annotations_reach_the_pods_beside_the_bundles_own():
    annotation = 'networking.gke.io/interfaces=[{"interfaceName":"eth0","network":"default"}]'
    (template, *_) = pod_templates(
        render_config({"jobPodAnnotations": ["networking.gke.io/default-interface=eth0", annotation]})
    )
    assert template["metadata"]["annotations"] == {
        "sidecar.istio.io/inject": "false",
        "networking.gke.io/default-interface": "eth0",
        "networking.gke.io/interfaces": '[{"interfaceName":"eth0","network":"default"}]',
    }


def test_infiniband_needs_a_privileged_namespace_and_is_refused_in_one_line_otherwise():
    for level in ("restricted", "baseline"):
        with pytest.raises(ConfigError) as refused:
            settings_of({**INFINIBAND, "namespacePodSecurity": level})
        assert str(refused.value).startswith(
            f'config ddp-mnist:jobAddCapabilities=["IPC_LOCK"] is invalid: must be capabilities Pod Security {level} allows'
        ), str(refused.value)
        assert str(refused.value).endswith("IPC_LOCK needs namespacePodSecurity privileged")
    rendering = render_config({**INFINIBAND, "namespacePodSecurity": "privileged"})
    for template in pod_templates(rendering):
        container = _container(template)
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
        assert container["resources"]["limits"]["rdma/shared_ib"] == "1"
    view = cluster_view(rendering.objects, rendering.settings)
    assert view.admission.refusals == []
    # The model finds what makes them privileged: a capability outside baseline's set.
    trainer = [p for p in view.admission.pods if "seed" not in p.owner]
    assert {view.level_of(p) for p in trainer} == {"privileged"}


def test_host_paths_mount_only_in_a_privileged_namespace_and_never_over_the_bundles_volumes():
    mounts = [
        "/home/kubernetes/bin/nvidia:/usr/local/nvidia:ro",
        "/home/kubernetes/bin/gib:/usr/local/gib:ro",
    ]
    with pytest.raises(
        ConfigError,
        match=r"jobHostPathMounts=.* is invalid: must be empty when namespacePodSecurity is restricted: Pod Security baseline and restricted forbid hostPath volumes",
    ):
        settings_of({**GPU, "jobHostPathMounts": mounts})
    rendering = render_config({**GPU, "jobHostPathMounts": mounts, "namespacePodSecurity": "privileged"})
    (template, *_) = pod_templates(rendering)
    host = [v for v in template["spec"]["volumes"] if "hostPath" in v]
    assert host == [
        {"name": "host-0", "hostPath": {"path": "/home/kubernetes/bin/nvidia"}},
        {"name": "host-1", "hostPath": {"path": "/home/kubernetes/bin/gib"}},
    ]
    assert {"name": "host-1", "mountPath": "/usr/local/gib", "readOnly": True} in _container(template)[
        "volumeMounts"
    ]
    with pytest.raises(
        ConfigError, match=r"must be mount paths apart from the container's own volumes .*: /checkpoints/x"
    ):
        settings_of({"jobHostPathMounts": ["/mnt:/checkpoints/x"], "namespacePodSecurity": "privileged"})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"jobExtraEnv": ["MASTER_ADDR=x"]},
            "must be variables the bundle does not set itself: MASTER_ADDR is set from other keys",
        ),
        (
            {"jobExtraEnv": ["HF_TOKEN=x"]},
            "no credentials (HF_TOKEN): reference a Secret instead of a literal",
        ),
        ({"jobExtraEnv": ["1X=y"]}, "'NAME=value' entries with a C identifier as NAME"),
        ({"jobExtraResources": ["nvidia.com/gpu=1"]}, "not nvidia.com/gpu: jobGpusPerNode sets it"),
        ({"jobExtraResources": ["efa=1"]}, "naming a domain-prefixed extended resource or hugepages-<size>"),
        ({"jobExtraResources": ["vpc.amazonaws.com/efa=four"]}, "quantity"),
        ({"jobHostPathMounts": ["relative:/x"]}, "absolute paths"),
        ({"jobAddCapabilities": ["CAP_IPC_LOCK"]}, "capability names without CAP_"),
    ],
)
def test_bad_entries_are_refused_naming_the_key(values: dict, message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        settings_of(values)
    assert f"ddp-mnist:{next(iter(values))}=" in str(refused.value)
    assert message in str(refused.value), str(refused.value)


@pytest.mark.parametrize("kind", ["pytorchjob", "indexed-job", "trainjob"])
def test_jobextraenv_refuses_every_variable_the_bundle_derives_and_only_those(kind: str) -> None:
    """BUNDLE_ENV is the list jobExtraEnv checks against: it must name each variable the bundle itself
    sets in a training container of any kind (NCCL_DEBUG alone may be replaced)."""
    from infra.program.checks.interconnect import BUNDLE_ENV

    values = {**GPU, "jobKind": kind, "minioEndpoint": "minio.example:9000"}
    if kind == "trainjob":
        values |= {"trainerInstall": True, "operatorInstall": False, "operatorSmokeCheck": False}
    rendering = render_config(values, secrets={"minioAccessKey": "AKIAEXAMPLE", "minioSecretKey": "x"})
    for template in pod_templates(rendering):
        names = {e["name"] for e in _container(template)["env"]} - {"NCCL_DEBUG"}
        assert names <= BUNDLE_ENV, names - BUNDLE_ENV


def test_the_preview_check_and_the_admission_model_allow_the_same_baseline_capabilities() -> None:
    from infra.program.checks.interconnect import BASELINE_CAPABILITIES
    from infra.review.admission.podsecurity.baseline import DEFAULT_CAPABILITIES

    assert set(DEFAULT_CAPABILITIES) == set(BASELINE_CAPABILITIES)
