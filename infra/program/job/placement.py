"""Why a workload's pods have not started: the first-deploy failures that otherwise cost a whole wait.

Pure functions over what the API server returns (plain dicts, as `kubectl get -o json` prints them):
`diagnose` reads one snapshot of a workload, its pods, the claims those pods mount and the namespace's
Warning events, and returns the one line that says what stops it, once it has stopped it for longer
than the bound. `infra/program/job/runwatch.py` polls the snapshots while `pulumi up` waits.

What the lines rest on (Kubernetes v1.35):
- The scheduler records an unschedulable pod as condition PodScheduled=False, reason Unschedulable, its
  message the per-node reasons ("0/3 nodes are available: 3 Insufficient nvidia.com/gpu. ...";
  `pkg/scheduler/schedule_one.go` handleSchedulingFailure). A pod whose claim is unbound says so there
  ("pod has unbound immediate PersistentVolumeClaims").
- A claim that no volume satisfies stays Pending; the PV controller records why as events on the claim:
  `ProvisioningFailed` (`storageclass.storage.k8s.io "x" not found`), or `ExternalProvisioning` while it
  waits for a CSI provisioner that never answers when its driver is not installed
  (`pkg/controller/volume/persistentvolume/pv_controller.go`).
- A pod that admission refuses is never created; the Job controller records `FailedCreate` on the Job
  (`pkg/controller/job/job_controller.go`), the training operator its own Warning on the PyTorchJob
  (no PriorityClass, a Pod Security violation, an exhausted ResourceQuota).
- Cluster autoscaler records `TriggeredScaleUp` on a pod it is adding nodes for and `NotTriggerScaleUp`
  with its reason when no node group fits (cluster-autoscaler
  `processors/status/eventing_scale_up_processor.go`);
  Karpenter records `Nominated` on a pod it has a node coming for. Nodes on their way are progress: the
  bound counts again from the latest such event.
- A workload held suspended (Kueue waiting for quota), or a pod held by its scheduling gates
  (PodScheduled=False, reason SchedulingGated), is waiting by design: no bound applies.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

# Containers waiting for one of these reasons will not start without a change (a missing image or
# secret, a refused pull): a bound after the pod was scheduled, as for an unschedulable pod.
STUCK_CONTAINER_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)
NODES_COMING = frozenset({"TriggeredScaleUp", "Nominated"})


def parse_time(value: str | None) -> datetime | None:
    """An API timestamp (RFC 3339, `Z`) as an aware datetime."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _age(since: datetime | None, now: datetime) -> float:
    return (now - since).total_seconds() if since else 0.0


@dataclass(frozen=True)
class Snapshot:
    """One poll: the workload (None: not found), its pods, the claims they mount and Warning events."""

    kind: str
    name: str
    namespace: str
    workload: Mapping[str, Any] | None
    pods: list[Mapping[str, Any]] = field(default_factory=list)
    claims: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)
    classes: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)
    events: list[Mapping[str, Any]] = field(default_factory=list)
    expected_pods: int = 1  # how many pods the workload runs at once (one per node)


def suspended(workload: Mapping[str, Any]) -> bool:
    """Held by `spec.suspend` (Job, TrainJob) or `spec.runPolicy.suspend` (PyTorchJob)."""
    spec = workload.get("spec") or {}
    return bool(spec.get("suspend") or (spec.get("runPolicy") or {}).get("suspend"))


