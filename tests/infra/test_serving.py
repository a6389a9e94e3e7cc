"""Serving the trained model: a KServe InferenceService or a Deployment + Service, after the job succeeded."""

from __future__ import annotations

import copy
import io
import json
import urllib.error
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from infra.program.checks import ConfigError
from infra.program.common import yamlio
from infra.program.common.vendored import MANIFESTS
from infra.program.job.serving import STOP_AFTER_DRAIN_S, WAIT_ANNOTATIONS, predictor_outcome
from infra.program.platform import kserve
from infra.program.platform.kserve import CONFIG_MAP, UNUSED, standard_mode, used_manifest
from infra.program.platform.training_operator import CRD_TYPE
from infra.review.admission import Namespace, admit
from infra.review.cluster import cluster_view
from infra.review.crd import crd_validator
from infra.review.effective import Controllers, derive
from infra.review.manifest import RecordingMocks, run_program, to_yaml
from infra.review.render import DEFAULT_CRD_DIR, KSERVE_CRD, validation_errors
from infra.stackconfig import load_stack
from policy import guardrails as g
from tests.infra.conftest import BASE, by_kind, one, render_config, rendered, stack_config

S3 = {
    "minioEndpoint": "minio.minio.svc:9000",
    "minioTls": False,
    "minioExistingSecret": "minio-creds",
    "createNamespace": False,
}
DEPLOYMENT = {"serveKind": "deployment", "jobWait": True}
KSERVE = {"serveKind": "kserve", "jobWait": True, "kservePresent": True}
SERVE_LABEL = "ddp-mnist.io/serve"


def _server(rendering) -> dict[str, Any]:
    """The serving workload: the Deployment or the InferenceService."""
    (obj,) = [*by_kind(rendering, "Deployment"), *by_kind(rendering, "InferenceService")]
    return obj


def _server_pod(obj) -> dict[str, Any]:
    """The server's pod spec as rendered (a Deployment's template, an InferenceService's predictor)."""
    return obj["spec"]["template"]["spec"] if obj["kind"] == "Deployment" else obj["spec"]["predictor"]


def _named(rendering, kind, name) -> dict[str, Any]:
    (obj,) = [o for o in by_kind(rendering, kind) if o["metadata"]["name"] == name]
    return obj


def test_nothing_is_served_by_default():
    rendering = rendered({})
    assert not {"Deployment", "InferenceService", "PodDisruptionBudget"} & {
        o["kind"] for o in rendering.objects
    }
    assert not [k for k in rendering.outputs if k.startswith("serve")]


def test_a_deployment_and_service_serve_the_runs_checkpoint_read_only():
    rendering = rendered(DEPLOYMENT)
    deployment = _named(rendering, "Deployment", "mnist-serve")
    service = _named(rendering, "Service", "mnist-serve")
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]
    assert pod["metadata"]["labels"][SERVE_LABEL] == "mnist-serve"
    assert "ddp-mnist.io/job" not in pod["metadata"]["labels"]  # not selected by the training job's policy
    assert deployment["spec"]["selector"] == {"matchLabels": {SERVE_LABEL: "mnist-serve"}}
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["python", "-m", "trainer.serve"]
    assert container["args"] == [
        "--model-uri=/checkpoints/mnist-r1",
        "--model-name=mnist",
        "--model-version=r1",
        "--port=8080",
        "--health-port=8081",
        "--max-batch=256",
        "--drain-seconds=5",
    ]
    # The probes on a port of their own, never declared (KServe would add it to the Service), nor in the
    # Service or its policy: clients cannot hold it.
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": 8081}
    assert container["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": 8081}
    assert container["resources"] == {
        "requests": {"cpu": "500m", "memory": "512Mi"},
        "limits": {"cpu": "1", "memory": "1Gi"},
    }
    claim = next(v for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v)
    assert claim["persistentVolumeClaim"] == {"claimName": "ddp-mnist-checkpoints", "readOnly": True}
    mount = next(m for m in container["volumeMounts"] if m["name"] == claim["name"])
    assert mount == {"name": claim["name"], "mountPath": "/checkpoints", "readOnly": True}
    assert not [e for e in container["env"] if e["name"].startswith("AWS_")]  # no credentials needed
    assert service["spec"]["selector"] == {SERVE_LABEL: "mnist-serve"}
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}
    ]


