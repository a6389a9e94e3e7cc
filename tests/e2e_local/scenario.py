"""What the local tier's scenarios share: their stacks' config, the Automation API calls they judge,
and the KWOK failure stages they set.

The job stacks are the `make e2e` tier's (tests/e2e/stacks.py: the dev stack's twin as a job stack),
with an image pinned by a digest nothing pulls (pods run no process under KWOK), and the platform stack
first takes the operator's overlay from the training-operator module the tier built (as a stack that
installed it from upstream's git URL did; scenario 23 moves it to the vendored default, infra/manifests),
Trainer v2 and KServe from infra/manifests: nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pulumi import automation as auto

from infra.localcluster import cluster, fleet, sources
from infra.localcluster.build import module_dir
from infra.localcluster.parts import PARTS
from infra.program.common.meta import JOB_LABEL
from tests.e2e import judge, live
from tests.e2e.project import Backend, program_stack, set_config
from tests.e2e.stacks import job_config
from tests.e2e.stacks import platform_config as e2e_platform_config
from tests.e2e.stacks import prerequisites_config as e2e_prerequisites_config

IMAGE = "ghcr.io/ddp-mnist/trainer@sha256:" + "5" * 64
KEEP = os.environ.get("E2E_KEEP") == "1"  # leave every stack and namespace for a look
KEYS = ("local-access-key", "local-secret-key-0123456789")
STAGES = "/apis/kwok.x-k8s.io/v1alpha1/stages"
PLACEHOLDER = re.compile(r"<[a-z-]+>")


def prerequisites_config() -> dict[str, str]:
    """The `make e2e` tier's dev-prereqs stack, with csi-driver-nfs's chart from the pinned archive the
    tier keeps (what `nfsCsiChart` points an air-gapped cluster at)."""
    chart = {"ddp-mnist:nfsCsiChart": str(sources.csi_driver_nfs_chart())}
    return {**e2e_prerequisites_config(IMAGE, *KEYS), **chart}


PRIORITY_CLASS, PRIORITY = "training-high", 100000  # the platform stack's, as eks-platform's


def keep_logs(state: cluster.State, tier: str) -> Path:
    """The cluster's logs (its processes', the stand-ins' pods', the real node's when it has one) copied
    to build/<tier>/logs, replacing the last run's, before the teardown removes the cluster's directory:
    what a failed scenario leaves to read."""
    target = Path(__file__).resolve().parents[2] / "build" / tier / "logs"
    shutil.rmtree(target, ignore_errors=True)
    for source, under in (
        (state.directory / "logs", target),
        (state.directory / "node" / "logs", target / "node"),
    ):
        if source.is_dir():
            shutil.copytree(source, under, dirs_exist_ok=True)
    print(f"cluster: its logs copied to {target}")
    return target


def platform_config() -> dict[str, str]:
    return {
        **e2e_platform_config(IMAGE),
        "ddp-mnist:operatorSource": str(sources.operator_overlay()),
        "ddp-mnist:priorityClasses": json.dumps([f"{PRIORITY_CLASS}={PRIORITY}"]),
        "ddp-mnist:gpuDevicePlugin": "install",  # as eks-platform's and aks-platform's
        "ddp-mnist:gpuSmokeNodeSelector": json.dumps(["node.kubernetes.io/instance-type=g5.12xlarge"]),
        "ddp-mnist:gpuNodeTolerations": json.dumps(["sku=gpu:NoSchedule"]),  # as aks-platform's
    }


def as_declared(config: dict[str, str], facts: Mapping[str, Any]) -> dict[str, str]:
    """A job stack's config that names its platform stack, as the offline model reads it: without
    `platformStack`, and the declarations that stack's facts (its live `platform` output) decide set
    to what they decide."""
    from infra.program.common import platform_facts as platform
    from infra.program.common.config import settings_from_raw
    from tests.e2e.stacks import as_stack

    stack = as_stack("model", config)
    settings, has_keys = settings_from_raw(stack.values, set(stack.secret_keys))
    taken = platform.take(settings, facts, "model", has_keys)
    declared = {k: v for k, v in config.items() if k != "ddp-mnist:platformStack"}
    for name in platform.DECLARATIONS:
        value = getattr(taken, name)
        declared[f"ddp-mnist:{platform.config_key(name)}"] = (
            str(value).lower() if isinstance(value, bool) else str(value)
        )
    return declared


def update_platform(platform: dict, extra: dict[str, str]) -> auto.UpResult:
    """`up` of the session's platform stack with `extra` added to the config earlier scenarios gave it
    (so a later scenario never takes away what an earlier one installed)."""
    platform["config"] = {**platform.get("config", platform_config()), **extra}
    set_config(platform["stack"], platform["config"])
    return platform["stack"].up(on_output=print, show_secrets=False)


def job_stack(backend: Backend, name: str, namespace: str, **overrides: str) -> Iterator[dict]:
    """A module's job stack (`new_job_stack`) as {"stack", "config"}, destroyed after the module
    (`destroy`). Use with `yield from` in a fixture."""
    created, config = new_job_stack(backend, name, namespace, **overrides)
    yield {"stack": created, "config": config}
    destroy(created, namespace)


def new_job_stack(
    backend: Backend, name: str, namespace: str, **overrides: str
) -> tuple[auto.Stack, dict[str, str]]:
    """A job stack `local-<name>`: the dev stack's twin, `overrides` by key name, in `namespace`."""
    config = job_config(
        IMAGE, *KEYS, namespace=namespace, storageClassName=f"ddp-mnist-nfs-{name}", **overrides
    )
    return stack(backend, f"local-{name}", config), config


