"""Turns a stack's effective pods into local processes, one per pod, as the kubelet would run them.

Pure planning, no processes: the pods are the controllers' effective pods after admission
(`infra.review.cluster`), so their env already holds what the training operator or the Job controller
injects. Here each container's env is resolved as the kubelet does (values, fieldRefs, Secret
references), its volumes are mapped to local directories, and its command expanded. Cluster DNS names
of the job's pods resolve to 127.0.0.1 and the rendezvous port is a free local one. Init containers
run before the main container, with `getent hosts` and `nslookup` answered from the scheduler's own
name map.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.program.platform.smoke_pod import SMOKE_COMPONENT
from infra.review.effective import EffectivePod
from infra.review.podenv import container_env, expand

LOCALHOST = "127.0.0.1"


class PlanError(ValueError):
    """The rendered job cannot be run locally (e.g. it has no training job)."""


@dataclass(frozen=True)
class RestartRule:
    """When a failed pod is started again, following the rendered object's own rules."""

    kind: str  # "pytorchjob" | "indexed-job" | "job" | "trainjob"
    policy: str  # PyTorchJob replica restartPolicy, or "Never" for Jobs
    # PyTorchJob: restarts for the whole job; Indexed Job: per index; Job: all pods; TrainJob: restarts
    # of the whole JobSet (failurePolicy.maxRestarts)
    backoff_limit: int
    fail_job_codes: tuple[int, ...] = ()  # podFailurePolicy FailJob exit codes (TrainJob: when final)
    job_backoff_limit: int = 0  # TrainJob: retries of failed pods within a node Job before it fails
    # Job kinds: the podFailurePolicy ignores a pod with the DisruptionTarget condition (a preemption)
    ignores_disruption: bool = False
    ignored_codes: tuple[
        int, ...
    ] = ()  # Job kinds: podFailurePolicy Ignore exit codes (a new pod, uncounted)

    def exhausted(self, pod_restarts: int, job_restarts: int) -> bool:
        """Whether the failed pod's restart would fail the job, counted as its controller counts.

        PyTorchJob OnFailure (operator v1.9.4 `pkg/core/job.go` PastBackoffLimit): the job fails once
        the sum of container restarts over its pods reaches backoffLimit, so the restart that brings
        the sum there is the last. ExitCode: each retry is a new pod whose restart count starts at 0,
        so retries are never counted (only backoffLimit 0 fails at the first failure; a deadline
        bounds the rest). Indexed Job: an index fails after backoffLimitPerIndex retries, and with
        maxFailedIndexes 0 so does the job. TrainJob (JobSet v0.12.0 `pkg/controllers/failure_policy.go`
        restartJobSetActionApplier): a failed node Job restarts the whole JobSet, and the JobSet fails
        once `maxRestarts` restarts have been made; `job_restarts` counts those restarts.
        """
        if self.kind == "trainjob":
            return job_restarts >= self.backoff_limit
        if self.kind == "indexed-job":
            return pod_restarts >= self.backoff_limit
        if self.kind == "job":  # a NonIndexed Job fails after backoffLimit retries of its pods together
            return job_restarts >= self.backoff_limit
        if self.policy == "ExitCode":
            return self.backoff_limit == 0
        return job_restarts + 1 >= self.backoff_limit

    def after_disruption(self) -> str:
        """What the controller does with a pod that ended disrupted (preempted, evicted, its node shut
        down): "uncounted" (a new pod, counted against nothing), "fail" (the job fails), or "counted"
        (an ordinary failure of its exit code).

        Job kinds: the podFailurePolicy's `DisruptionTarget` rule `Ignore` (Kubernetes
        `pkg/controller/job/pod_failure_policy.go`; the TrainJob's node Job the same, so JobSet never
        sees a failure). PyTorchJob (operator v1.9.4, which reads no pod condition): under ExitCode
        or OnFailure the replica's pod is created anew, deleted by the eviction or, failed with a
        retryable code, by `pkg/controller.v1/common/pod.go` ReconcilePods, and a new pod has no
        container restarts for `pkg/core/job.go` PastBackoffLimit to count; under Never a failed pod
        fails the job (`pkg/controller.v1/pytorch/pytorchjob_controller.go` UpdateJobStatus).
        """
        if self.kind == "pytorchjob":
            return "fail" if self.policy == "Never" else "uncounted"
        return "uncounted" if self.ignores_disruption else "counted"

    def fails_job_at_once(self, code: int) -> bool:
        if code in self.fail_job_codes:
            return True
        if self.kind == "pytorchjob":
            # The ExitCode policy (operator v1.9.4 `pkg/util/train/train_util.go`): 1-127 permanent.
            return self.policy == "Never" or (self.policy == "ExitCode" and code < 128)
        return False