@pytest.mark.parametrize("values", [DEPLOYMENT, KSERVE])
def test_the_server_pod_is_restricted_without_a_token_under_its_own_account(values):
    rendering = rendered(values)
    pod = _server_pod(_server(rendering))
    assert pod["serviceAccountName"] == "mnist-serve"
    assert pod["automountServiceAccountToken"] is False
    account = _named(rendering, "ServiceAccount", "mnist-serve")
    assert account["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
    }
    view = cluster_view(rendering.objects, rendering.settings)
    served = [p for p in view.admission.pods if p.role == "Replica"]
    assert len(served) == 2
    assert view.admission.refusals == []


def test_an_inference_service_runs_our_container_in_standard_mode_without_a_storage_uri():
    rendering = rendered({**KSERVE, **S3, "jobModelExport": True, "serveModelSource": "s3"})
    isvc = one(rendering, "InferenceService")
    assert isvc["apiVersion"] == "serving.kserve.io/v1beta1"
    assert isvc["metadata"]["name"] == "mnist-serve"
    # Cluster-local: KServe creates no Ingress for it.
    assert isvc["metadata"]["labels"]["networking.kserve.io/visibility"] == "cluster-local"
    annotations = isvc["metadata"]["annotations"]
    assert annotations["serving.kserve.io/deploymentMode"] == "Standard"
    assert annotations["serving.kserve.io/autoscalerClass"] == "none"
    assert annotations["pulumi.com/timeoutSeconds"] == "600"
    predictor = isvc["spec"]["predictor"]
    assert predictor["minReplicas"] == predictor["maxReplicas"] == 2
    assert predictor["labels"][SERVE_LABEL] == "mnist-serve"
    (container,) = predictor["containers"]
    assert container["name"] == "kserve-container"
    assert container["args"][0] == "--model-uri=s3://mnist/mnist/models/mnist-r1/"
    assert "storageUri" not in str(isvc) and "STORAGE_URI" not in str(isvc)
    assert not by_kind(rendering, "Deployment") and not by_kind(rendering, "Service")  # KServe makes them
    errors = validation_errors(rendering, "1.33", None, DEFAULT_CRD_DIR)
    assert errors == []


def test_the_s3_model_comes_with_credentials_only_by_reference_and_no_secret_is_rendered():
    secret = "S3cretValue-of-the-test"
    rendering = render_config(
        {**DEPLOYMENT, "minioEndpoint": "minio:9000", "jobModelExport": True, "serveModelSource": "s3"},
        secrets={"minioAccessKey": "AKIATESTKEY0000", "minioSecretKey": secret},
    )
    (container,) = _server_pod(_server(rendering))["containers"]
    env = {e["name"]: e for e in container["env"]}
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert env[var]["valueFrom"]["secretKeyRef"] == {"name": "ddp-mnist-s3", "key": var}
    assert env["AWS_ENDPOINT_URL"]["value"] == "https://minio:9000"
    # The checkpoint volume, read-only, for the SHA256SUMS the job wrote, which the export must match.
    (mount,) = [v for v in container.get("volumeMounts", []) if v["mountPath"] == "/checkpoints"]
    assert mount["readOnly"] is True
    assert "--sums-from=/checkpoints/mnist-r1/SHA256SUMS" in container["args"]
    text = to_yaml(rendering) + yaml.safe_dump(rendering.outputs)
    assert secret not in text and "AKIATESTKEY0000" not in text


# --- the gate ------------------------------------------------------------------------------------------


