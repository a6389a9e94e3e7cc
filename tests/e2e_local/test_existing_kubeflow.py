"""A cluster that already runs Kubeflow's training operator (docs/EXISTING-KUBEFLOW.md), against the real
engine, API server, controller manager and operator v1.9.4:

17. the operator installed as the Kubeflow platform installs it (its module's `manifests/overlays/kubeflow`,
    `kubectl apply --server-side`, no transform) makes Worker pods the restricted namespace refuses;
    a platform stack with `operatorPatchExisting` patches it, its smoke check passes, and a Worker pod
    the patched operator then creates carries the restricted init container and is admitted; the
    Deployment's own fields (args, image, mounts) are untouched; destroy takes the patch's fields away
    and leaves the operator running; the page's kubectl recipe does the same as the stack, and its undo
    the same as destroy.

This module installs the operator itself, so it runs before any scenario that brings up the session's
platform stack (conftest.py orders it first), and removes it when done (E2E_KEEP=1 leaves it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from infra.localcluster import sources
from infra.program.platform.operator_patch import FIELD_MANAGER
from infra.program.platform.smoke import pytorchjob_spec
from infra.program.platform.training_operator import RESTRICTED_INIT_CONTAINER_TEMPLATE, TEMPLATE_ANNOTATION
from infra.program.settings import OPERATOR_INIT_IMAGE, Settings
from infra.review.effective.pytorchjob import render_init_containers
from tests.docs.existing_kubeflow import recipe_patch, recipe_undo
from tests.e2e import judge, live
from tests.e2e.project import Backend
from tests.e2e.stacks import platform_config
from tests.e2e_local import scenario
from tests.e2e_local.conftest import KEEP

pytestmark = pytest.mark.e2e_local

OPERATOR, OPERATOR_NAMESPACE = "training-operator", "kubeflow"
NAMESPACE = "ddp-mnist-local-kubeflow"  # enforces Pod Security "restricted", as the job stacks' do
KUBEFLOW_OVERLAY = sources.operator_overlay().parent / "kubeflow"


def _operator() -> dict[str, Any]:
    """The operator's Deployment, with its managedFields (kubectl leaves them out by default)."""
    shown = live.kubectl(
        "get", "deployment", OPERATOR, "-n", OPERATOR_NAMESPACE, "-o", "json", "--show-managed-fields"
    )
    return dict(json.loads(shown))


def _rolled_out() -> None:
    live.kubectl("-n", OPERATOR_NAMESPACE, "rollout", "status", f"deployment/{OPERATOR}", "--timeout=180s")


def _own_fields(deployment: dict[str, Any]) -> dict[str, Any]:
    """What the Kubeflow install set on the operator's container and pod: what no patch may change."""
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    return {
        "args": container.get("args"),
        "command": container.get("command"),
        "image": container["image"],
        "env": container.get("env"),
        "mounts": [m for m in container.get("volumeMounts", []) if m["mountPath"] != "/etc/config"],
        "volumes": [
            v for v in pod["spec"].get("volumes", []) if v["name"] != "pytorch-init-container-template"
        ],
        "annotations": {k: v for k, v in pod["metadata"]["annotations"].items() if k != TEMPLATE_ANNOTATION},
    }


def _patched(deployment: dict[str, Any]) -> bool:
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    return (
        TEMPLATE_ANNOTATION in pod["metadata"].get("annotations", {})
        or any(m["mountPath"] == "/etc/config" for m in container.get("volumeMounts", []))
        or any(v["name"] == "pytorch-init-container-template" for v in pod["spec"].get("volumes", []))
    )


def _managers(deployment: dict[str, Any]) -> set[str]:
    return {entry["manager"] for entry in deployment["metadata"].get("managedFields", [])}