@dataclass
class LocalContainer:
    name: str
    argv: list[str]
    env: dict[str, str]


@dataclass
class LocalPod:
    name: str
    index: int  # node rank
    argv: list[str]
    env: dict[str, str]
    init: list[LocalContainer] = field(default_factory=list)
    dns_names: tuple[str, ...] = ()  # what resolves to this pod once its main container runs
    grace_seconds: float = 30  # terminationGracePeriodSeconds (the API's default when unset)


@dataclass
class JobPlan:
    kind: str
    job_name: str
    pods: list[LocalPod]
    restart: RestartRule
    active_deadline: int | None
    volumes: dict[str, Path] = field(default_factory=dict)  # claim name -> local directory
    dns_dir: Path | None = None  # the local name map the init containers' DNS lookups read

    @property
    def master_flags(self) -> dict[str, str]:
        """The master's `--flag=value` arguments."""
        return dict(a.split("=", 1) for a in self.pods[0].argv if a.startswith("--") and "=" in a)

    @property
    def output_dir(self) -> Path | None:
        """Where the master writes metrics.json and model.pt (its --output-dir or --checkpoint-dir)."""
        flags = self.master_flags
        where = flags.get("--output-dir") or flags.get("--checkpoint-dir")
        return Path(where) if where else None

    @property
    def curves_dir(self) -> Path | None:
        """Where the master writes TensorBoard event files: its --tensorboard-dir, else the trainer's
        default (CHECKPOINT_DIR/tensorboard); None when the job turned them off or is no trainer."""
        flags = self.master_flags
        if "--tensorboard-dir" in flags:
            where = flags["--tensorboard-dir"]
            return None if where.strip().lower() == "none" else Path(where)
        checkpoints = flags.get("--checkpoint-dir")
        return Path(checkpoints) / "tensorboard" if checkpoints else None


def workloads(objects: Sequence[Mapping[str, Any]], order: Mapping[str, int]) -> list[Mapping[str, Any]]:
    """The stack's workloads (PyTorchJobs, TrainJobs and Jobs) in the order `order` gives their names
    (the order the program's dependencies impose: the seed Job before the training job). The
    post-install smoke check is not one: it tests a real operator install, which nothing here stands for."""
    found = [
        o
        for o in objects
        if o["kind"] in ("PyTorchJob", "TrainJob", "Job")
        and (o["metadata"].get("labels") or {}).get("app.kubernetes.io/component") != SMOKE_COMPONENT
    ]
    if not found:
        raise PlanError("the stack renders no workload (PyTorchJob, TrainJob or Job) to run")
    return sorted(found, key=lambda o: order.get(o["metadata"]["name"], len(order)))


def _mounts(
    pod_spec: Mapping[str, Any],
    container: Mapping[str, Any],
    root: Path,
    pod: str,
) -> tuple[dict[str, Path], dict[str, Path]]:
    """mountPath -> local directory, and claim -> local directory, for one pod."""
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    mounts: dict[str, Path] = {}
    claims: dict[str, Path] = {}
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        if mount["mountPath"] == "/dev/shm":
            continue  # the machine's own shared memory serves
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]
            local = claims[claim] = root / "pvc" / claim
        else:
            local = root / "pods" / pod / mount["name"]
        local.mkdir(parents=True, exist_ok=True)
        mounts[mount["mountPath"]] = local.resolve()
    return mounts, claims


def localize(value: str, mounts: Mapping[str, Path]) -> str:
    """A path under a mount (alone or as `--flag=PATH`) rewritten to the local directory."""
    prefix, sep, path = value.rpartition("=") if value.startswith("--") else ("", "", value)
    for mount_path in sorted(mounts, key=len, reverse=True):
        if path == mount_path or path.startswith(mount_path.rstrip("/") + "/"):
            return f"{prefix}{sep}{mounts[mount_path]}{path[len(mount_path.rstrip('/')) :]}"
    return value


def _pod_dns(job: str, service: str | None) -> re.Pattern[str]:
    # PyTorchJob replicas, Indexed Job pods, JobSet pods (`<jobset>-<replicatedJob>-<job>-<index>`)
    names = rf"{re.escape(job)}-(?:master-0|worker-\d+|\d+|[a-z][-a-z0-9]*-\d+-\d+)"
    domain = rf"(?:\.{re.escape(service)}(?:\..*)?)?" if service else r"(?:\..*)?"
    return re.compile(rf"^{names}{domain}$")