class _JobEndsWith(RecordingMocks):
    """Mocks whose training job comes back from the wait with a final condition."""

    def __init__(self, condition: dict[str, str]) -> None:
        super().__init__()
        self.condition = condition

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        rid, outputs = super().new_resource(args)
        if args.name == "trainer-job":
            outputs = {**outputs, "status": {"conditions": [self.condition]}}
        return rid, outputs


SERVING_TYPES = {
    "kubernetes:apps/v1:Deployment",
    "kubernetes:serving.kserve.io/v1beta1:InferenceService",
    "kubernetes:policy/v1:PodDisruptionBudget",
}


@pytest.mark.parametrize("values", [DEPLOYMENT, KSERVE])
def test_a_failed_training_job_registers_no_serving_object(values):
    config = stack_config({**BASE, **values})
    failed = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "exit code 3"}
    mocks = _JobEndsWith(failed)
    with pytest.raises(pulumi.RunError) as raised:
        run_program(config, mocks)
    assert str(raised.value).startswith("PyTorchJob mnist-r1 failed (BackoffLimitExceeded): exit code 3")
    registered = {r.name for r in mocks.registrations}
    assert "trainer-job" in registered
    assert not [r for r in mocks.registrations if r.name.startswith("server-")]
    assert not SERVING_TYPES & {r.type for r in mocks.registrations}

    mocks = _JobEndsWith({"type": "Succeeded", "status": "True"})
    _, outputs = run_program(config, mocks)
    assert outputs["jobOutcome"] == "Succeeded"
    served = {r.name: r for r in mocks.registrations if r.name.startswith("server-")}
    workload = served.get("server-deployment") or served["server-inference-service"]
    assert "server-policy" in workload.dependencies  # the NetworkPolicy is in place first
    assert {"server-account", "server-policy", "server-budget"} <= set(served)


@pytest.mark.parametrize("values", [DEPLOYMENT, KSERVE])
def test_the_server_depends_on_the_job_itself_and_none_of_its_properties_do(values):
    """Replacing the job (delete before replace) makes the engine re-diff, as unknown, every property
    that depends on it: an unknown `metadata` or Deployment `spec` forces a replacement, so a property
    dependency showed the whole server replaced on every job edit (found by the local cluster tier)."""
    mocks = _JobEndsWith({"type": "Succeeded", "status": "True"})
    run_program(stack_config({**BASE, **values, "serveReplicas": 2}), mocks)
    served = [r for r in mocks.registrations if r.name.startswith("server-") and r.custom]
    workload = (
        {"server-deployment", "server-service"} if values == DEPLOYMENT else {"server-inference-service"}
    )
    assert {r.name for r in served} == {"server-account", "server-policy", "server-budget", *workload}
    for registration in served:
        assert "trainer-job" in registration.dependencies, registration.name
        on_job = [key for key, deps in registration.options.property_dependencies if "trainer-job" in deps]
        assert on_job == [], (registration.name, on_job)


