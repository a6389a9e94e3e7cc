"""KServe, with the real engine, API server, controllers and KServe v0.20.0's controller (its release
manifest vendored in infra/manifests, the stack's default); cert-manager's API is real,
its issuing and CA injection are the tier's stand-in (infra/localcluster/certmanager.py), not
cert-manager:

13. the platform stack, updated with `kserveInstall`, applies KServe's manifest less the components the
    bundle never uses and replaces nothing; `kserve` enforces "restricted" and the controller manager's
    pod is admitted under it; the platform's ingress policy selects that pod and admits its webhook and
    metrics ports;
    the stand-in writes the webhook Certificate's Secret and puts its CA into KServe's webhook
    configurations (a check of the stand-in's own work); the API server then calls KServe's webhooks
    over TLS trusting that CA and KServe answers: an InferenceService whose name KServe refuses is
    denied by KServe's validating webhook (a server-side dry run), not failed on the certificate;
14. a job stack with `serveKind: kserve`: the InferenceService is admitted by KServe's webhooks, its
    controller makes the predictor Deployment (Standard mode) and the InferenceService becomes Ready
    once the job succeeded; the predictor pod, as admitted, equals the offline model's field by field;
    a new `jobRunId` previews as an update of the InferenceService, never a replacement, and rolls out
    a new predictor template; a second `up` and a preview after `refresh` change nothing;
15. a change of a wait setting touches no server pod (KServe copies no `pulumi.com/*` annotation onto
    them); a new run whose server pod takes 20 s to become ready: `up` returns only once every replica
    serves the new model (the predictor Deployment's rollout complete, no pod of the old template);
16. (opt-in, `E2E_LOCAL_SLOW=1`: it waits out KServe's 600-s rollout deadline) a model version whose
    pod never becomes ready fails `up` with one line; the old pod still serves.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Iterator

import pytest
from pulumi import automation as auto

from tests.e2e import judge, live
from tests.e2e.model import modelled
from tests.e2e.project import Backend, set_config
from tests.e2e_local import scenario

pytestmark = pytest.mark.e2e_local

NAMESPACE = "ddp-mnist-local-kserve"
ISVC = "kubernetes:serving.kserve.io/v1beta1:InferenceService"
SLOW_LOAD_S = 20
VALIDATOR = "inferenceservice.kserve-webhook-server.validator"
# A valid object name (a DNS subdomain) that KServe's validator refuses: an InferenceService's name must
# be a DNS-1035 label, no dot (v0.20.0 pkg/apis/serving/v1beta1/inference_service_validation.go,
# validateInferenceServiceName, the first check).
REFUSED_NAME = "webhook.ca-check"


@pytest.fixture(scope="module")
def with_kserve(platform: dict) -> dict:
    result = scenario.update_platform(platform, {"ddp-mnist:kserveInstall": "true"})
    return {"result": result}


@pytest.fixture(scope="module")
def served(backend: Backend, with_kserve: dict) -> Iterator[dict]:
    yield from scenario.job_stack(backend, "kserve", NAMESPACE, serveKind="kserve", kservePresent="true")


def _ready(isvc: dict) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in isvc.get("status", {}).get("conditions", [])
    )


def _webhook_answer(body: dict, timeout_s: float = 60) -> str:
    """What a server-side dry run of creating `body` says: kubectl's error, or "" if it was admitted.
    Retried while KServe's webhook cannot be reached yet (its process starting, its certificate being
    issued), until it answers or `timeout_s` has passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            live.kubectl("create", "--dry-run=server", "-f", "-", stdin=json.dumps(body))
            return ""
        except RuntimeError as error:
            said = str(error)
        if "denied the request" in said or time.monotonic() > deadline:
            return said
        time.sleep(2)