def destroy(created: auto.Stack, namespace: str) -> None:
    """The stack destroyed and its namespace deleted (what a destroy keeps goes with it), unless
    E2E_KEEP=1."""
    if not KEEP:
        created.destroy(on_output=print)
        live.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=false")


def stack(backend: Backend, name: str, config: dict[str, str]) -> auto.Stack:
    return program_stack(backend, name, config)


def outputs(result: auto.UpResult) -> dict[str, Any]:
    return {key: value.value for key, value in result.outputs.items()}


def controller_ingress(deployment: str, namespace: str) -> list[int | str]:
    """The platform's ingress policy of a controller as the real API server holds it (it admitted it):
    the pods its selector picks are exactly the Deployment's running ones; the ports it admits, as a
    list. (Whether the policy blocks anything needs a policy engine, which this tier has not.)"""
    policy = live.get("networkpolicy", f"ddp-mnist-{deployment}-ingress", namespace)
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"], spec
    selected = live.items(
        "pod", namespace, ",".join(f"{k}={v}" for k, v in spec["podSelector"]["matchLabels"].items())
    )
    owned = [p for p in live.items("pod", namespace) if p["metadata"]["name"].startswith(f"{deployment}-")]
    assert owned and sorted(p["metadata"]["name"] for p in selected) == sorted(
        p["metadata"]["name"] for p in owned
    )
    return [port["port"] for rule in spec.get("ingress") or [] for port in rule.get("ports") or []]


def changes(summary: Mapping[Any, int] | None) -> dict[Any, int]:
    """An update's or preview's resource changes other than `same`."""
    return {op: count for op, count in (summary or {}).items() if op != "same" and count}


# The kinds a `ttlSecondsAfterFinished` can delete from under a stack (the platform's smoke checks set it).
EXPIRING_KINDS = {
    "kubernetes:batch/v1:Job": "job",
    "kubernetes:kubeflow.org/v1:PyTorchJob": "pytorchjob",
    "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob": "trainjob",
}


# Steps that change nothing: a resource kept as it is, or one read from elsewhere (a job stack's
# StackReference to its platform is a `read` at every preview).
UNCHANGED = frozenset({"same", "read", "refresh"})