def _events_of(events: Iterable[Mapping[str, Any]], kind: str, name: str) -> list[Mapping[str, Any]]:
    """The events about one object, latest last."""
    found = [
        e
        for e in events
        if (e.get("involvedObject") or {}).get("kind") == kind
        and (e.get("involvedObject") or {}).get("name") == name
    ]
    return sorted(found, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")


def _latest(
    events: list[Mapping[str, Any]], reasons: frozenset[str] | None = None, warning: bool = False
) -> Any:
    chosen = [
        e
        for e in events
        if (reasons is None or e.get("reason") in reasons) and (not warning or e.get("type") == "Warning")
    ]
    return chosen[-1] if chosen else None


def _event_time(event: Mapping[str, Any]) -> datetime | None:
    return parse_time(event.get("lastTimestamp") or event.get("eventTime"))


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition
    return None


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _describe(namespace: str, kind: str, name: str) -> str:
    return f"kubectl -n {namespace} describe {kind} {name}"


def claim_names(pod: Mapping[str, Any]) -> list[str]:
    """The PersistentVolumeClaims a pod mounts."""
    volumes = (pod.get("spec") or {}).get("volumes") or []
    return [v["persistentVolumeClaim"]["claimName"] for v in volumes if v.get("persistentVolumeClaim")]


SELECTED_NODE = "volume.kubernetes.io/selected-node"


def waits_for_its_pod(claim: Mapping[str, Any], snapshot: Snapshot) -> bool:
    """A claim of a WaitForFirstConsumer class that no scheduled pod has picked a node for yet: it is
    unbound because the pod is unscheduled, so the pod's own reason is the cause (the scheduler sets
    `volume.kubernetes.io/selected-node` on the claim once it has chosen a node)."""
    class_name = (claim.get("spec") or {}).get("storageClassName")
    storage_class = snapshot.classes.get(class_name or "")
    binding = (storage_class or {}).get("volumeBindingMode")
    selected = SELECTED_NODE in ((claim.get("metadata") or {}).get("annotations") or {})
    return binding == "WaitForFirstConsumer" and not selected


def claim_problem(snapshot: Snapshot, claim_name: str, waited: float) -> str | None:
    """Why a claim is still unbound: its class (with its provisioner) and the PV controller's reason."""
    claim = snapshot.claims.get(claim_name)
    ns = snapshot.namespace
    if claim is None:
        return f"PersistentVolumeClaim {ns}/{claim_name} does not exist; {_describe(ns, 'pod', '-l ...')}"
    if (claim.get("status") or {}).get("phase") == "Bound":
        return None
    if waits_for_its_pod(claim, snapshot):
        return None  # WaitForFirstConsumer: nothing to provision before the pod has a node
    class_name = (claim.get("spec") or {}).get("storageClassName") or "(the default class)"
    storage_class = snapshot.classes.get(class_name)
    if storage_class is None and class_name in snapshot.classes:
        where = f"class {class_name}, which does not exist"
    else:
        provisioner = (storage_class or {}).get("provisioner", "unknown")
        where = f"class {class_name}, provisioner {provisioner}"
    events = _events_of(snapshot.events, "PersistentVolumeClaim", claim_name)
    reason = _latest(events, warning=True) or _latest(events)
    why = f"{reason.get('reason')}: {_one_line(reason.get('message', ''))}" if reason else "no event recorded"
    return (
        f"PersistentVolumeClaim {ns}/{claim_name} ({where}) is still unbound after {waited:.0f}s: {why}; "
        f"more: {_describe(ns, 'pvc', claim_name)}"
    )


def pod_problem(snapshot: Snapshot, pod: Mapping[str, Any], now: datetime, bound: float) -> str | None:
    """Why a pod has not started, once it has been stuck for longer than `bound` seconds."""
    ns, name = snapshot.namespace, (pod.get("metadata") or {}).get("name", "?")
    if (pod.get("status") or {}).get("phase") != "Pending":
        return None
    events = _events_of(snapshot.events, "Pod", name)
    scheduled = _condition(pod, "PodScheduled")
    if scheduled is not None and scheduled.get("reason") == "SchedulingGated":
        return None  # held by its scheduling gates (a queue admitting pods), waiting by design
    if scheduled is not None and scheduled.get("status") == "False":
        since = parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
        coming = _latest(events, NODES_COMING)
        if coming is not None and (_event_time(coming) or since) and since:
            since = max(since, _event_time(coming) or since)
        waited = _age(since, now)
        if waited < bound:
            return None
        for claim_name in claim_names(pod):
            problem = claim_problem(snapshot, claim_name, waited)
            if problem:
                return problem
        no_scale_up = _latest(events, frozenset({"NotTriggerScaleUp"}))
        why = _one_line(scheduled.get("message") or scheduled.get("reason") or "not scheduled")
        if no_scale_up is not None:
            why += f" (cluster autoscaler: {_one_line(no_scale_up.get('message', ''))})"
        more = _describe(ns, "pod", name)
        return f"Pod {ns}/{name} cannot be scheduled after {waited:.0f}s: {why}; more: {more}"
    since = parse_time(scheduled.get("lastTransitionTime")) if scheduled else None
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    statuses += (pod.get("status") or {}).get("containerStatuses") or []
    waited = _age(since, now)
    mount = _latest(events, frozenset({"FailedMount", "FailedAttachVolume"}))
    if mount is not None and waited >= bound:
        return (
            f"Pod {ns}/{name} cannot mount its volumes after {waited:.0f}s: {mount.get('reason')}: "
            f"{_one_line(mount.get('message', ''))}; more: {_describe(ns, 'pod', name)}"
        )
    for status in statuses:
        waiting = (status.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in STUCK_CONTAINER_REASONS and waited >= bound:
            message = _one_line(waiting.get("message") or "")
            return (
                f"Pod {ns}/{name}: container {status.get('name')} cannot start after {_age(since, now):.0f}s "
                f"({waiting['reason']}): {message}; more: {_describe(ns, 'pod', name)}"
            ).replace(":  ;", ";")
    return None


REFUSALS = frozenset({"FailedCreate", "FailedCreatePod"})  # the Job controller's, the training operator's


def workload_problem(snapshot: Snapshot, now: datetime, bound: float) -> str | None:
    """Why a workload that exists has fewer pods than it runs after `bound` seconds: the refusal its
    controller recorded (a pod refused at admission: no PriorityClass, Pod Security, a quota), or, with
    no pod at all, the absence of any controller's answer."""
    workload = snapshot.workload or {}
    ns, kind, name = snapshot.namespace, snapshot.kind, snapshot.name
    waited = _age(parse_time((workload.get("metadata") or {}).get("creationTimestamp")), now)
    live = [p for p in snapshot.pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    if waited < bound or suspended(workload) or len(live) >= snapshot.expected_pods:
        return None
    mine = [
        e
        for e in snapshot.events
        if e.get("type") == "Warning"
        and (e.get("involvedObject") or {}).get("kind") != "Pod"
        and str((e.get("involvedObject") or {}).get("name", "")).startswith(name)
        and (snapshot.pods == [] or e.get("reason") in REFUSALS)
    ]
    mine.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    have = f"{len(live)} of its {snapshot.expected_pods} pods" if snapshot.pods else "no pod"
    if mine:
        event = mine[-1]
        source = (event.get("involvedObject") or {}).get("kind", kind)
        return (
            f"{kind} {ns}/{name} has {have} after {waited:.0f}s: {source} "
            f"{event['involvedObject'].get('name')} {event.get('reason')}: "
            f"{_one_line(event.get('message', ''))}; "
            f"more: {_describe(ns, kind.lower(), name)}"
        )
    if snapshot.pods:
        return None  # some pods, no refusal recorded: the rest may still be on their way
    return (
        f"{kind} {ns}/{name} has no pod after {waited:.0f}s and no controller recorded why: is the "
        f"controller that runs {kind}s installed and running? more: {_describe(ns, kind.lower(), name)}"
    )


def diagnose(snapshot: Snapshot, now: datetime | None = None, bound: float = 300) -> str | None:
    """The one line that says what keeps the workload from starting, or None while nothing has been
    stuck for `bound` seconds (or the workload is suspended, waiting for admission by design)."""
    now = now or datetime.now(UTC)
    if snapshot.workload is None or suspended(snapshot.workload):
        return None
    for pod in snapshot.pods:
        problem = pod_problem(snapshot, pod, now, bound)
        if problem:
            return problem
    return workload_problem(snapshot, now, bound)


def progress(snapshot: Snapshot) -> str:
    """A short line of where the workload stands: its pods by phase (and why the pending ones wait)."""
    if snapshot.workload is None:
        return f"{snapshot.kind} {snapshot.name}: not found"
    if suspended(snapshot.workload):
        return f"{snapshot.kind} {snapshot.name}: suspended (waiting for admission)"
    if not snapshot.pods:
        return f"{snapshot.kind} {snapshot.name}: no pod yet"
    phases: dict[str, int] = {}
    for pod in snapshot.pods:
        phase = (pod.get("status") or {}).get("phase", "Unknown")
        scheduled = _condition(pod, "PodScheduled")
        if phase == "Pending" and scheduled is not None and scheduled.get("status") == "False":
            phase = f"Pending ({scheduled.get('reason') or 'unscheduled'})"
        phases[phase] = phases.get(phase, 0) + 1
    counts = ", ".join(f"{n} {phase}" for phase, n in sorted(phases.items()))
    return f"{snapshot.kind} {snapshot.name}: {len(snapshot.pods)} pod(s): {counts}"


@dataclass(frozen=True)
class Failure:
    """A container of the workload's pods that ended with a non-zero code (one of its runs)."""

    pod: str
    container: str
    exit_code: int
    reason: str
    finished: str  # its finishedAt: with the pod and container, which run this was
    said: str  # the last line of its termination message ("" when it left none)

    def line(self, namespace: str) -> str:
        said = f": {self.said}" if self.said else " and left no message"
        return (
            f"Pod {namespace}/{self.pod}: container {self.container} exited {self.exit_code} "
            f"({self.reason or 'Error'}){said}"
        )


SAID_CHARS = 400  # a failure line quotes at most this much of what the container said


def last_line(message: str) -> str:
    """The last non-empty line of a termination message (a Python error's own line, after its
    traceback), cut to SAID_CHARS."""
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    if not lines:
        return ""
    return lines[-1] if len(lines[-1]) <= SAID_CHARS else lines[-1][: SAID_CHARS - 1] + "…"


def failures(snapshot: Snapshot) -> list[Failure]:
    """Every failed run of a container of the workload's pods that the API still holds (a container's
    current run, and the one before its latest restart), earliest first. The message is the container's
    termination message: what it wrote to its terminationMessagePath, or with `FallbackToLogsOnError`
    the last lines of its log (`infra/program/job/podspec.py` TERMINATION_MESSAGE_POLICY)."""
    found = []
    for pod in snapshot.pods:
        status = pod.get("status") or {}
        for container in [
            *(status.get("initContainerStatuses") or []),
            *(status.get("containerStatuses") or []),
        ]:
            for state in (container.get("lastState") or {}, container.get("state") or {}):
                ended = state.get("terminated") or {}
                if not ended or not ended.get("exitCode"):
                    continue
                found.append(
                    Failure(
                        (pod.get("metadata") or {}).get("name", "?"),
                        container.get("name", "?"),
                        int(ended["exitCode"]),
                        ended.get("reason") or "",
                        ended.get("finishedAt") or "",
                        last_line(ended.get("message") or ""),
                    )
                )
    return sorted(found, key=lambda f: f.finished)
