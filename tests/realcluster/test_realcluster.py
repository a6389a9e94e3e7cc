"""The local cluster tier's own logic, without building or starting anything (`make e2e-local` runs it
for real): fake nodes that the shipped stacks' job pods fit, KWOK stages, the build cache's key, the
volume provisioner's PersistentVolumes, the operator pod's downward API, and the CLI's exit codes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from infra.localcluster import build, fleet
from infra.localcluster.__main__ import EXIT_NOT_RUNNING, main
from infra.localcluster.components import egress_config as _egress_config
from infra.localcluster.operators import (
    MANAGER_CONFIG,
    STAND_INS,
    _manager_config,
    _training_operator_flags,
)
from infra.localcluster.parts import PARTS, PROVIDER_MAIN, Part
from infra.localcluster.standins import SERVICE_ACCOUNT, LocalPod, in_own_mounts, local_ports
from infra.localcluster.standins import field_value as _field
from infra.localcluster.standins import target_port as _target
from infra.localcluster.supervisor import _volume
from infra.program.common import yamlio
from infra.program.common.config import settings_from_raw
from infra.program.common.scheduling import node_selector, tolerations
from infra.program.settings import parse_quantity
from infra.stackconfig import load_stack

SHIPPED_JOB_STACKS = ["dev", "gke-gpu", "gke-trainjob", "eks-gpu", "aks-gpu"]


def _settings(stack: str):
    config = load_stack(stack)
    return settings_from_raw(config.values, set(config.secret_keys))[0]


def _fits(node: dict, settings) -> bool:
    labels = node["metadata"]["labels"]
    if any(labels.get(k) != v for k, v in node_selector(settings.job_node_selector).items()):
        return False
    tolerated = tolerations(settings.job_tolerations)
    for taint in node["spec"].get("taints", []):
        if not any(
            t["key"] == taint["key"]
            and t.get("effect") in (None, taint["effect"])
            and (t.get("operator") == "Exists" or t.get("value", "") == taint.get("value", ""))
            for t in tolerated
        ):
            return False
    capacity = node["status"]["capacity"]
    return (
        int(capacity.get("nvidia.com/gpu", "0")) >= settings.job_gpus_per_node
        and parse_quantity(capacity["cpu"]) >= parse_quantity(settings.job_cpu_request)
        and parse_quantity(capacity["memory"]) >= parse_quantity(settings.job_memory_request)
    )


@pytest.mark.parametrize("stack", SHIPPED_JOB_STACKS)
def test_every_shipped_stacks_job_pods_fit_a_fake_node_pool_with_room_for_every_node(stack):
    settings = _settings(stack)
    fitting = [n for n in fleet.nodes() if _fits(n, settings)]
    assert len(fitting) >= settings.job_nodes, (stack, [n["metadata"]["name"] for n in fitting])


def test_gpu_pools_are_tainted_so_cpu_pods_stay_off_them():
    settings = _settings("dev")
    fitting = {n["metadata"]["labels"]["ddp-mnist.local/pool"] for n in fleet.nodes() if _fits(n, settings)}
    assert fitting == {"cpu"}


def test_every_fake_node_is_managed_by_kwok_and_unique():
    names = [n["metadata"]["name"] for n in fleet.nodes()]
    assert len(names) == len(set(names))
    assert all(n["metadata"]["annotations"][fleet.FAKE_NODE_ANNOTATION] == "fake" for n in fleet.nodes())


def test_a_failure_stage_outweighs_the_completion_stage_for_its_namespace_and_labels_only():
    complete = fleet.job_pod_complete()
    failure = fleet.failure_stage("f", "ns1", {"job-name": "seed"}, 3)
    assert complete["spec"].get("weight", 0) == 0
    assert failure["spec"]["weight"] > 0  # KWOK's Lifecycle.Match never picks weight 0 over it
    keys = {e["key"]: e["values"] for e in failure["spec"]["selector"]["matchExpressions"] if "values" in e}
    assert keys[".metadata.namespace"] == ["ns1"]
    assert keys['.metadata.labels["job-name"]'] == ["seed"]
    assert "exitCode: 3" in failure["spec"]["next"]["statusTemplate"]
    assert "phase: Failed" in failure["spec"]["next"]["statusTemplate"]
    assert "phase: Succeeded" in complete["spec"]["next"]["statusTemplate"]


def test_a_deleted_job_pod_ends_with_the_trainers_sigterm_exit_before_kwok_removes_it():
    sigterm = fleet.sigterm_stage("t", "ns1", 143)
    expressions = {e["key"]: e for e in sigterm["spec"]["selector"]["matchExpressions"]}
    # KWOK's `pod-delete` (weight 0) matches the same deleting pods: Lifecycle.Match prefers this one
    assert expressions[".metadata.deletionTimestamp"]["operator"] == "Exists"
    assert sigterm["spec"]["weight"] > 0
    assert expressions[".status.phase"]["values"] == ["Running"]  # once Failed, pod-delete takes it
    assert expressions[".metadata.namespace"]["values"] == ["ns1"]
    assert "exitCode: 143" in sigterm["spec"]["next"]["statusTemplate"]
    assert "phase: Failed" in sigterm["spec"]["next"]["statusTemplate"]


def test_a_long_run_stage_holds_its_pods_running_then_completes_them_but_not_a_marked_one():
    held = fleet.long_run_stage("h", "ns1", {"ddp-mnist.io/job": "mnist-r1"}, 20, ("stopped", "finish"))
    assert held["spec"]["delay"] == {"durationMilliseconds": 20000}
    assert held["spec"]["weight"] > fleet.job_pod_complete()["spec"].get("weight", 0)
    assert "phase: Succeeded" in held["spec"]["next"]["statusTemplate"]
    # KWOK picks among matching positive-weight stages at random: a marked pod matches only its own
    for label in ("stopped", "finish"):
        unless = {"key": f'.metadata.labels["{label}"]', "operator": "DoesNotExist"}
        assert unless in held["spec"]["selector"]["matchExpressions"]


def test_the_part_key_follows_the_pin_and_nothing_else(tmp_path, monkeypatch):
    wrapper = tmp_path / "parts" / "demo"
    wrapper.mkdir(parents=True)
    (wrapper / "go.mod").write_text("module demo\n")
    (wrapper / "go.sum").write_text("a v1 h1:x\n")
    monkeypatch.setattr("infra.localcluster.parts.PARTS_DIR", tmp_path / "parts")
    part = Part("demo", {"demo": "example.com/demo"})
    first = build.part_key(part, "go1.26.8")
    assert build.part_key(part, "go1.26.8") == first
    (wrapper / "go.sum").write_text("a v2 h1:y\n")
    assert build.part_key(part, "go1.26.8") != first
    assert build.part_key(part, "go1.27.0") != build.part_key(part, "go1.26.8")


def test_the_provider_key_covers_the_files_its_build_writes():
    provider = PARTS["kubernetes-provider"]
    assert provider.generated is not None
    assert "provider.Serve" in PROVIDER_MAIN


def test_without_go_the_build_stops_with_one_line_and_exit_3(monkeypatch, capsys):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert shutil.which("go") is None
    assert build.main(["--part", "etcd"]) == build.EXIT_NO_GO
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no Go toolchain on PATH" in err[0]


def test_the_api_servers_egress_to_services_goes_to_the_supervisors_socket(tmp_path):
    config = _egress_config(tmp_path / "egress.sock")
    (selection,) = config["egressSelections"]
    assert selection["name"] == "cluster"
    assert selection["connection"] == {
        "proxyProtocol": "HTTPConnect",
        "transport": {"uds": {"udsName": str(tmp_path / "egress.sock")}},
    }


def test_a_provisioned_volume_is_bound_to_its_claim_with_the_class_policy():
    claim = {
        "metadata": {"name": "data", "namespace": "ns", "uid": "u1"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "5Gi"}}},
    }
    storage_class = {
        "metadata": {"name": "nfs"},
        "provisioner": "nfs.csi.k8s.io",
        "reclaimPolicy": "Retain",
        "parameters": {"server": "nfs", "share": "/"},
        "mountOptions": ["nfsvers=4.1"],
    }
    volume = _volume(claim, storage_class)
    spec = volume["spec"]
    assert spec["claimRef"] == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "namespace": "ns",
        "name": "data",
        "uid": "u1",
    }
    assert spec["persistentVolumeReclaimPolicy"] == "Retain"
    assert spec["accessModes"] == ["ReadWriteMany"] and spec["capacity"] == {"storage": "5Gi"}
    assert spec["csi"]["driver"] == "nfs.csi.k8s.io" and spec["storageClassName"] == "nfs"
    assert spec["mountOptions"] == ["nfsvers=4.1"]


def test_the_operator_pod_reads_the_downward_api_and_its_named_ports():
    pod = {
        "metadata": {
            "name": "op",
            "namespace": "kubeflow",
            "annotations": {"a/b": "tmpl"},
            "labels": {"x": "y"},
        },
        "spec": {"containers": [{"name": "c", "ports": [{"name": "webhook-server", "containerPort": 9443}]}]},
    }
    assert _field(pod, "metadata.namespace") == "kubeflow"
    assert _field(pod, "metadata.annotations['a/b']") == "tmpl"
    assert _field(pod, "metadata.labels['x']") == "y"
    with pytest.raises(ValueError, match="unsupported downward API field"):
        _field(pod, "spec.nodeName")
    assert _target("webhook-server", pod, {9443: 31000}) == 31000
    assert _target(9443, pod, {9443: 31000}) == 31000
    assert _target("metrics", pod, {9443: 31000}) is None


def test_status_of_a_cluster_that_is_not_running_exits_6(tmp_path: Path, capsys):
    assert main(["status", "--state", str(tmp_path / "none")]) == EXIT_NOT_RUNNING
    assert capsys.readouterr().out.strip() == "cluster: not running"


def test_an_unknown_command_is_a_usage_error():
    with pytest.raises(SystemExit) as exited:
        main(["start"])
    assert exited.value.code == 2


def test_a_rehearsal_takes_the_stack_file_and_sets_the_s3_keys_as_secrets():
    from infra.localcluster.rehearse import rehearsal_config

    config = rehearsal_config("dev", ["minioAccessKey=a", "ddp-mnist:minioBucket=other"])
    assert config.secrets["ddp-mnist:minioAccessKey"] == "a"
    assert "ddp-mnist:minioAccessKey" not in config.plain
    assert config.plain["ddp-mnist:minioBucket"] == "other"
    assert config.plain["ddp-mnist:namespace"] == load_stack("dev").values["ddp-mnist:namespace"]
    # The key left unset becomes a named placeholder secret (the stack's other secret is unset too).
    assert config.placeholders == ["ddp-mnist:minioSecretKey"]
    assert config.secrets["ddp-mnist:minioSecretKey"].startswith("rehearsal-")


def test_a_malformed_set_is_refused_with_one_line_and_exit_2_before_anything_runs(
    tmp_path, capsys, monkeypatch
):
    from infra.localcluster import rehearse

    monkeypatch.setattr(rehearse, "alive", lambda pid: True)
    state = tmp_path / "state"
    state.mkdir()
    (state / "state.json").write_text('{"pids": {"etcd": 1}}')
    assert (
        rehearse.main(["--stack", "dev", "--set", "minioBucket", "--state", str(state)])
        == rehearse.EXIT_USAGE
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "rehearse: --set 'minioBucket': expected KEY=VALUE "
        "(a config key of ddp-mnist, e.g. minioBucket=mnist)"
    ]


def test_a_rehearsal_without_a_running_cluster_exits_6(tmp_path, capsys):
    from infra.localcluster import rehearse

    assert rehearse.main(["--stack", "dev", "--state", str(tmp_path / "none")]) == rehearse.EXIT_NOT_RUNNING
    assert "start it with `make cluster-up`" in capsys.readouterr().err


def test_a_build_that_finishes_second_keeps_the_first_ones_binaries(tmp_path, monkeypatch):
    wrapper = tmp_path / "parts" / "demo"
    wrapper.mkdir(parents=True)
    (wrapper / "go.mod").write_text("module demo\n")
    monkeypatch.setattr("infra.localcluster.parts.PARTS_DIR", tmp_path / "parts")
    monkeypatch.setenv("DDP_MNIST_CACHE", str(tmp_path / "cache"))
    part = Part("demo", {"demo": "example.com/demo"})
    target = build.part_dir(part, "go1.26.8")

    def go_build(_part, args, _work):
        Path(args[args.index("-o") + 1]).write_text("ours")
        target.mkdir(parents=True)  # another build of the same key lands first
        (target / "demo").write_text("theirs")

    monkeypatch.setattr(build, "_run_go", go_build)
    directory, seconds = build.build_part(part, "go1.26.8")
    assert directory == target and seconds is not None
    assert (target / "demo").read_text() == "theirs"
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no scratch left behind


def _local_pod(tmp_path: Path) -> LocalPod:
    pod = {"metadata": {"name": "m", "namespace": "kubeflow-system"}, "spec": {"containers": []}}
    return LocalPod(pod, {8081: 30001, 8443: 30002, 9443: 30003, 10443: 30004}, tmp_path / "pod")


def test_a_stand_ins_mounts_land_in_its_own_tmp_and_run_or_under_tmp_mounts(tmp_path):
    local = _local_pod(tmp_path)
    assert local.seen_at("/tmp/k8s-webhook-server/serving-certs") == "/tmp/k8s-webhook-server/serving-certs"
    assert local.seen_at("/var/run/secrets/kubernetes.io/serviceaccount") == SERVICE_ACCOUNT
    assert local.seen_at("/etc/config") == "/tmp/.mounts/etc/config"
    assert local.seen_at("/controller_manager_config.yaml") == "/tmp/.mounts/controller_manager_config.yaml"
    assert local.path("/etc/config") == tmp_path / "pod" / "root" / "tmp" / ".mounts" / "etc" / "config"


@pytest.mark.parametrize(
    ("args", "template_flag"),
    [
        # Kubeflow's Deployment (no args): the operator reads the flag's default path, where a pod sees
        # its /etc/config mount (operatorPatchExisting); this process sees it under /tmp/.mounts.
        ([], "--pytorch-init-container-template-file=/tmp/.mounts/etc/config/initContainer.yaml"),
        # The stack's install passes the flag itself (rewritten to the same place by the stand-in).
        (["--pytorch-init-container-template-file=/etc/config/initContainer.yaml"], None),
    ],
)
def test_the_training_operator_reads_its_template_where_its_pod_would(tmp_path, args, template_flag):
    pod = {
        "metadata": {"name": "m", "namespace": "kubeflow"},
        "spec": {"containers": [{"name": "training-operator", "args": args}]},
    }
    flags = _training_operator_flags(LocalPod(pod, {8080: 30001, 8081: 30002, 9443: 30003}, tmp_path / "pod"))
    assert flags[:3] == [
        "--metrics-bind-address=127.0.0.1:30001",
        "--health-probe-bind-address=127.0.0.1:30002",
        "--webhook-server-port=30003",
    ]
    assert flags[3:] == ([template_flag] if template_flag else [])


def test_the_managers_config_listens_on_loopback_at_the_local_ports_and_keeps_the_rest(tmp_path):
    local = _local_pod(tmp_path)
    upstream = (
        b"apiVersion: config.trainer.kubeflow.org/v1alpha1\nkind: Configuration\n"
        b"health: {healthProbeBindAddress: ':8081', readinessEndpointName: readyz}\n"
        b"metrics: {bindAddress: ':8443', secureServing: true}\nwebhook: {port: 9443, host: ''}\n"
        b"statusServer: {port: 10443, qps: 5}\ncertManagement: {enable: true}\n"
    )
    config = yamlio.load(_manager_config(MANAGER_CONFIG, upstream, local))
    assert config["health"] == {
        "healthProbeBindAddress": "127.0.0.1:30001",
        "readinessEndpointName": "readyz",
    }
    assert config["metrics"] == {"bindAddress": "127.0.0.1:30002", "secureServing": True}
    assert config["webhook"] == {"port": 30003, "host": "127.0.0.1"}
    assert config["statusServer"] == {"port": 30004, "qps": 5}
    assert config["certManagement"] == {"enable": True}
    assert _manager_config("/etc/other.yaml", upstream, local) == upstream


def test_the_trainer_keeps_its_status_servers_port_the_url_it_injects_names_and_moves_the_rest():
    (trainer,) = [s for s in STAND_INS if s.deployment == "kubeflow-trainer-controller-manager"]
    container = {"name": "manager", "ports": [{"containerPort": 9443}, {"containerPort": 10443}]}
    ports = local_ports(trainer, container)
    assert sorted(ports) == [8081, 8443, 9443, 10443]
    assert ports[10443] == 10443
    assert all(ports[p] != p for p in (8081, 8443, 9443)), ports


def test_a_stand_in_sees_its_own_tmp_and_service_account_even_with_its_state_under_tmp(tmp_path):
    if shutil.which("unshare") is None:
        pytest.fail("no unshare on PATH (util-linux): the local cluster runs every stand-in with it")
    local = _local_pod(tmp_path)  # tmp_path is under /tmp, which the namespace mounts over
    account = local.path(SERVICE_ACCOUNT)
    account.mkdir(parents=True)
    (account / "namespace").write_text("kubeflow-system")
    (local.path("/tmp/k8s-webhook-server/serving-certs")).mkdir(parents=True)
    (local.path("/tmp/k8s-webhook-server/serving-certs") / "tls.crt").write_text("cert")
    shown = subprocess.run(
        [
            *in_own_mounts(local),
            "sh",
            "-c",
            "cat /var/run/secrets/kubernetes.io/serviceaccount/namespace; echo; ls /tmp; pwd",
        ],
        cwd=local.directory,
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.split() == ["kubeflow-system", "k8s-webhook-server", "/tmp"]
    assert (tmp_path / "pod").exists()  # the host's /tmp is untouched outside the namespace


def test_a_rehearsal_sets_no_source_for_the_vendored_manifests_and_chart():
    """The platform's manifests (infra/manifests) and a prerequisites stack's chart (infra/charts) are
    vendored: a rehearsal sets no source for them."""
    from infra.localcluster.rehearse import rehearsal_config

    prerequisites = rehearsal_config("dev-prereqs", [])
    assert "ddp-mnist:nfsCsiChart" not in prerequisites.plain
    platform = rehearsal_config("gke-platform", [])
    assert not {"operatorSource", "trainerSource", "kserveSource", "nfsCsiChart"} & {
        key.split(":", 1)[1] for key in platform.plain
    }