def gone_from_the_cluster(resources: list[dict]) -> set[str]:
    """The URNs of the jobs among a stack's `resources` (its exported state) that the cluster no longer
    has."""
    gone = set()
    for resource in resources:
        kind = EXPIRING_KINDS.get(resource["type"])
        meta = (resource.get("outputs") or {}).get("metadata") or {}
        if kind and meta.get("name") and not live.exists(kind, meta["name"], meta.get("namespace")):
            gone.add(resource["urn"])
    return gone


def preview_after_refresh(stack: auto.Stack) -> None:
    """`refresh`, then a preview that changes nothing but this: it creates again the finished jobs that
    their `ttlSecondsAfterFinished` deleted (the smoke checks': 600 s, which a slow run of the tier
    passes), as `pulumi up --refresh` runs them again by design (docs/explanation/init-container.md).
    A job gone before the refresh must be created; one gone by the end may be; nothing else changes."""
    resources = (stack.export_stack().deployment or {}).get("resources", [])
    gone_before = gone_from_the_cluster(resources)
    stack.refresh(on_output=print)
    steps: list[tuple[str, str]] = []

    def step(event: Any) -> None:
        pre = getattr(event, "resource_pre_event", None)
        op = str(getattr(pre.metadata.op, "value", pre.metadata.op)) if pre is not None else ""
        if op and op not in UNCHANGED:
            steps.append((op, pre.metadata.urn))

    preview = stack.preview(on_output=print, on_event=step)
    gone_after = gone_from_the_cluster(resources)
    created = {urn for op, urn in steps if op == "create"}
    assert [s for s in steps if s[0] != "create"] == [], steps
    assert gone_before <= created <= gone_after, (steps, gone_before, gone_after)
    assert changes(preview.change_summary) == ({"create": len(created)} if created else {})
    if created:
        print(
            f"the preview after refresh creates again what ttlSecondsAfterFinished deleted: {sorted(created)}"
        )


@contextmanager
def failing_pods(name: str, namespace: str, labels: dict[str, str], exit_code: int) -> Iterator[None]:
    """While inside, the running job pods of `namespace` with `labels` exit with `exit_code`."""
    with stages(fleet.failure_stage(name, namespace, labels, exit_code)):
        yield


@contextmanager
def stages(*bodies: dict) -> Iterator[None]:
    """While inside, the KWOK stages `bodies` (fleet's builders) play in the cluster."""
    for body in bodies:
        live.kubectl("apply", "-f", "-", stdin=_json(body))
    try:
        yield
    finally:
        for body in bodies:
            live.kubectl("delete", "stage", body["metadata"]["name"], "--ignore-not-found")


def evict(pod: str, namespace: str) -> None:
    """The API's eviction of `pod` (what `kubectl drain` and a spot node's termination handler call):
    the API server adds `DisruptionTarget` (reason EvictionByEvictionAPI) and deletes the pod
    gracefully (kubernetes v1.33.13 `pkg/registry/core/pod/storage/eviction.go`,
    addConditionAndDeletePod)."""
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}}
    path = f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction"
    live.kubectl("create", "--raw", path, "-f", "-", stdin=_json(body))


def wait_running(
    namespace: str, selector: str, count: int, timeout_s: float = 120, besides: frozenset[str] = frozenset()
) -> list[dict]:
    """The `count` running pods of `namespace` that `selector` selects, by name, once there are; pods
    whose uid is in `besides` are not counted."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pods = [
            p
            for p in live.items("pod", namespace, selector)
            if p.get("status", {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
            and p["metadata"]["uid"] not in besides
        ]
        if len(pods) == count:
            return sorted(pods, key=lambda p: p["metadata"]["name"])
        time.sleep(1)
    return []


@contextmanager
def slow_ready_pods(name: str, namespace: str, labels: dict[str, str], delay_s: int) -> Iterator[None]:
    """While inside, new pods of `namespace` with `labels` become Ready only `delay_s` after scheduling."""
    kwok = module_dir(PARTS["kwok"].directory, "sigs.k8s.io/kwok")
    body = fleet.slow_ready_stage(kwok, name, namespace, labels, delay_s)
    live.kubectl("apply", "-f", "-", stdin=_json(body))
    try:
        yield
    finally:
        live.kubectl("delete", "stage", name, "--ignore-not-found")


def wait_for_failed_pod(namespace: str, exit_code: int, timeout_s: float = 120) -> str | None:
    """The name of the first pod of `namespace` that ended with `exit_code`, once there is one: seen
    in its status, or, since the training operator deletes a pod it retries (restart policy
    ExitCode) at once, in the operator's event about it (`exited_with_codes`)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for pod in live.items("pod", namespace):
            for status in pod.get("status", {}).get("containerStatuses", []):
                if status.get("state", {}).get("terminated", {}).get("exitCode") == exit_code:
                    return str(pod["metadata"]["name"])
        for pod, code in _operator_exits(namespace):
            if code == exit_code:
                return pod
        time.sleep(1)
    return None