def _trainjob_rule(job: Mapping[str, Any], objects: Sequence[Mapping[str, Any]]) -> RestartRule:
    """A TrainJob's rules, from the JobSet its runtime makes: the trainer replicatedJob's Job backoff and
    podFailurePolicy, and the JobSet failurePolicy's first rule matching each Job failure reason
    (none matching: RestartJobSet; no failurePolicy: the first failed Job fails the JobSet)."""
    from infra.review.effective.trainjob import ANCESTOR_LABEL, ANCESTOR_TRAINER, jobset_for, runtime_of

    jobset = jobset_for(dict(job), runtime_of(dict(job), [dict(o) for o in objects]))
    rjobs = jobset["spec"]["replicatedJobs"]
    rjob = next(
        (
            r
            for r in rjobs
            if r["template"].get("metadata", {}).get("labels", {}).get(ANCESTOR_LABEL) == ANCESTOR_TRAINER
        ),
        rjobs[0],
    )
    job_spec = rjob["template"]["spec"]
    failure = jobset["spec"].get("failurePolicy")

    def action(reason: str) -> str:
        if failure is None:
            return "FailJobSet"
        for rule in failure.get("rules", []):
            reasons, targets = rule.get("onJobFailureReasons"), rule.get("targetReplicatedJobs")
            if (not reasons or reason in reasons) and (not targets or rjob["name"] in targets):
                return str(rule["action"])
        return "RestartJobSet"

    codes = fail_job_codes(job_spec.get("podFailurePolicy"))
    unbounded = 2**31 - 1  # RestartJobSetAndIgnoreMaxRestarts
    restarts = {
        "RestartJobSet": int((failure or {}).get("maxRestarts", 0)),
        "RestartJobSetAndIgnoreMaxRestarts": unbounded,
    }.get(action("BackoffLimitExceeded"), 0)
    return RestartRule(
        "trainjob",
        "Never",
        restarts,
        codes if action("PodFailurePolicy") == "FailJobSet" else (),
        job_backoff_limit=int(job_spec.get("backoffLimit", 6)),
        ignores_disruption=ignores_disruption(job_spec.get("podFailurePolicy")),
        ignored_codes=fail_job_codes(job_spec.get("podFailurePolicy"), "Ignore"),
    )


def fail_job_codes(policy: Mapping[str, Any] | None, action_name: str = "FailJob") -> tuple[int, ...]:
    """The exit codes (1-255) a podFailurePolicy fails the Job on (or, with `action_name`, takes that
    action on: `Ignore`), as the Job controller matches them (Kubernetes `pkg/controller/job/
    pod_failure_policy.go`): rules in order, the first whose `onExitCodes` (`In` or `NotIn`, exit
    code 0 never matching) takes the code decides. Pod condition rules are `ignores_disruption`'s."""
    rules = [r for r in (policy or {}).get("rules", []) if "onExitCodes" in r]

    def action(code: int) -> str | None:
        for rule in rules:
            requirement = rule["onExitCodes"]
            listed = code in requirement.get("values", [])
            if listed == (requirement.get("operator", "In") == "In"):
                return str(rule["action"])
        return None

    return tuple(code for code in range(1, 256) if action(code) == action_name)


def ignores_disruption(policy: Mapping[str, Any] | None) -> bool:
    """Whether a podFailurePolicy ignores a pod with the condition `DisruptionTarget: True`: its first
    rule on pod conditions names it with action Ignore, and no rule on exit codes comes before it (the
    first matching rule wins; ours put the condition first, so any exit code of a disrupted pod)."""
    for rule in (policy or {}).get("rules", []):
        if "onExitCodes" in rule:
            return False
        for pattern in rule.get("onPodConditions", []):
            if pattern.get("type") == "DisruptionTarget" and pattern.get("status", "True") == "True":
                return rule.get("action") == "Ignore"
    return False


def _restart_rule(
    job: Mapping[str, Any], objects: Sequence[Mapping[str, Any]] = ()
) -> tuple[RestartRule, int | None]:
    if job["kind"] == "TrainJob":
        return _trainjob_rule(job, objects), job["spec"].get("activeDeadlineSeconds")
    if job["kind"] == "PyTorchJob":
        replicas = job["spec"]["pytorchReplicaSpecs"]
        run_policy = job["spec"].get("runPolicy", {})
        rule = RestartRule(
            "pytorchjob",
            replicas["Master"].get("restartPolicy", "OnFailure"),
            int(run_policy.get("backoffLimit", 0)),
        )
        return rule, run_policy.get("activeDeadlineSeconds")
    spec = job["spec"]
    kind = "indexed-job" if spec.get("completionMode") == "Indexed" else "job"
    codes = fail_job_codes(spec.get("podFailurePolicy"))
    limit = spec.get("backoffLimitPerIndex", 0) if kind == "indexed-job" else spec.get("backoffLimit", 6)
    policy = spec.get("podFailurePolicy")
    rule = RestartRule(
        kind,
        "Never",
        int(limit),
        codes,
        ignores_disruption=ignores_disruption(policy),
        ignored_codes=fail_job_codes(policy, "Ignore"),
    )
    return rule, spec.get("activeDeadlineSeconds")