# --- rollout -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("values", [DEPLOYMENT, KSERVE])
def test_a_new_run_id_rolls_the_same_server_to_the_new_model_without_a_gap(values):
    def server(run_id: str):
        rendering = rendered({**values, "jobRunId": run_id})
        (reg,) = [
            r for r in rendering.registrations if r.name in ("server-deployment", "server-inference-service")
        ]
        return _server(rendering), reg

    old, old_reg = server("r1")
    new, new_reg = server("r2")
    assert old["metadata"]["name"] == new["metadata"]["name"] == "mnist-serve"
    assert old_reg.name == new_reg.name  # the same resource, updated in place
    assert not new_reg.replace_on_changes and not new_reg.delete_before_replace
    old_pod, new_pod = _server_pod(old), _server_pod(new)
    assert old_pod["containers"][0]["args"] != new_pod["containers"][0]["args"]
    assert "--model-version=r2" in new_pod["containers"][0]["args"]
    assert "--model-uri=/checkpoints/mnist-r2" in new_pod["containers"][0]["args"]
    strip = copy.deepcopy(new)
    for pod in (_server_pod(strip),):
        pod["containers"][0]["args"] = old_pod["containers"][0]["args"]
    assert strip == old  # nothing else changes
    strategy = (
        new["spec"]["strategy"]
        if new["kind"] == "Deployment"
        else new["spec"]["predictor"]["deploymentStrategy"]
    )
    assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    assert new_pod["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"


# --- network policy, disruption budget, outputs -------------------------------------------------------


def test_the_network_policy_lets_in_the_namespace_and_configured_ones_and_out_dns_and_s3():
    rendering = rendered(
        {
            **DEPLOYMENT,
            **S3,
            "jobModelExport": True,
            "serveModelSource": "s3",
            "serveIngressNamespaces": ["apps"],
        }
    )
    policy = _named(rendering, "NetworkPolicy", "mnist-serve")["spec"]
    assert policy["podSelector"] == {"matchLabels": {SERVE_LABEL: "mnist-serve"}}
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    (ingress,) = policy["ingress"]
    assert ingress["from"] == [
        {"podSelector": {}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "apps"}}},
    ]
    assert ingress["ports"] == [{"protocol": "TCP", "port": 8080}]
    dns, s3 = policy["egress"]
    assert {p["port"] for p in dns["ports"]} == {53}
    assert s3 == {
        "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "minio"}}}],
        "ports": [{"protocol": "TCP", "port": 9000}],
    }
    # From the checkpoint PVC the server needs no S3 at all.
    pvc = _named(rendered(DEPLOYMENT), "NetworkPolicy", "mnist-serve")["spec"]
    assert len(pvc["egress"]) == 1 and pvc["egress"][0]["ports"] == dns["ports"]


@pytest.mark.parametrize("values", [DEPLOYMENT, KSERVE])
def test_a_disruption_budget_keeps_one_server_when_there_are_several(values):
    budget = one(rendered(values), "PodDisruptionBudget")["spec"]
    assert budget == {"minAvailable": 1, "selector": {"matchLabels": {SERVE_LABEL: "mnist-serve"}}}
    assert not by_kind(rendered({**values, "serveReplicas": 1}), "PodDisruptionBudget")


@pytest.mark.parametrize(
    ("values", "url", "forward"),
    [
        (
            DEPLOYMENT,
            "http://mnist-serve.ddp-mnist.svc.cluster.local:8080/v2/models/mnist",
            "kubectl -n ddp-mnist port-forward svc/mnist-serve 8080:8080 & ",
        ),
        (
            KSERVE,
            "http://mnist-serve-predictor.ddp-mnist.svc.cluster.local:80/v2/models/mnist",
            "kubectl -n ddp-mnist port-forward svc/mnist-serve-predictor 8080:80 & ",
        ),
    ],
)
def test_outputs_give_the_in_cluster_url_and_a_command_to_paste(values, url, forward):
    outputs = rendered(values).outputs
    assert outputs["serveUrl"] == url
    assert outputs["serveExample"] == (
        f"{forward}sleep 2; curl -s http://127.0.0.1:8080/v2/models/mnist/ready; "
        "curl -s http://127.0.0.1:8080/v2/models/mnist"
    )
    assert outputs["serveModelVersion"] == "r1"
    assert outputs["serveKind"] == values["serveKind"]


# --- KServe: what its controller and webhook do, its CRD, its install --------------------------------