def exited_with_codes(namespace: str) -> set[int]:
    """The exit codes of the pods the training operator saw end in `namespace`."""
    return {code for _, code in _operator_exits(namespace)}


def _operator_exits(namespace: str) -> list[tuple[str, int]]:
    """(pod, exit code) of the training operator's events (v1.9.4 `pkg/controller.v1/common/pod.go`:
    reason ExitedWithCode, "Pod: <namespace>.<name> exited with code <code>")."""
    found = []
    for event in live.events(namespace):
        matched = re.fullmatch(r"Pod: [^.]+\.(\S+) exited with code (\d+)", str(event.get("message", "")))
        if event.get("reason") == "ExitedWithCode" and matched:
            found.append((matched.group(1), int(matched.group(2))))
    return found


def wait_for_pods(namespace: str, selector: str, timeout_s: float = 60) -> list[dict]:
    """The pods of `namespace` that `selector` selects, once there is at least one."""
    deadline = time.monotonic() + timeout_s
    while not (pods := live.items("pod", namespace, selector)) and time.monotonic() < deadline:
        time.sleep(1)
    return pods


def wait_outcome(kind: str, name: str, namespace: str, timeout_s: float = 180) -> str | None:
    """The job's final condition (Complete/Succeeded/Failed) once it has one."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        obj = live.get(kind, name, namespace) if live.exists(kind, name, namespace) else {}
        outcome = judge.job_condition(obj) if obj else None
        if outcome in ("Complete", "Succeeded", "Failed"):
            return outcome
        time.sleep(1)
    return None


JOB_TRACKING = "batch.kubernetes.io/job-tracking"


def as_finished(model: dict, pod: dict) -> dict:
    """The model of a Job's pod as it is once it ended: the Job controller adds its tracking finalizer
    at creation and removes it once it has counted the finished pod (kubernetes v1.33.13
    pkg/controller/job/job_controller.go: trackJobStatusAndRemoveFinalizers,
    removeTrackingFinalizerFromPods)."""
    if pod.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
        return model
    finalizers = [f for f in model["metadata"].get("finalizers", []) if f != JOB_TRACKING]
    metadata = {k: v for k, v in model["metadata"].items() if k != "finalizers"}
    return {**model, "metadata": {**metadata, **({"finalizers": finalizers} if finalizers else {})}}


def covered_differences(live: Any, model: Any, path: str = "") -> list[str]:
    """Where the live object differs from the model, for every field the model sets (dict keys the model
    leaves out are the API server's or a controller's to add: `added_fields` lists them). Generated
    names are compared by the model's prefix, and a generated value the model shows as a placeholder
    (`<uid>`) matches any."""
    if isinstance(model, dict):
        if not isinstance(live, dict):
            return [f"{path or '.'}: live {json.dumps(live)}, modelled an object"]
        problems = []
        for key, value in model.items():
            if path == ".metadata" and key in ("generateName", "name") and "<" in str(value):
                continue
            problems += covered_differences(live.get(key), value, f"{path}.{key}")
        return problems
    if isinstance(model, list):
        if not isinstance(live, list) or len(live) != len(model):
            shown = json.dumps(live, sort_keys=True), json.dumps(model, sort_keys=True)
            return [f"{path}: live {shown[0]}, modelled {shown[1]}"]
        return [
            d
            for i, (a, b) in enumerate(zip(live, model, strict=True))
            for d in covered_differences(a, b, f"{path}[{i}]")
        ]
    if isinstance(model, str) and PLACEHOLDER.fullmatch(model) and isinstance(live, str) and live:
        return []  # a value the API server or a controller generates (a uid): any one
    if live != model:
        return [f"{path}: live {json.dumps(live)}, modelled {json.dumps(model)}"]
    return []


def added_fields(live: Any, model: Any, path: str = "") -> list[str]:
    """The fields of the live object the model does not set (what the API server and controllers add)."""
    if isinstance(live, dict) and isinstance(model, dict):
        return [
            f
            for key, value in live.items()
            for f in (
                [f"{path}.{key}"] if key not in model else added_fields(value, model[key], f"{path}.{key}")
            )
        ]
    if isinstance(live, list) and isinstance(model, list) and len(live) == len(model):
        return [
            f
            for i, (a, b) in enumerate(zip(live, model, strict=True))
            for f in added_fields(a, b, f"{path}[{i}]")
        ]
    return []


def _json(body: dict) -> str:
    return json.dumps(body)


PEER_STOPPED = "ddp-mnist.local/stopped-with-peers"
REPLACEMENT = "ddp-mnist.local/replacement"
RUN_S = 45  # how long a scenario 25 pod trains: time to evict one and stop its peer, under load


def preempt_rank_0(stack: auto.Stack, namespace: str, job: str, live_kind: str) -> dict[str, Any]:
    """Scenario 25's run: `up` of a job stack not awaited whose two pods are kept Running for RUN_S by
    a KWOK stage; the first pod by name (rank 0) is evicted through the real API, and KWOK stages this
    test sets write the exits the trainer would have (143 for the evicted pod, 201 for its peer:
    trainer/preempt.py; the local scheduler runs the real trainer's). No process ran: what is real is
    the API server's eviction and the controllers' reaction to those exits. The two pods that replace
    them are labelled once running, which hands them to the fleet's stage that ends job pods with exit
    0 after a moment, as a resumed run would end, instead of waiting out RUN_S again.
    Returns the evicted pod as read right after the eviction, the job's outcome and the uids seen."""
    selector = f"{JOB_LABEL}={job}"
    with stages(
        fleet.long_run_stage(
            f"{namespace}-runs", namespace, {JOB_LABEL: job}, RUN_S, (PEER_STOPPED, REPLACEMENT)
        ),
        fleet.sigterm_stage(f"{namespace}-sigterm", namespace, 143),
        fleet.failure_stage(f"{namespace}-peer", namespace, {PEER_STOPPED: "true"}, 201),
    ):
        stack.up(on_output=print, show_secrets=False)
        pods = wait_running(namespace, selector, 2)
        assert len(pods) == 2, f"no two running pods of {job} in {namespace}"
        first, peer = (p["metadata"]["name"] for p in pods)
        first_uids = frozenset(p["metadata"]["uid"] for p in pods)
        evict(first, namespace)
        evicted = live.get("pod", first, namespace)
        live.kubectl("label", "pod", peer, "-n", namespace, f"{PEER_STOPPED}=true")
        for pod in wait_running(namespace, selector, 2, besides=first_uids):
            live.kubectl("label", "pod", pod["metadata"]["name"], "-n", namespace, f"{REPLACEMENT}=true")
        outcome = wait_outcome(live_kind, job, namespace)
    return {
        "evicted": evicted,
        "outcome": outcome,
        "first_uids": set(first_uids),
        "final_pods": live.items("pod", namespace, selector),
    }


def disruption(pod: dict) -> dict | None:
    """The pod's DisruptionTarget condition, if it has one."""
    found = [c for c in pod.get("status", {}).get("conditions", []) if c["type"] == "DisruptionTarget"]
    return found[0] if found else None
