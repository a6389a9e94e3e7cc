"""Turns a rendered training job into local processes: one per replica / index, as its pod would run.

Pure planning, no processes: which pods exist, the env each container sees (its own env, Secret
references resolved, plus what the training operator or the Job controller injects), its volumes
mapped to local directories, and its command with `$(VAR)` expanded. Cluster DNS names of the job's
pods resolve to 127.0.0.1 and the rendezvous port is a free local one.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.offline.podenv import container_env, expand, operator_env

LOCALHOST = "127.0.0.1"


class PlanError(ValueError):
    """The rendered job cannot be run locally (e.g. it has no training job)."""


@dataclass(frozen=True)
class RestartRule:
    """When a failed pod is started again, following the rendered object's own rules."""

    kind: str  # "pytorchjob" | "indexed-job"
    policy: str  # PyTorchJob replica restartPolicy, or "Never" for Indexed Jobs
    backoff_limit: int  # PyTorchJob: restarts for the whole job; Indexed Job: per index
    fail_job_codes: tuple[int, ...] = ()  # podFailurePolicy FailJob exit codes

    def fails_job_at_once(self, code: int) -> bool:
        if code in self.fail_job_codes:
            return True
        if self.kind == "pytorchjob":
            # Kubeflow's ExitCode policy: 1-127 are permanent errors, 128+ (signals) retryable.
            return self.policy == "Never" or (self.policy == "ExitCode" and code < 128)
        return False


@dataclass
class LocalPod:
    name: str
    index: int  # node rank
    argv: list[str]
    env: dict[str, str]


@dataclass
class JobPlan:
    kind: str
    job_name: str
    pods: list[LocalPod]
    restart: RestartRule
    active_deadline: int | None
    volumes: dict[str, Path] = field(default_factory=dict)  # claim name -> local directory

    @property
    def output_dir(self) -> Path | None:
        """Where the master writes metrics.json and model.pt (its --output-dir or --checkpoint-dir)."""
        flags = dict(a.split("=", 1) for a in self.pods[0].argv if a.startswith("--") and "=" in a)
        where = flags.get("--output-dir") or flags.get("--checkpoint-dir")
        return Path(where) if where else None


def _training_job(objects: list[dict[str, Any]]) -> dict[str, Any]:
    jobs = [o for o in objects if o["kind"] in ("PyTorchJob", "Job")]
    if len(jobs) != 1:
        raise PlanError(f"expected one training job (PyTorchJob or Job), found {len(jobs)}")
    return jobs[0]


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
    names = rf"{re.escape(job)}-(?:master-0|worker-\d+|\d+)"
    domain = rf"(?:\.{re.escape(service)}(?:\..*)?)?" if service else r"(?:\..*)?"
    return re.compile(rf"^{names}{domain}$")


def plan(
    objects: list[dict[str, Any]],
    root: Path,
    master_port: int,
    secret_value: Callable[[str, str], str],
    overrides: Mapping[str, str] | None = None,
) -> JobPlan:
    """Every local pod of the rendered training job, ready to start; `overrides` replace env vars
    before the command's `$(VAR)` references are expanded."""
    job = _training_job(objects)
    name = job["metadata"]["name"]
    if job["kind"] == "PyTorchJob":
        replicas = job["spec"]["pytorchReplicaSpecs"]
        slots = [("Master", 0, f"{name}-master-0")]
        slots += [
            ("Worker", i, f"{name}-worker-{i}")
            for i in range(int(replicas.get("Worker", {}).get("replicas", 0)))
        ]
        service = None
        restart = RestartRule(
            "pytorchjob",
            replicas["Master"].get("restartPolicy", "Never"),
            int(job["spec"].get("runPolicy", {}).get("backoffLimit", 0)),
        )
        deadline = job["spec"].get("runPolicy", {}).get("activeDeadlineSeconds")
    else:
        spec = job["spec"]
        slots = [("Index", i, f"{name}-{i}") for i in range(int(spec["completions"]))]
        service = spec["template"]["spec"].get("subdomain")
        codes = tuple(
            code
            for rule in spec.get("podFailurePolicy", {}).get("rules", [])
            if rule["action"] == "FailJob"
            for code in rule.get("onExitCodes", {}).get("values", [])
        )
        restart = RestartRule("indexed-job", "Never", int(spec.get("backoffLimitPerIndex", 0)), codes)
        deadline = spec.get("activeDeadlineSeconds")
    dns = _pod_dns(name, service)
    pods, volumes = [], {}
    for replica_type, index, pod_name in slots:
        template = (
            job["spec"]["pytorchReplicaSpecs"][replica_type]["template"]
            if job["kind"] == "PyTorchJob"
            else job["spec"]["template"]
        )
        container = template["spec"]["containers"][0]
        mounts, claims = _mounts(template["spec"], container, root, pod_name)
        volumes.update(claims)
        if job["kind"] == "PyTorchJob":
            env = {
                **container_env(container, secret_value=secret_value),
                **operator_env(job, replica_type, index),
            }
            rank = env["PET_NODE_RANK"]
        else:
            env = container_env(container, completion_index=index, secret_value=secret_value)
            rank = str(index)
        env = _localize_env(env, mounts, dns, master_port)
        if job["kind"] == "Job":  # what the Job controller and kubelet give an Indexed Job's pod
            env.update(JOB_COMPLETION_INDEX=str(index), HOSTNAME=pod_name)
        env.update(overrides or {})
        argv = [
            localize(expand(a, env), mounts)
            for a in [*container.get("command", []), *container.get("args", [])]
        ]
        if argv and argv[0] in ("python", "python3"):
            argv[0] = sys.executable  # the project's environment stands in for the image
        pods.append(LocalPod(pod_name, int(rank) if rank.isdigit() else index, argv, env))
    return JobPlan(
        kind=restart.kind,
        job_name=name,
        pods=pods,
        restart=restart,
        active_deadline=int(deadline) if deadline else None,
        volumes=volumes,
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