def test_kserve_would_inject_a_storage_initializer_that_restricted_refuses():
    isvc = one(rendered(KSERVE), "InferenceService")
    (pod,) = derive([isvc], Controllers()).pods[:1]
    meta = pod.manifest["metadata"]
    assert meta["generateName"] == "mnist-serve-predictor-<hash>-"
    assert meta["labels"]["serving.kserve.io/inferenceservice"] == "mnist-serve"
    assert meta["labels"]["app"] == "isvc.mnist-serve-predictor"
    assert "initContainers" not in pod.spec
    env = pod.spec["containers"][0]["env"]
    assert {"name": "INFERENCE_SERVICE_NAME", "value": "mnist-serve"} in env
    restricted = Namespace("ddp-mnist", "restricted")
    assert admit([pod], restricted).refusals == []

    with_uri = copy.deepcopy(isvc)
    with_uri["spec"]["predictor"]["containers"][0]["env"].append(
        {"name": "STORAGE_URI", "value": "s3://m/x/"}
    )
    (injected, _) = derive([with_uri], Controllers()).pods
    assert [c["name"] for c in injected.spec["initContainers"]] == ["storage-initializer"]
    refusals = admit([injected], restricted).refusals
    assert refusals and 'container "storage-initializer"' in refusals[0]
    # The policy pack sees the same pod.
    assert g.pod_security_restricted(with_uri)
    assert g.pod_security_restricted(isvc) == []


def test_inference_service_crd_validation_can_fail():
    isvc = one(rendered(KSERVE), "InferenceService")
    validator = crd_validator(DEFAULT_CRD_DIR / KSERVE_CRD, "v1beta1", strict=True)
    assert list(validator.iter_errors(isvc)) == []
    isvc["spec"]["predictor"]["minReplica"] = 2
    assert list(validator.iter_errors(isvc))


VENDORED_KSERVE = MANIFESTS / "kserve" / "kserve.yaml"
PLATFORM_KSERVE = {"stackRole": "platform", "kserveInstall": True, "operatorInstall": False}


def _documents(path: str | Path) -> list[str]:
    """The file's YAML documents as text (split on `---` lines), each stripped of its newlines."""
    text = "\n" + Path(path).read_text()
    return [d.strip("\n") for d in text.split("\n---\n") if d.strip()]


def _is_crd(document: str) -> bool:
    return "\nkind: CustomResourceDefinition\n" in f"\n{document}\n"


def _objects(path: str | Path) -> list[dict[str, Any]]:
    """The file's objects but its CRDs (most of its 7 MB, compared as text where it matters)."""
    return [yamlio.load(d) for d in _documents(path) if not _is_crd(d)]


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def test_the_stack_applies_the_release_manifest_less_exactly_the_components_it_never_uses():
    """Every object of the vendored release manifest is applied as upstream wrote it, but the 23 of the
    LLM inference service and the local-model cache (their CRDs stay); each listed one exists upstream,
    so a release that renames one fails here."""
    rendering = rendered(PLATFORM_KSERVE)
    (manifest,) = rendering.external
    applied = manifest.inputs["file"]
    assert applied == used_manifest(str(VENDORED_KSERVE)) != str(VENDORED_KSERVE)
    assert rendering.outputs["kserveSource"] == str(VENDORED_KSERVE)  # what the stack was given
    upstream = _objects(VENDORED_KSERVE)
    assert {_key(o) for o in upstream} >= UNUSED
    assert _objects(applied) == [o for o in upstream if _key(o) not in UNUSED]
    assert [o["metadata"]["name"] for o in _objects(applied) if o["kind"] in ("Deployment", "DaemonSet")] == [
        "kserve-controller-manager"  # the node agent's DaemonSet, with its hostPath, is gone
    ]
    crds = [d for d in _documents(VENDORED_KSERVE) if _is_crd(d)]
    assert len(crds) == 16
    assert [d for d in _documents(applied) if _is_crd(d)] == crds  # byte for byte
    # Written once, for this user alone (the provider applies it with cluster-admin).
    assert oct(Path(applied).parent.stat().st_mode & 0o777) == "0o700"
    assert used_manifest(str(VENDORED_KSERVE)) == applied