def test_13_the_platform_stack_installs_kserve_and_its_webhooks_get_their_ca(with_kserve: dict) -> None:
    changed = scenario.changes(with_kserve["result"].summary.resource_changes)
    assert "replace" not in changed and "delete" not in changed, changed
    controller = live.get("deployment", "kserve-controller-manager", "kserve")
    assert controller["status"].get("availableReplicas") == 1
    # Only what the bundle uses: the LLM inference service's and the local-model cache's workloads and
    # RBAC are not applied; so `kserve` enforces "restricted", and the real API server's Pod Security
    # admission admitted the controller manager's pod under it (a refused pod would leave no replica).
    labels = live.get("namespace", "kserve")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted", labels
    deployments = [d["metadata"]["name"] for d in live.items("deployment", "kserve")]
    assert deployments == ["kserve-controller-manager"], deployments
    assert live.items("daemonset", "kserve") == []
    assert not live.exists("clusterrolebinding", "llmisvc-manager-rolebinding")
    assert not live.exists("validatingwebhookconfiguration", "localmodelcache.serving.kserve.io")
    assert live.exists("customresourcedefinition", "llminferenceservices.serving.kserve.io")  # CRDs kept
    # The controller manager's pod alone is selected by the platform's ingress policy: webhook and metrics.
    assert sorted(scenario.controller_ingress("kserve-controller-manager", "kserve")) == [8443, 9443]
    # (A FailedCreate for the ServiceAccount not found yet may come first: the ConfigFile applies the
    # Deployment and its ServiceAccount side by side, and the ReplicaSet controller retries.)
    refused = judge.refused_pod_creations(live.events("kserve"))
    assert [r for r in refused if "PodSecurity" in r] == [], refused
    # A check of the tier's cert-manager stand-in, not of the cluster: it issued the Certificate's Secret
    # and injected its CA into the webhook configuration.
    secret = live.get("secret", "kserve-webhook-server-cert", "kserve")
    ca = secret["data"]["ca.crt"]
    assert base64.b64decode(ca).startswith(b"-----BEGIN CERTIFICATE-----")
    config = live.get("validatingwebhookconfiguration", "inferenceservice.serving.kserve.io")
    assert {hook["clientConfig"].get("caBundle") for hook in config["webhooks"]} == {ca}
    # The cluster's reaction: the API server calls KServe's webhooks (failurePolicy Fail) over TLS,
    # trusting that CA, and KServe's validator answers with its refusal. A CA the API server did not
    # trust would fail the call instead ("failed calling webhook ... x509: ...").
    body = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": REFUSED_NAME, "namespace": "kserve"},
        "spec": {"predictor": {"containers": [{"name": "kserve-container", "image": scenario.IMAGE}]}},
    }
    said = _webhook_answer(body)
    assert f'admission webhook "{VALIDATOR}" denied the request' in said, said


def test_14_an_inference_service_becomes_ready_and_a_new_run_updates_it(served: dict) -> None:
    stack: auto.Stack = served["stack"]
    outputs = scenario.outputs(stack.up(on_output=print, show_secrets=False))
    assert outputs["jobOutcome"] == "Succeeded"
    (isvc,) = live.items("inferenceservice", NAMESPACE)
    assert _ready(isvc), isvc.get("status")
    name = isvc["metadata"]["name"]
    predictor = live.get("deployment", f"{name}-predictor", NAMESPACE)
    assert predictor["status"].get("availableReplicas", 0) >= 1
    assert judge.refused_pod_creations(live.events(NAMESPACE)) == []
    # Cluster-local (networking.kserve.io/visibility): KServe made no Ingress, yet the service is Ready.
    assert live.items("ingress", NAMESPACE) == []
    template = predictor["spec"]["template"]

    # The predictor pod KServe's controller, webhook and the Deployment controller made, as admitted,
    # equals the offline model field by field (scenario 5 for the serving pod).
    view = modelled("local-kserve", served["config"])
    model = next(p for p in view.admission.pods if p.owner == f"InferenceService/{name}").manifest
    (pod,) = scenario.wait_for_pods(NAMESPACE, f"serving.kserve.io/inferenceservice={name}")
    assert judge.pod_differences(pod, model, container=model["spec"]["containers"][0]["name"]) == []
    assert scenario.covered_differences(pod["spec"], model["spec"], ".spec") == []
    assert scenario.covered_differences(pod["metadata"], model["metadata"], ".metadata") == []

    served["config"] = {**served["config"], "ddp-mnist:jobRunId": "r2"}
    set_config(stack, served["config"])
    steps: list[tuple[str, str]] = []
    stack.preview(on_output=print, on_event=lambda event: steps.extend(judge.planned_steps(event)))
    server = {op for op, kind in steps if kind == ISVC}
    assert server == {"update"}, steps
    stack.up(on_output=print, show_secrets=False)
    assert _ready(live.get("inferenceservice", name, NAMESPACE))
    assert live.get("deployment", f"{name}-predictor", NAMESPACE)["spec"]["template"] != template

    again = stack.up(on_output=print, show_secrets=False)
    assert scenario.changes(again.summary.resource_changes) == {}
    stack.refresh(on_output=print)
    assert scenario.changes(stack.preview(on_output=print).change_summary) == {}