def _pytorchjob(name: str) -> dict[str, Any]:
    """The smoke check's Master and Worker (restricted pods), its pods kept after the end for a look."""
    spec = pytorchjob_spec(Settings.model_validate({}), name)
    spec["runPolicy"] = {"backoffLimit": 0, "cleanPodPolicy": "None"}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def _run_job(name: str, timeout_s: float = 90) -> None:
    """Create the job; its admission webhook is the operator's, which may still be starting."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            live.kubectl("apply", "-f", "-", stdin=json.dumps(_pytorchjob(name)))
            return
        except RuntimeError as error:
            if "webhook" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(2)


def _worker(name: str, timeout_s: float = 90) -> dict[str, Any] | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if live.exists("pod", f"{name}-worker-0", NAMESPACE):
            return live.get("pod", f"{name}-worker-0", NAMESPACE)
        time.sleep(1)
    return None


def _refusals(name: str, timeout_s: float = 90) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        refused = [
            r for r in judge.refused_pod_creations(live.events(NAMESPACE)) if f"PyTorchJob/{name}:" in r
        ]
        if refused:
            return refused
        time.sleep(1)
    return []


def _restricted_init_container(job: str) -> dict[str, Any]:
    (init,) = render_init_containers(
        RESTRICTED_INIT_CONTAINER_TEMPLATE, f"{job}-master-0", OPERATOR_INIT_IMAGE, 100
    )
    return init


# The operator's pod is Ready only once its webhook serves (v1.9.4 cmd/training-operator.v1/main.go
# `setupProbeEndpoints`: readyz waits for the certificates, then the webhook server), so a rollout keeps
# the old pod serving until then. KWOK's pods are Ready at once and the stand-in restarts its process at
# once: a stage holds the new pod's readiness for the time the new process takes to serve, or the
# smoke check's PyTorchJob meets no webhook (found by this scenario's first runs).
READY_AFTER_S = 10


@pytest.fixture(scope="module")
def kubeflow(local_cluster: object) -> Iterator[dict[str, Any]]:
    """The operator as the Kubeflow platform installs it: the namespace first, then the overlay."""
    assert not live.exists("deployment", OPERATOR, OPERATOR_NAMESPACE), (
        "scenario 17 needs a cluster without the training operator (it runs before the platform stack)"
    )
    with scenario.slow_ready_pods(
        "ddp-mnist-operator-ready",
        OPERATOR_NAMESPACE,
        {"control-plane": "kubeflow-training-operator"},
        READY_AFTER_S,
    ):
        yield from _kubeflow_operator()


def _kubeflow_operator() -> Iterator[dict[str, Any]]:
    live.kubectl("create", "namespace", OPERATOR_NAMESPACE)
    live.kubectl("apply", "--server-side", "-k", str(KUBEFLOW_OVERLAY), timeout=180)
    live.kubectl("wait", "crd/pytorchjobs.kubeflow.org", "--for=condition=Established", "--timeout=60s")
    _rolled_out()
    live.kubectl("create", "namespace", NAMESPACE)
    modes = ("enforce", "warn", "audit")
    live.kubectl(
        "label", "namespace", NAMESPACE, *(f"pod-security.kubernetes.io/{m}=restricted" for m in modes)
    )
    yield {"pristine": _operator()}
    if not KEEP:
        live.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=180s", timeout=240)
        live.kubectl(
            "delete", "-k", str(KUBEFLOW_OVERLAY), "--ignore-not-found", "--timeout=180s", timeout=240
        )
        live.kubectl(
            "delete", "namespace", OPERATOR_NAMESPACE, "--ignore-not-found", "--timeout=180s", timeout=240
        )


@pytest.fixture(scope="module")
def patch_stack(backend: Backend, kubeflow: dict[str, Any]) -> Iterator[dict[str, Any]]:
    config = {
        **platform_config(scenario.IMAGE),
        "ddp-mnist:operatorInstall": "false",
        "ddp-mnist:operatorPatchExisting": "true",
    }
    stack = scenario.stack(backend, "local-kubeflow-patch", config)
    state: dict[str, Any] = {"stack": stack, "destroyed": False}
    yield state
    if not KEEP and not state["destroyed"]:
        stack.destroy(on_output=print)


def test_17a_kubeflows_own_operator_makes_workers_the_restricted_namespace_refuses(kubeflow: dict) -> None:
    assert not _patched(kubeflow["pristine"])
    _run_job("pristine")
    refused = _refusals("pristine")
    assert refused and 'container "init-pytorch" must set securityContext' in refused[0], refused
    live.kubectl("delete", "pytorchjob", "pristine", "-n", NAMESPACE, "--wait=true")


def test_17b_a_platform_stack_patches_it_and_its_workers_are_admitted(
    kubeflow: dict, patch_stack: dict
) -> None:
    started = time.monotonic()
    outputs = scenario.outputs(patch_stack["stack"].up(on_output=print, show_secrets=False))
    print(f"up of the patching platform stack: {time.monotonic() - started:.0f} s")
    assert outputs["operatorPatched"] == f"{OPERATOR_NAMESPACE}/{OPERATOR}"
    assert outputs["operatorSmokeCheck"] == "Succeeded"
    deployment = _operator()
    assert _patched(deployment)
    assert _own_fields(deployment) == _own_fields(kubeflow["pristine"])
    assert FIELD_MANAGER in _managers(deployment)
    _run_job("patched")
    worker = _worker("patched")
    assert worker is not None, judge.refused_pod_creations(live.events(NAMESPACE))
    (init,) = worker["spec"]["initContainers"]
    assert scenario.covered_differences(init, _restricted_init_container("patched")) == []
    assert not [r for r in judge.refused_pod_creations(live.events(NAMESPACE)) if "PyTorchJob/patched:" in r]
    live.kubectl("delete", "pytorchjob", "patched", "-n", NAMESPACE, "--wait=true")


def test_17c_destroy_takes_the_patch_away_and_leaves_the_operator(kubeflow: dict, patch_stack: dict) -> None:
    patch_stack["stack"].destroy(on_output=print)
    patch_stack["destroyed"] = True
    _rolled_out()
    deployment = _operator()
    assert not _patched(deployment)
    assert FIELD_MANAGER not in _managers(deployment)
    assert "pulumi.com/patchFieldManager" not in deployment["metadata"].get("annotations", {})
    assert _own_fields(deployment) == _own_fields(kubeflow["pristine"])
    assert deployment["status"].get("availableReplicas") == 1
    assert live.exists("crd", "pytorchjobs.kubeflow.org")


def test_17d_the_pages_kubectl_recipe_does_what_the_stack_does_and_its_undo_what_destroy_does(
    kubeflow: dict,
) -> None:
    live.kubectl(
        "apply",
        "--server-side",
        f"--field-manager={FIELD_MANAGER}",
        "-f",
        "-",
        stdin=json.dumps(recipe_patch()),
    )
    _rolled_out()
    deployment = _operator()
    assert _patched(deployment) and _own_fields(deployment) == _own_fields(kubeflow["pristine"])
    _run_job("recipe")
    worker = _worker("recipe")
    assert worker is not None, judge.refused_pod_creations(live.events(NAMESPACE))
    assert (
        scenario.covered_differences(
            worker["spec"]["initContainers"][0], _restricted_init_container("recipe")
        )
        == []
    )
    live.kubectl("delete", "pytorchjob", "recipe", "-n", NAMESPACE, "--wait=true")

    command, body = recipe_undo()
    assert command.startswith("kubectl apply --server-side ")
    live.kubectl(*command.split()[1:], stdin=json.dumps(body))
    _rolled_out()
    deployment = _operator()
    assert not _patched(deployment) and FIELD_MANAGER not in _managers(deployment)
    assert _own_fields(deployment) == _own_fields(kubeflow["pristine"])