def test_namespace_kserve_enforces_restricted_which_the_controller_manager_meets_as_upstream_writes_it():
    from infra.review.admission import podsecurity

    (namespace,) = [o for o in rendered(PLATFORM_KSERVE).objects if o["kind"] == "Namespace"]
    assert namespace["metadata"]["name"] == "kserve"
    for mode in ("enforce", "warn", "audit"):
        assert namespace["metadata"]["labels"][f"pod-security.kubernetes.io/{mode}"] == "restricted"
    workloads = {
        o["metadata"]["name"]: o
        for o in _objects(used_manifest(str(VENDORED_KSERVE)))
        if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet")
    }
    assert list(workloads) == ["kserve-controller-manager"]
    template = workloads["kserve-controller-manager"]["spec"]["template"]
    assert podsecurity.violations(template, "restricted") == []
    (agent,) = [o for o in _objects(VENDORED_KSERVE) if o["kind"] == "DaemonSet"]  # what it left out
    assert podsecurity.violations(agent["spec"]["template"], "restricted") != []


def test_a_mirrored_manifest_is_applied_less_the_same_components(tmp_path, monkeypatch):
    """A local copy and an https mirror are read by the program (the provider gets the derived file),
    each less the unused components; what the mirror holds besides is applied as it is."""
    extra = "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: mirror-note\n  namespace: kserve\n"
    mirror = tmp_path / "kserve-v0.20.0.yaml"
    mirror.write_text(VENDORED_KSERVE.read_text() + extra)
    fetched: list[str] = []

    class Response(io.BytesIO):
        def __enter__(self) -> Response:
            return self

        def __exit__(self, *_: object) -> None:
            self.close()

    def urlopen(url: str, timeout: float) -> Response:
        fetched.append(url)
        return Response(mirror.read_bytes())

    monkeypatch.setattr(kserve.urllib.request, "urlopen", urlopen)
    url = "https://mirror.example/kserve/v0.20.0/kserve.yaml"
    for source in (str(mirror), url):
        (manifest,) = render_config({**PLATFORM_KSERVE, "kserveSource": source}).external
        names = [_key(o) for o in _objects(manifest.inputs["file"])]
        assert ("ConfigMap", "mirror-note") in names
        assert not set(names) & UNUSED
        assert len(names) == len(_objects(VENDORED_KSERVE)) - len(UNUSED) + 1  # CRDs aside
    assert fetched == [url]


def test_a_source_that_cannot_be_read_stops_the_program_with_one_line(tmp_path, monkeypatch):
    missing = tmp_path / "kserve.yaml"
    with pytest.raises(pulumi.RunError) as error:
        render_config({**PLATFORM_KSERVE, "kserveSource": str(missing)})
    assert str(error.value) == (
        f"config ddp-mnist:kserveSource={missing}: cannot read it (No such file or directory)"
    )

    def refused(url: str, timeout: float) -> None:
        raise urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))

    monkeypatch.setattr(kserve.urllib.request, "urlopen", refused)
    url = "https://mirror.example/kserve.yaml"
    with pytest.raises(pulumi.RunError) as error:
        render_config({**PLATFORM_KSERVE, "kserveSource": url})
    why = "<urlopen error [Errno 111] Connection refused>"
    assert str(error.value) == f"config ddp-mnist:kserveSource={url}: cannot fetch it ({why})"


def test_the_platform_stack_installs_kserve_with_its_crds_kept_and_standard_mode():
    rendering = rendered(PLATFORM_KSERVE)
    (manifest,) = rendering.external
    found = [(o["kind"], o["metadata"]["name"]) for o in rendering.objects]
    # ...and the Pod Security label guard every platform stack has by default (podSecurityLabelGuard).
    assert sorted(f for f in found if not f[1].startswith("ddp-mnist-pod-security")) == [
        ("Namespace", "kserve"),
        ("NetworkPolicy", "ddp-mnist-kserve-controller-manager-ingress"),
    ]
    (transform,) = manifest.transforms  # the transform the program registered with the manifest

    def args(type_: str, props: dict[str, Any]) -> pulumi.ResourceTransformArgs:
        return pulumi.ResourceTransformArgs(
            custom=True,
            type_=type_,
            name=props["metadata"]["name"],
            props=props,
            opts=pulumi.ResourceOptions(),
        )

    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "x"},
    }
    kept = transform(args(CRD_TYPE, crd))
    assert kept is not None and kept.opts.retain_on_delete is True
    config = {
        "kind": "ConfigMap",
        "metadata": {"name": CONFIG_MAP},
        "data": {"deploy": '{"defaultDeploymentMode": "Serverless"}'},
    }
    changed = transform(args("kubernetes:core/v1:ConfigMap", config))
    assert changed is not None
    assert yamlio.load(changed.props["data"]["deploy"]) == {"defaultDeploymentMode": "Standard"}
    assert config["data"]["deploy"] == '{"defaultDeploymentMode": "Serverless"}'  # not modified in place