def local_name(pod: EffectivePod) -> str:
    """The pod's name here: its own, or for a generated name its hostname (`<job>-<index>`)."""
    meta = pod.manifest["metadata"]
    return meta.get("name") or pod.spec.get("hostname") or meta["generateName"].rstrip("-")


def _dns_names(pod: EffectivePod, name: str) -> tuple[str, ...]:
    """What cluster DNS answers for this pod: the operator's per-replica Service (named like the pod),
    or the Indexed Job's `<hostname>.<subdomain>` through its headless Service."""
    hostname, subdomain = pod.spec.get("hostname"), pod.spec.get("subdomain")
    if hostname and subdomain:
        return (f"{hostname}.{subdomain}",)
    return (name,)


def _local_container(
    container: Mapping[str, Any],
    pod: EffectivePod,
    root: Path,
    name: str,
    secret_value: Callable[[str, str], str],
    dns: re.Pattern[str],
    master_port: int,
    overrides: Mapping[str, str],
) -> tuple[LocalContainer, dict[str, Path]]:
    mounts, claims = _mounts(pod.spec, container, root, name)
    env = _localize_env(container_env(container, pod.manifest, secret_value), mounts, dns, master_port)
    env.setdefault("HOSTNAME", pod.spec.get("hostname") or name)  # what the kubelet sets
    if "/tmp" in mounts:  # the container's /tmp is its emptyDir: temporary files (torchrun's logs) go there
        env.setdefault("TMPDIR", str(mounts["/tmp"]))
    env.update(overrides)
    argv = [
        localize(expand(a, env), mounts) for a in [*container.get("command", []), *container.get("args", [])]
    ]
    if argv and argv[0] in ("python", "python3"):
        argv[0] = sys.executable  # the project's environment stands in for the image
    return LocalContainer(container["name"], argv, env), claims


def plan(
    job: Mapping[str, Any],
    pods: Sequence[EffectivePod],
    root: Path,
    master_port: int,
    secret_value: Callable[[str, str], str],
    overrides: Mapping[str, str] | None = None,
    objects: Sequence[Mapping[str, Any]] = (),
) -> JobPlan:
    """Every local pod of a rendered workload, from its effective (admitted) pods, ready to start;
    `overrides` replace env vars before the commands' `$(VAR)` references are expanded. `objects`
    (the stack's rendered objects) hold what a TrainJob references: its TrainingRuntime."""
    name = job["metadata"]["name"]
    restart, deadline = _restart_rule(job, objects)
    owned = [p for p in pods if p.owner == f"{job['kind']}/{name}"]
    if job["kind"] == "PyTorchJob":
        service = None
    elif job["kind"] == "TrainJob":  # the JobSet's subdomain, on every pod
        service = owned[0].spec.get("subdomain") if owned else None
    else:
        service = job["spec"]["template"]["spec"].get("subdomain")
    dns = _pod_dns(name, service)
    local_pods, volumes = [], {}
    for pod in owned:
        pod_name = local_name(pod)
        args = (root, pod_name, secret_value, dns, master_port, overrides or {})
        main, claims = _local_container(pod.spec["containers"][0], pod, *args)
        volumes.update(claims)
        init = [_local_container(c, pod, *args)[0] for c in pod.spec.get("initContainers", [])]
        grace = float(pod.spec.get("terminationGracePeriodSeconds", 30))
        local_pods.append(
            LocalPod(pod_name, pod.node_rank, main.argv, main.env, init, _dns_names(pod, pod_name), grace)
        )
    return JobPlan(
        kind=restart.kind,
        job_name=name,
        pods=local_pods,
        restart=restart,
        active_deadline=int(deadline) if deadline else None,
        volumes=volumes,
        dns_dir=root / "dns",
    )


def _localize_env(
    env: dict[str, str], mounts: Mapping[str, Path], dns: re.Pattern[str], master_port: int
) -> dict[str, str]:
    local = {}
    for key, value in env.items():
        if dns.match(value):
            value = LOCALHOST
        elif key in ("MASTER_PORT", "PET_MASTER_PORT"):
            value = str(master_port)
        local[key] = localize(value, mounts)
    return local