def test_15_up_returns_once_the_new_model_serves_and_a_wait_setting_restarts_nothing(served: dict) -> None:
    stack: auto.Stack = served["stack"]
    (isvc,) = live.items("inferenceservice", NAMESPACE)
    name = isvc["metadata"]["name"]
    deployment = f"{name}-predictor"
    before = live.get("deployment", deployment, NAMESPACE)
    assert not [
        k for k in before["spec"]["template"]["metadata"]["annotations"] if k.startswith("pulumi.com/")
    ]

    # A wait setting is Pulumi's alone: no pod of the server is touched.
    served["config"] = {**served["config"], "ddp-mnist:serveWaitTimeoutSeconds": "900"}
    set_config(stack, served["config"])
    stack.up(on_output=print, show_secrets=False)
    after = live.get("deployment", deployment, NAMESPACE)
    assert after["metadata"]["generation"] == before["metadata"]["generation"]

    # A new run whose server pod takes 20 s to become ready: `up` returns only once it serves.
    served["config"] = {**served["config"], "ddp-mnist:jobRunId": "r3"}
    set_config(stack, served["config"])
    pods = {"serving.kserve.io/inferenceservice": name}
    with scenario.slow_ready_pods("slow-model-load", NAMESPACE, pods, SLOW_LOAD_S):
        outputs = scenario.outputs(stack.up(on_output=print, show_secrets=False))
        rolled = live.get("deployment", deployment, NAMESPACE)
    assert outputs["serveOutcome"] == "Serving"
    assert rolled["metadata"]["generation"] > after["metadata"]["generation"]
    status, replicas = rolled["status"], rolled["spec"]["replicas"]
    assert status["observedGeneration"] == rolled["metadata"]["generation"]
    assert status.get("updatedReplicas") == status.get("availableReplicas") == replicas, status
    assert status.get("replicas") == replicas, status  # no pod of the old template counted


@pytest.mark.skipif(
    os.environ.get("E2E_LOCAL_SLOW") != "1",
    reason="waits out KServe's fixed 600-s rollout deadline; run with E2E_LOCAL_SLOW=1",
)
def test_16_a_model_version_that_never_serves_fails_up_with_one_line_and_the_old_one_serves(
    served: dict,
) -> None:
    """The new server pod never becomes ready: KServe v0.20.0 gives its predictor Deployment a
    600-s progress deadline, after which `PredictorReady` reads ProgressDeadlineExceeded; the wait
    ends there and `up` fails with one line. The old pod still serves."""
    stack: auto.Stack = served["stack"]
    (isvc,) = live.items("inferenceservice", NAMESPACE)
    name = isvc["metadata"]["name"]
    assert int(served["config"].get("ddp-mnist:serveWaitTimeoutSeconds", "600")) > 600
    served["config"] = {**served["config"], "ddp-mnist:jobRunId": "r4"}
    set_config(stack, served["config"])
    pods = {"serving.kserve.io/inferenceservice": name}
    with scenario.slow_ready_pods("model-never-loads", NAMESPACE, pods, 3600):
        with pytest.raises(auto.CommandError) as failed:
            stack.up(on_output=print, show_secrets=False)
        deployment = live.get("deployment", f"{name}-predictor", NAMESPACE)
    lines = judge.messages(str(failed.value), rf"InferenceService {name}: model version r4 did not")
    assert len(lines) == 1, str(failed.value)[-3000:]
    assert "(ProgressDeadlineExceeded)" in lines[0] and f"logs deployment/{name}-predictor" in lines[0]
    assert deployment["status"].get("availableReplicas", 0) >= 1  # the old pod answers meanwhile