def test_kserve_is_configured_never_to_copy_the_wait_annotations_onto_server_pods():
    """KServe copies an InferenceService's annotations onto its predictor's pods, less the list in
    `inferenceservice-config` (appended to its own): ours are on that list, upstream's settings kept."""
    upstream = '{"resource": {"cpuLimit": "1"}, "serviceAnnotationDisallowedList": ["team.example/x"]}'
    config = {"kind": "ConfigMap", "metadata": {"name": CONFIG_MAP}, "data": {"inferenceService": upstream}}
    isvc = json.loads(standard_mode(config)["data"]["inferenceService"])
    assert isvc == {
        "resource": {"cpuLimit": "1"},
        "serviceAnnotationDisallowedList": ["team.example/x", *WAIT_ANNOTATIONS],
    }
    bare = {"kind": "ConfigMap", "metadata": {"name": CONFIG_MAP}, "data": {}}
    listed = json.loads(standard_mode(bare)["data"]["inferenceService"])["serviceAnnotationDisallowedList"]
    assert listed == list(WAIT_ANNOTATIONS)
    # What the program puts on the InferenceService for Pulumi's wait is exactly that list.
    isvc_annotations = one(rendered(KSERVE), "InferenceService")["metadata"]["annotations"]
    assert {k for k in isvc_annotations if k.startswith("pulumi.com/")} == set(WAIT_ANNOTATIONS)
    # And the modelled predictor pod, as KServe makes it, carries none of them.
    view = cluster_view(rendered(KSERVE).objects, rendered(KSERVE).settings)
    (pod,) = [p for p in view.admission.pods if p.owner.startswith("InferenceService/")][:1]
    assert not [k for k in pod.manifest["metadata"].get("annotations", {}) if k.startswith("pulumi.com/")]


def test_the_kserve_model_drops_the_programs_wait_annotations() -> None:
    """The offline model (which the policy pack loads without the program's dependencies) keeps its own
    copy of the list."""
    from infra.review.effective import serving

    assert serving.WAIT_ANNOTATIONS == WAIT_ANNOTATIONS


def _predictor(reason: str, status: str, message: str = "") -> dict[str, Any]:
    condition = {"type": "PredictorReady", "status": status, "reason": reason, "message": message}
    return {"conditions": [{"type": "Ready", "status": status}, condition]}


def test_the_kserve_wait_ends_only_when_the_rollout_completed_or_failed():
    """KServe keeps PredictorReady True while the old pods serve; only the Deployment's
    NewReplicaSetAvailable (the rollout done) or ProgressDeadlineExceeded (it failed) end the wait."""
    isvc = one(rendered(KSERVE), "InferenceService")
    wait = isvc["metadata"]["annotations"]["pulumi.com/waitFor"]
    assert wait == (
        "jsonpath={.status.conditions[?(@.type=='PredictorReady' && "
        "(@.reason=='NewReplicaSetAvailable' || @.reason=='ProgressDeadlineExceeded'))].reason}"
    )
    logs = "kubectl -n ns logs deployment/mnist-serve-predictor"
    assert (
        predictor_outcome(_predictor("NewReplicaSetAvailable", "True"), "mnist-serve", "r2", logs)
        == "Serving"
    )
    with pytest.raises(pulumi.RunError) as failed:
        predictor_outcome(
            _predictor(
                "ProgressDeadlineExceeded", "False", 'ReplicaSet "mnist-serve-predictor-7c" has timed out'
            ),
            "mnist-serve",
            "r2",
            logs,
        )
    line = str(failed.value)
    assert "\n" not in line
    assert line == (
        "InferenceService mnist-serve: model version r2 did not become ready (ProgressDeadlineExceeded): "
        'ReplicaSet "mnist-serve-predictor-7c" has timed out; the old pods, if any, still serve; '
        f"the new pods' logs: {logs}"
    )


class _ServerEndsWith(_JobEndsWith):
    """The training job succeeds; the InferenceService comes back from the wait with `predictor`."""

    def __init__(self, predictor: dict[str, Any]) -> None:
        super().__init__({"type": "Succeeded", "status": "True"})
        self.predictor = predictor

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        rid, outputs = super().new_resource(args)
        if args.name == "server-inference-service":
            outputs = {**outputs, "status": self.predictor}
        return rid, outputs


def test_a_model_version_that_never_serves_fails_pulumi_up_with_one_line():
    config = stack_config({**BASE, **KSERVE})
    with pytest.raises(pulumi.RunError) as failed:
        run_program(config, _ServerEndsWith(_predictor("ProgressDeadlineExceeded", "False", "timed out")))
    assert str(failed.value).startswith("InferenceService mnist-serve: model version r1 did not become ready")
    _, outputs = run_program(config, _ServerEndsWith(_predictor("NewReplicaSetAvailable", "True")))
    assert outputs["serveOutcome"] == "Serving"


def test_the_deployment_paths_service_waits_as_long_as_the_server():
    rendering = rendered({**DEPLOYMENT, "serveWaitTimeoutSeconds": 1800})
    (service,) = [o for o in by_kind(rendering, "Service") if o["metadata"]["name"] == "mnist-serve"]
    assert service["metadata"]["annotations"]["pulumi.com/timeoutSeconds"] == "1800"


def test_an_all_stack_installs_kserve_before_its_inference_service():
    rendering = rendered({**KSERVE, "kservePresent": False, "kserveInstall": True})
    (reg,) = [r for r in rendering.registrations if r.name == "server-inference-service"]
    assert "kserve-manifests" in reg.dependencies


def test_the_example_stacks_serve_each_way():
    assert load_stack("gke-gpu").values["ddp-mnist:serveKind"] == "kserve"
    assert load_stack("eks-gpu").values["ddp-mnist:serveKind"] == "deployment"
    assert load_stack("gke-platform").values["ddp-mnist:kserveInstall"] in ("true", True)


@pytest.mark.parametrize("values", [DEPLOYMENT, KSERVE], ids=["deployment", "kserve"])
def test_a_stopping_server_drains_within_its_pods_grace_period(values):
    """The server keeps answering `serveDrainSeconds` after SIGTERM, then needs at most the time it
    gives requests in flight (trainer/serve/cli.py DRAIN_TIMEOUT_S): the pod's grace covers both."""
    from trainer.serve.cli import DRAIN_TIMEOUT_S

    rendering = rendered({**values, "serveDrainSeconds": 12})
    view = cluster_view(rendering.objects, rendering.settings)
    (pod, *_) = [p for p in view.admission.pods if p.role == "Replica"]
    (container,) = pod.manifest["spec"]["containers"]
    assert "--drain-seconds=12" in container["args"]
    grace = pod.manifest["spec"]["terminationGracePeriodSeconds"]
    assert grace == 12 + STOP_AFTER_DRAIN_S and STOP_AFTER_DRAIN_S > DRAIN_TIMEOUT_S


def test_the_probes_port_must_differ_from_the_service_port():
    with pytest.raises(
        ConfigError, match=r"^config ddp-mnist:serveHealthPort=8080 is invalid: must be a port other"
    ):
        rendered({**DEPLOYMENT, "serveHealthPort": 8080})
