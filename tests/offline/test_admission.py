"""Admission (Pod Security, LimitRanger, ResourceQuota) against upstream's exact wording.

Expected lines are written out from upstream's format strings (pod-security-admission v0.33, the
kube-apiserver 1.33 LimitRanger and ResourceQuota plugins) as recorded in the research notes, so a
change in any check's wording, ordering or scope fails here.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest

from infra.review.admission import Namespace, admit, podsecurity, resources
from infra.review.effective import EffectivePod

Obj = dict[str, Any]
NAME = "mnist-r1-worker-0"
APPARMOR = "container.apparmor.security.beta.kubernetes.io/"


def compliant_container(name: str) -> Obj:
    return {
        "name": name,
        "image": "ghcr.io/example/pytorch:2.5",
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }


def compliant_pod(name: str = NAME) -> Obj:
    """The smallest Pod `restricted:latest` admits: one init container and one container."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "training"},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "initContainers": [compliant_container("init-pytorch")],
            "containers": [compliant_container("pytorch")],
        },
    }


# --- mutations -----------------------------------------------------------------------------------


def _container(pod: Obj, name: str) -> Obj:
    spec = pod["spec"]
    return next(c for c in [*spec.get("initContainers", []), *spec["containers"]] if c["name"] == name)


def csc(name: str, **fields: Any) -> Callable[[Obj], None]:
    """Set fields of container `name`'s securityContext."""

    def mutate(pod: Obj) -> None:
        _container(pod, name).setdefault("securityContext", {}).update(fields)

    return mutate


def unset_csc(name: str, *keys: str) -> Callable[[Obj], None]:
    def mutate(pod: Obj) -> None:
        for key in keys:
            del _container(pod, name)["securityContext"][key]

    return mutate


def psc(**fields: Any) -> Callable[[Obj], None]:
    """Set fields of the pod's securityContext."""

    def mutate(pod: Obj) -> None:
        pod["spec"].setdefault("securityContext", {}).update(fields)

    return mutate


def unset_psc(*keys: str) -> Callable[[Obj], None]:
    def mutate(pod: Obj) -> None:
        for key in keys:
            del pod["spec"]["securityContext"][key]

    return mutate


def spec(**fields: Any) -> Callable[[Obj], None]:
    def mutate(pod: Obj) -> None:
        pod["spec"].update(copy.deepcopy(fields))

    return mutate


def ports(name: str, *host_ports: int) -> Callable[[Obj], None]:
    def mutate(pod: Obj) -> None:
        _container(pod, name)["ports"] = [{"containerPort": p, "hostPort": p} for p in host_ports]

    return mutate


def annotate(annotations: dict[str, str]) -> Callable[[Obj], None]:
    def mutate(pod: Obj) -> None:
        pod["metadata"].setdefault("annotations", {}).update(annotations)

    return mutate


def all_of(*mutations: Callable[[Obj], None]) -> Callable[[Obj], None]:
    def mutate(pod: Obj) -> None:
        for m in mutations:
            m(pod)

    return mutate


def mutated(mutate: Callable[[Obj], None]) -> Obj:
    pod = compliant_pod()
    mutate(pod)
    return pod


# --- one check at a time -------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    check: str
    level: str
    mutate: Callable[[Obj], None]
    lines: tuple[str, ...]


B = "baseline"
R = "restricted"
CASES = [
    # appArmorProfile (baseline)
    Case(
        "apparmor-container-field",
        "appArmorProfile",
        B,
        csc("pytorch", appArmorProfile={"type": "Unconfined"}),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "baseline:latest": forbidden AppArmor profile (container "pytorch" must not set AppArmor profile type to "Unconfined")',  # noqa: E501
        ),
    ),
    Case(
        "apparmor-pod-and-container-field",
        "appArmorProfile",
        B,
        all_of(
            psc(appArmorProfile={"type": "Unconfined"}),
            csc("pytorch", appArmorProfile={"type": "Unconfined"}),
        ),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "baseline:latest": forbidden AppArmor profile (pod and container "pytorch" must not set AppArmor profile type to "Unconfined")',  # noqa: E501
        ),
    ),
    Case(
        "apparmor-annotation",
        "appArmorProfile",
        B,
        annotate({APPARMOR + "pytorch": "unconfined"}),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "baseline:latest": forbidden AppArmor profile (annotation must not set AppArmor profile type to "container.apparmor.security.beta.kubernetes.io/pytorch="unconfined"")',  # noqa: E501
        ),
    ),
    Case(
        "apparmor-annotations-sorted-allowed-values-skipped",
        "appArmorProfile",
        B,
        annotate(
            {
                APPARMOR + "pytorch": "unconfined",
                APPARMOR + "init-pytorch": "runtime/default",
                APPARMOR + "sidecar": "localhost/k8s-profile",
                APPARMOR + "empty": "",
                APPARMOR + "a": "unknown",
                "other.example.com/apparmor": "unconfined",
            }
        ),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "baseline:latest": forbidden AppArmor profiles (annotations must not set AppArmor profile type to "container.apparmor.security.beta.kubernetes.io/a="unknown"", "container.apparmor.security.beta.kubernetes.io/pytorch="unconfined"")',  # noqa: E501
        ),
    ),
    Case(
        "apparmor-container-and-annotation",
        "appArmorProfile",
        B,
        all_of(
            csc("pytorch", appArmorProfile={"type": "Unconfined"}),
            annotate({APPARMOR + "pytorch": "unconfined"}),
        ),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "baseline:latest": forbidden AppArmor profiles (container "pytorch" and annotation must not set AppArmor profile type to "Unconfined", "container.apparmor.security.beta.kubernetes.io/pytorch="unconfined"")',  # noqa: E501
        ),
    ),
    # capabilities_baseline (baseline only; restricted replaces it)
    Case(
        "capabilities-baseline-two-containers",
        "capabilities_baseline",
        B,
        all_of(
            csc("init-pytorch", capabilities={"add": ["SYS_ADMIN", "CHOWN"]}),
            csc("pytorch", capabilities={"add": ["NET_ADMIN", "SYS_ADMIN"], "drop": ["ALL"]}),
        ),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "baseline:latest": non-default capabilities (containers "init-pytorch", "pytorch" must not include "NET_ADMIN", "SYS_ADMIN" in securityContext.capabilities.add)',  # noqa: E501
        ),
    ),
    Case(
        "capabilities-baseline-ALL-is-not-a-default",
        "capabilities_baseline",
        B,
        csc("pytorch", capabilities={"add": ["ALL", "NET_BIND_SERVICE", "KILL"]}),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "baseline:latest": non-default capabilities (container "pytorch" must not include "ALL" in securityContext.capabilities.add)',  # noqa: E501
        ),
    ),
    # hostNamespaces
    Case(
        "host-namespaces-all-three-fixed-order",
        "hostNamespaces",
        B,
        spec(hostIPC=True, hostPID=True, hostNetwork=True),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true, hostPID=true, hostIPC=true)',  # noqa: E501
        ),
    ),
    Case(
        "host-namespaces-pid",
        "hostNamespaces",
        B,
        spec(hostPID=True, hostNetwork=False),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostPID=true)',  # noqa: E501
        ),
    ),
    # hostPathVolumes (baseline only; restricted replaces it with restrictedVolumes)
    Case(
        "host-path-volume",
        "hostPathVolumes",
        B,
        spec(volumes=[{"name": "data", "hostPath": {"path": "/data"}}]),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "baseline:latest": hostPath volumes (volume "data")',  # noqa: E501
        ),
    ),
    Case(
        "host-path-volumes-spec-order",
        "hostPathVolumes",
        B,
        spec(
            volumes=[
                {"name": "dev", "hostPath": {"path": "/dev"}},
                {"name": "scratch", "emptyDir": {}},
                {"name": "data", "hostPath": {"path": "/data"}},
            ]
        ),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "baseline:latest": hostPath volumes (volumes "dev", "data")',  # noqa: E501
        ),
    ),
    # hostPorts
    Case(
        "host-port",
        "hostPorts",
        B,
        ports("pytorch", 29500),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "baseline:latest": hostPort (container "pytorch" uses hostPort 29500)',  # noqa: E501
        ),
    ),
    Case(
        "host-ports-sorted-as-strings",
        "hostPorts",
        B,
        all_of(ports("init-pytorch", 10000, 8080), ports("pytorch", 8080, 29500)),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "baseline:latest": hostPort (containers "init-pytorch", "pytorch" use hostPorts 10000, 29500, 8080)',  # noqa: E501
        ),
    ),
    # privileged
    Case(
        "privileged",
        "privileged",
        B,
        csc("pytorch", privileged=True),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "baseline:latest": privileged (container "pytorch" must not set securityContext.privileged=true)',  # noqa: E501
        ),
    ),
    Case(
        "privileged-init-first",
        "privileged",
        B,
        all_of(csc("pytorch", privileged=True), csc("init-pytorch", privileged=True)),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "baseline:latest": privileged (containers "init-pytorch", "pytorch" must not set securityContext.privileged=true)',  # noqa: E501
        ),
    ),
    # procMount
    Case(
        "proc-mount",
        "procMount",
        B,
        all_of(csc("init-pytorch", procMount="Default"), csc("pytorch", procMount="Unmasked")),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "baseline:latest": procMount (container "pytorch" must not set securityContext.procMount to "Unmasked")',  # noqa: E501
        ),
    ),
    # seLinuxOptions
    Case(
        "selinux-pod-type",
        "seLinuxOptions",
        B,
        psc(seLinuxOptions={"type": "spc_t", "level": "s0:c1,c2"}),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "baseline:latest": seLinuxOptions (pod set forbidden securityContext.seLinuxOptions: type "spc_t")',  # noqa: E501
        ),
    ),
    Case(
        "selinux-container-user-role",
        "seLinuxOptions",
        B,
        csc("pytorch", seLinuxOptions={"type": "container_engine_t", "user": "root", "role": "sysadm_r"}),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "baseline:latest": seLinuxOptions (container "pytorch" set forbidden securityContext.seLinuxOptions: user may not be set; role may not be set)',  # noqa: E501
        ),
    ),
    Case(
        "selinux-pod-and-containers",
        "seLinuxOptions",
        B,
        all_of(
            psc(seLinuxOptions={"type": "foo"}),
            csc("init-pytorch", seLinuxOptions={"type": "bar"}),
            csc("pytorch", seLinuxOptions={"type": "foo", "user": "u"}),
        ),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "baseline:latest": seLinuxOptions (pod and containers "init-pytorch", "pytorch" set forbidden securityContext.seLinuxOptions: types "bar", "foo"; user may not be set)',  # noqa: E501
        ),
    ),
    # seccompProfile_baseline (baseline only; restricted replaces it)
    Case(
        "seccomp-baseline-pod",
        "seccompProfile_baseline",
        B,
        psc(seccompProfile={"type": "Unconfined"}),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "baseline:latest": seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")',  # noqa: E501
        ),
    ),
    Case(
        "seccomp-baseline-pod-and-containers",
        "seccompProfile_baseline",
        B,
        all_of(
            psc(seccompProfile={"type": "Unconfined"}),
            csc("init-pytorch", seccompProfile={"type": "Unconfined"}),
            csc("pytorch", seccompProfile={"type": "Bogus"}),
        ),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "baseline:latest": seccompProfile (pod and containers "init-pytorch", "pytorch" must not set securityContext.seccompProfile.type to "Bogus", "Unconfined")',  # noqa: E501
        ),
    ),
    # sysctls
    Case(
        "sysctls-allowed-list",
        "sysctls",
        B,
        psc(
            sysctls=[
                {"name": "net.ipv4.tcp_rmem", "value": "4096 87380 6291456"},
                {"name": "kernel.msgmax", "value": "65536"},
                {"name": "net.ipv4.tcp_wmem", "value": "4096 16384 4194304"},
                {"name": "net.core.somaxconn", "value": "1024"},
            ]
        ),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "baseline:latest": forbidden sysctls (kernel.msgmax, net.core.somaxconn)',  # noqa: E501
        ),
    ),
    # windowsHostProcess
    Case(
        "windows-host-process-pod-and-container",
        "windowsHostProcess",
        B,
        all_of(
            psc(windowsOptions={"hostProcess": True}),
            csc("init-pytorch", windowsOptions={"hostProcess": False}),
            csc("pytorch", windowsOptions={"hostProcess": True}),
        ),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "baseline:latest": hostProcess (pod and container "pytorch" must not set securityContext.windowsOptions.hostProcess=true)',  # noqa: E501
        ),
    ),
    # allowPrivilegeEscalation (restricted)
    Case(
        "allow-privilege-escalation-true",
        "allowPrivilegeEscalation",
        R,
        csc("init-pytorch", allowPrivilegeEscalation=True),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "init-pytorch" must set securityContext.allowPrivilegeEscalation=false)',  # noqa: E501
        ),
    ),
    Case(
        "allow-privilege-escalation-unset-plural",
        "allowPrivilegeEscalation",
        R,
        all_of(
            unset_csc("pytorch", "allowPrivilegeEscalation"),
            unset_csc("init-pytorch", "allowPrivilegeEscalation"),
        ),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (containers "init-pytorch", "pytorch" must set securityContext.allowPrivilegeEscalation=false)',  # noqa: E501
        ),
    ),
    # capabilities_restricted
    Case(
        "capabilities-restricted-missing-drop",
        "capabilities_restricted",
        R,
        csc("pytorch", capabilities={"drop": ["NET_RAW"], "add": ["NET_BIND_SERVICE"]}),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": unrestricted capabilities (container "pytorch" must set securityContext.capabilities.drop=["ALL"])',  # noqa: E501
        ),
    ),
    Case(
        "capabilities-restricted-drop-and-add",
        "capabilities_restricted",
        R,
        all_of(
            unset_csc("init-pytorch", "capabilities"),
            csc(
                "pytorch", capabilities={"drop": ["ALL"], "add": ["SYS_PTRACE", "CHOWN", "NET_BIND_SERVICE"]}
            ),
        ),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": unrestricted capabilities (container "init-pytorch" must set securityContext.capabilities.drop=["ALL"]; container "pytorch" must not include "CHOWN", "SYS_PTRACE" in securityContext.capabilities.add)',  # noqa: E501
        ),
    ),
    # restrictedVolumes
    Case(
        "restricted-volume-nfs",
        "restrictedVolumes",
        R,
        spec(volumes=[{"name": "shared", "nfs": {"server": "nfs.example.internal", "path": "/export"}}]),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": restricted volume types (volume "shared" uses restricted volume type "nfs")',  # noqa: E501
        ),
    ),
    Case(
        "restricted-volumes-plural-unknown",
        "restrictedVolumes",
        R,
        spec(
            volumes=[
                {"name": "shared", "nfs": {"server": "nfs.example.internal", "path": "/export"}},
                {"name": "dshm", "emptyDir": {"medium": "Memory"}},
                {"name": "host", "hostPath": {"path": "/data"}},
                {"name": "cfg", "configMap": {"name": "cfg"}},
                {"name": "weird"},
                {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
            ]
        ),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": restricted volume types (volumes "shared", "host", "weird" use restricted volume types "hostPath", "nfs", "unknown")',  # noqa: E501
        ),
    ),
    # hostPath under restricted: restrictedVolumes, not hostPathVolumes
    Case(
        "restricted-volume-host-path",
        "restrictedVolumes",
        R,
        spec(volumes=[{"name": "data", "hostPath": {"path": "/data"}}]),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": restricted volume types (volume "data" uses restricted volume type "hostPath")',  # noqa: E501
        ),
    ),
    # runAsNonRoot: explicit false wins over implicitly unset
    Case(
        "run-as-non-root-implicit",
        "runAsNonRoot",
        R,
        unset_psc("runAsNonRoot"),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true (pod or containers "init-pytorch", "pytorch" must set securityContext.runAsNonRoot=true)',  # noqa: E501
        ),
    ),
    Case(
        "run-as-non-root-implicit-one-container",
        "runAsNonRoot",
        R,
        all_of(unset_psc("runAsNonRoot"), csc("pytorch", runAsNonRoot=True)),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true (pod or container "init-pytorch" must set securityContext.runAsNonRoot=true)',  # noqa: E501
        ),
    ),
    Case(
        "run-as-non-root-pod-false",
        "runAsNonRoot",
        R,
        psc(runAsNonRoot=False),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true (pod must not set securityContext.runAsNonRoot=false)',  # noqa: E501
        ),
    ),
    Case(
        "run-as-non-root-pod-and-container-false",
        "runAsNonRoot",
        R,
        all_of(psc(runAsNonRoot=False), csc("pytorch", runAsNonRoot=False)),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true (pod and container "pytorch" must not set securityContext.runAsNonRoot=false)',  # noqa: E501
        ),
    ),
    Case(
        "run-as-non-root-explicit-over-implicit",
        "runAsNonRoot",
        R,
        all_of(unset_psc("runAsNonRoot"), csc("init-pytorch", runAsNonRoot=False)),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true (container "init-pytorch" must not set securityContext.runAsNonRoot=false)',  # noqa: E501
        ),
    ),
    # runAsUser
    Case(
        "run-as-user-pod",
        "runAsUser",
        R,
        psc(runAsUser=0),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": runAsUser=0 (pod must not set runAsUser=0)',  # noqa: E501
        ),
    ),
    Case(
        "run-as-user-pod-and-containers",
        "runAsUser",
        R,
        all_of(psc(runAsUser=0), csc("init-pytorch", runAsUser=0), csc("pytorch", runAsUser=0)),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": runAsUser=0 (pod and containers "init-pytorch", "pytorch" must not set runAsUser=0)',  # noqa: E501
        ),
    ),
    # seccompProfile_restricted: explicit bad type wins over implicitly unset
    Case(
        "seccomp-restricted-implicit",
        "seccompProfile_restricted",
        R,
        unset_psc("seccompProfile"),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": seccompProfile (pod or containers "init-pytorch", "pytorch" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")',  # noqa: E501
        ),
    ),
    Case(
        "seccomp-restricted-implicit-one-container",
        "seccompProfile_restricted",
        R,
        all_of(
            unset_psc("seccompProfile"),
            csc("pytorch", seccompProfile={"type": "Localhost", "localhostProfile": "p.json"}),
        ),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": seccompProfile (pod or container "init-pytorch" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")',  # noqa: E501
        ),
    ),
    Case(
        "seccomp-restricted-container-explicit",
        "seccompProfile_restricted",
        R,
        csc("pytorch", seccompProfile={"type": "Unconfined"}),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": seccompProfile (container "pytorch" must not set securityContext.seccompProfile.type to "Unconfined")',  # noqa: E501
        ),
    ),
    Case(
        "seccomp-restricted-pod-explicit-over-implicit",
        "seccompProfile_restricted",
        R,
        psc(seccompProfile={"type": "Unconfined"}),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")',  # noqa: E501
        ),
    ),
    Case(
        "seccomp-restricted-container-explicit-over-implicit",
        "seccompProfile_restricted",
        R,
        all_of(unset_psc("seccompProfile"), csc("init-pytorch", seccompProfile={"type": "Unconfined"})),
        (
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": seccompProfile (container "init-pytorch" must not set securityContext.seccompProfile.type to "Unconfined")',  # noqa: E501
        ),
    ),
]
CASE_PARAMS = [pytest.param(c, id=c.id) for c in CASES]


def test_compliant_pod_is_admitted_at_every_level() -> None:
    for level in podsecurity.LEVELS:
        assert podsecurity.refusals(compliant_pod(), level) == []


def test_every_check_has_a_case() -> None:
    covered = {c.check for c in CASES}
    assert covered == {*podsecurity.BASELINE, *podsecurity.RESTRICTED}
    assert len(covered) == 17
    for check in podsecurity.OVERRIDDEN_BY_RESTRICTED:
        assert {c.level for c in CASES if c.check == check} == {B}


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_one_check_fails(case: Case) -> None:
    pod = mutated(case.mutate)
    assert podsecurity.refusals(pod, case.level) == list(case.lines)
    assert [v.check for v in podsecurity.violations(pod, case.level)] == [case.check]


BASELINE_EVERYWHERE = [
    pytest.param(c, id=c.id)
    for c in CASES
    if c.level == B and c.check not in podsecurity.OVERRIDDEN_BY_RESTRICTED
]


@pytest.mark.parametrize("case", BASELINE_EVERYWHERE)
def test_baseline_check_also_enforced_by_restricted(case: Case) -> None:
    pod = mutated(case.mutate)
    expected = [line.replace('"baseline:latest"', '"restricted:latest"') for line in case.lines]
    assert podsecurity.refusals(pod, R) == expected


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_privileged_level_refuses_nothing(case: Case) -> None:
    assert podsecurity.refusals(mutated(case.mutate), "privileged") == []


RESTRICTED_ONLY = [
    pytest.param(c, id=c.id) for c in CASES if c.level == R and c.check in podsecurity.RESTRICTED
]


# Restricted cases whose mutation also trips the baseline check that restricted replaces.
ALSO_FAILS_BASELINE = {
    "capabilities-restricted-drop-and-add": "capabilities_baseline",
    "restricted-volumes-plural-unknown": "hostPathVolumes",
    "restricted-volume-host-path": "hostPathVolumes",
    "seccomp-restricted-container-explicit": "seccompProfile_baseline",
    "seccomp-restricted-pod-explicit-over-implicit": "seccompProfile_baseline",
    "seccomp-restricted-container-explicit-over-implicit": "seccompProfile_baseline",
}


@pytest.mark.parametrize("case", RESTRICTED_ONLY)
def test_baseline_level_skips_restricted_checks(case: Case) -> None:
    found = [v.check for v in podsecurity.violations(mutated(case.mutate), B)]
    expected = [ALSO_FAILS_BASELINE[case.id]] if case.id in ALSO_FAILS_BASELINE else []
    assert found == expected


OVERRIDES = [
    pytest.param(
        spec(volumes=[{"name": "data", "hostPath": {"path": "/data"}}]),
        [
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": restricted volume types (volume "data" uses restricted volume type "hostPath")',  # noqa: E501
        ],
        id="hostPathVolumes-by-restrictedVolumes",
    ),
    pytest.param(
        all_of(
            csc("init-pytorch", capabilities={"add": ["SYS_ADMIN", "CHOWN"]}),
            csc("pytorch", capabilities={"add": ["NET_ADMIN", "SYS_ADMIN"], "drop": ["ALL"]}),
        ),
        [
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": unrestricted capabilities (container "init-pytorch" must set securityContext.capabilities.drop=["ALL"]; containers "init-pytorch", "pytorch" must not include "CHOWN", "NET_ADMIN", "SYS_ADMIN" in securityContext.capabilities.add)',  # noqa: E501
        ],
        id="capabilities_baseline-by-capabilities_restricted",
    ),
    pytest.param(
        all_of(
            psc(seccompProfile={"type": "Unconfined"}),
            csc("init-pytorch", seccompProfile={"type": "Unconfined"}),
            csc("pytorch", seccompProfile={"type": "Bogus"}),
        ),
        [
            'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": seccompProfile (pod and containers "init-pytorch", "pytorch" must not set securityContext.seccompProfile.type to "Bogus", "Unconfined")',  # noqa: E501
        ],
        id="seccompProfile_baseline-by-seccompProfile_restricted",
    ),
]


@pytest.mark.parametrize(("mutate", "lines"), OVERRIDES)
def test_restricted_replaces_overridden_baseline_checks(
    mutate: Callable[[Obj], None], lines: list[str]
) -> None:
    pod = mutated(mutate)
    assert podsecurity.refusals(pod, R) == lines
    assert not {v.check for v in podsecurity.violations(pod, R)} & podsecurity.OVERRIDDEN_BY_RESTRICTED


# --- allowed values that must not be refused -----------------------------------------------------

ALLOWED = [
    pytest.param(csc("pytorch", privileged=False), id="privileged-false"),
    pytest.param(csc("pytorch", procMount="Default"), id="procMount-Default"),
    pytest.param(
        lambda p: _container(p, "pytorch").update(ports=[{"containerPort": 29500}]),
        id="containerPort-without-hostPort",
    ),
    pytest.param(
        lambda p: _container(p, "pytorch").update(ports=[{"containerPort": 29500, "hostPort": 0}]),
        id="hostPort-zero",
    ),
    pytest.param(
        psc(
            sysctls=[
                {"name": "net.ipv4.tcp_rmem", "value": "4096 87380 6291456"},
                {"name": "net.ipv4.tcp_wmem", "value": "4096 16384 4194304"},
                {"name": "net.ipv4.ip_local_reserved_ports", "value": "29500"},
                {"name": "net.ipv4.tcp_keepalive_time", "value": "600"},
                {"name": "kernel.shm_rmid_forced", "value": "1"},
            ]
        ),
        id="sysctls-safe-set-1.32",
    ),
    pytest.param(
        all_of(
            psc(seLinuxOptions={"type": "container_t", "level": "s0:c1,c2"}),
            csc("pytorch", seLinuxOptions={"type": "container_engine_t"}),
            csc("init-pytorch", seLinuxOptions={"type": "container_init_t"}),
        ),
        id="selinux-allowed-types",
    ),
    pytest.param(
        all_of(
            psc(appArmorProfile={"type": "RuntimeDefault"}),
            csc("pytorch", appArmorProfile={"type": "Localhost", "localhostProfile": "k8s"}),
            annotate({APPARMOR + "pytorch": "localhost/k8s", APPARMOR + "init-pytorch": "runtime/default"}),
        ),
        id="apparmor-allowed",
    ),
    pytest.param(
        csc("pytorch", capabilities={"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}), id="NET_BIND_SERVICE"
    ),
    pytest.param(all_of(psc(runAsUser=1000), csc("pytorch", runAsUser=1000)), id="runAsUser-non-zero"),
    pytest.param(
        all_of(
            unset_psc("runAsNonRoot"),
            csc("pytorch", runAsNonRoot=True),
            csc("init-pytorch", runAsNonRoot=True),
        ),
        id="runAsNonRoot-on-every-container",
    ),
    pytest.param(
        spec(
            volumes=[
                {"name": "dshm", "emptyDir": {"medium": "Memory"}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "token", "projected": {"sources": []}},
                {"name": "cfg", "configMap": {"name": "cfg"}},
                {"name": "creds", "secret": {"secretName": "creds"}},
                {"name": "csi", "csi": {"driver": "x"}},
                {"name": "eph", "ephemeral": {"volumeClaimTemplate": {}}},
                {"name": "img", "image": {"reference": "x"}},
                {"name": "meta", "downwardAPI": {"items": []}},
            ]
        ),
        id="restricted-allowed-volume-sources",
    ),
]


@pytest.mark.parametrize("mutate", ALLOWED)
def test_allowed_values_are_not_refused(mutate: Callable[[Obj], None]) -> None:
    assert podsecurity.refusals(mutated(mutate), R) == []
    assert podsecurity.refusals(mutated(mutate), B) == []


# --- Windows exemptions (spec.os.name: windows) ----------------------------------------------------


def _bare_linux_fields(pod: Obj) -> None:
    """Remove everything the three Windows-exempt checks look at."""
    del pod["spec"]["securityContext"]["seccompProfile"]
    for c in [*pod["spec"]["initContainers"], *pod["spec"]["containers"]]:
        del c["securityContext"]


def test_windows_pod_exempt_from_privilege_escalation_capabilities_seccomp() -> None:
    pod = mutated(all_of(_bare_linux_fields, spec(os={"name": "windows"})))
    assert podsecurity.refusals(pod, R) == []


def test_linux_pod_with_os_field_is_not_exempt() -> None:
    pod = mutated(all_of(_bare_linux_fields, spec(os={"name": "linux"})))
    assert podsecurity.refusals(pod, R) == [
        'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (containers "init-pytorch", "pytorch" must set securityContext.allowPrivilegeEscalation=false)',  # noqa: E501
        'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": unrestricted capabilities (containers "init-pytorch", "pytorch" must set securityContext.capabilities.drop=["ALL"])',  # noqa: E501
        'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": seccompProfile (pod or containers "init-pytorch", "pytorch" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")',  # noqa: E501
    ]


WINDOWS_EXEMPT = [
    pytest.param(
        csc("pytorch", allowPrivilegeEscalation=True),
        "allowPrivilegeEscalation",
        id="allowPrivilegeEscalation",
    ),
    pytest.param(unset_csc("pytorch", "capabilities"), "capabilities_restricted", id="capabilities"),
    pytest.param(unset_psc("seccompProfile"), "seccompProfile_restricted", id="seccompProfile"),
]


@pytest.mark.parametrize(("mutate", "check"), WINDOWS_EXEMPT)
def test_windows_exemption_each(mutate: Callable[[Obj], None], check: str) -> None:
    linux = mutated(mutate)
    assert [v.check for v in podsecurity.violations(linux, R)] == [check]
    windows = mutated(all_of(mutate, spec(os={"name": "windows"})))
    assert podsecurity.refusals(windows, R) == []


def test_windows_does_not_exempt_run_as_non_root_or_privileged() -> None:
    pod = mutated(
        all_of(spec(os={"name": "windows"}), unset_psc("runAsNonRoot"), csc("pytorch", privileged=True))
    )
    assert podsecurity.refusals(pod, R) == [
        'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": privileged (container "pytorch" must not set securityContext.privileged=true)',  # noqa: E501
        'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true (pod or containers "init-pytorch", "pytorch" must set securityContext.runAsNonRoot=true)',  # noqa: E501
    ]


# --- check order (psa.md §6) -----------------------------------------------------------------------


def worked_example_pod() -> Obj:
    """hostNetwork, and a container "c" that is privileged and uses hostPort 80; nothing else set."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "hostNetwork": True,
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "securityContext": {"privileged": True},
                    "ports": [{"containerPort": 80, "hostPort": 80}],
                }
            ],
        },
    }


WORKED_RESTRICTED = [
    'pods "p" is forbidden: violates PodSecurity "restricted:latest": host namespaces (hostNetwork=true)',
    'pods "p" is forbidden: violates PodSecurity "restricted:latest": hostPort (container "c" uses hostPort 80)',  # noqa: E501
    'pods "p" is forbidden: violates PodSecurity "restricted:latest": privileged (container "c" must not set securityContext.privileged=true)',  # noqa: E501
    'pods "p" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false)',  # noqa: E501
    'pods "p" is forbidden: violates PodSecurity "restricted:latest": unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"])',  # noqa: E501
    'pods "p" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true)',  # noqa: E501
    'pods "p" is forbidden: violates PodSecurity "restricted:latest": seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")',  # noqa: E501
]
# The API server's single message, verbatim from psa.md §6.
WORKED_RESTRICTED_MESSAGE = 'pods "p" is forbidden: violates PodSecurity "restricted:latest": host namespaces (hostNetwork=true), hostPort (container "c" uses hostPort 80), privileged (container "c" must not set securityContext.privileged=true), allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")'  # noqa: E501
WORKED_BASELINE_MESSAGE = 'pods "p" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true), hostPort (container "c" uses hostPort 80), privileged (container "c" must not set securityContext.privileged=true)'  # noqa: E501


def _joined(lines: list[str], prefix: str) -> str:
    """Per-check lines back into the API server's one message (reasons joined with ", ")."""
    assert all(line.startswith(prefix) for line in lines)
    return prefix + ", ".join(line[len(prefix) :] for line in lines)


def test_worked_example_restricted_order() -> None:
    lines = podsecurity.refusals(worked_example_pod(), R)
    assert lines == WORKED_RESTRICTED
    prefix = 'pods "p" is forbidden: violates PodSecurity "restricted:latest": '
    assert _joined(lines, prefix) == WORKED_RESTRICTED_MESSAGE
    assert [v.check for v in podsecurity.violations(worked_example_pod(), R)] == [
        "hostNamespaces",
        "hostPorts",
        "privileged",
        "allowPrivilegeEscalation",
        "capabilities_restricted",
        "runAsNonRoot",
        "seccompProfile_restricted",
    ]


def test_worked_example_baseline() -> None:
    lines = podsecurity.refusals(worked_example_pod(), B)
    assert (
        _joined(lines, 'pods "p" is forbidden: violates PodSecurity "baseline:latest": ')
        == WORKED_BASELINE_MESSAGE
    )
    assert len(lines) == 3


def test_worked_example_privileged() -> None:
    assert podsecurity.refusals(worked_example_pod(), "privileged") == []


def test_every_check_failing_comes_out_in_registry_order() -> None:
    """One pod failing all 14 restricted-table checks: baseline IDs bytewise, then restricted IDs."""
    pod = mutated(
        all_of(
            psc(
                appArmorProfile={"type": "Unconfined"},
                seLinuxOptions={"type": "spc_t"},
                sysctls=[{"name": "kernel.msgmax", "value": "1"}],
                windowsOptions={"hostProcess": True},
                runAsNonRoot=False,
                runAsUser=0,
                seccompProfile={"type": "Unconfined"},
            ),
            spec(hostPID=True, volumes=[{"name": "data", "hostPath": {"path": "/data"}}]),
            ports("pytorch", 80),
            csc(
                "pytorch",
                privileged=True,
                procMount="Unmasked",
                allowPrivilegeEscalation=True,
                capabilities={"add": ["SYS_ADMIN"]},
            ),
        )
    )
    restricted = [
        "appArmorProfile",
        "hostNamespaces",
        "hostPorts",
        "privileged",
        "procMount",
        "seLinuxOptions",
        "sysctls",
        "windowsHostProcess",
        "allowPrivilegeEscalation",
        "capabilities_restricted",
        "restrictedVolumes",
        "runAsNonRoot",
        "runAsUser",
        "seccompProfile_restricted",
    ]
    assert [v.check for v in podsecurity.violations(pod, R)] == restricted
    assert list(podsecurity.checks(R)) == restricted
    baseline = [
        "appArmorProfile",
        "capabilities_baseline",
        "hostNamespaces",
        "hostPathVolumes",
        "hostPorts",
        "privileged",
        "procMount",
        "seLinuxOptions",
        "seccompProfile_baseline",
        "sysctls",
        "windowsHostProcess",
    ]
    assert [v.check for v in podsecurity.violations(pod, B)] == baseline
    assert list(podsecurity.checks(B)) == baseline
    assert podsecurity.checks("privileged") == {}
    assert podsecurity.violations(pod, "privileged") == []


def test_unknown_level_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown Pod Security level 'strict'"):
        podsecurity.refusals(compliant_pod(), "strict")


# --- LimitRanger, ResourceQuota and the admission order ---------------------------------------------


def gpu_pod(
    name: str, resources_: Obj | None = None, init_resources: Obj | None = None, index: int = 0
) -> EffectivePod:
    """A restricted-compliant pod of the job whose containers have the given `resources`."""
    manifest = compliant_pod(name)
    manifest["spec"]["containers"][0]["resources"] = copy.deepcopy(resources_ or {})
    manifest["spec"]["initContainers"][0]["resources"] = copy.deepcopy(init_resources or {})
    return EffectivePod(
        owner="PyTorchJob/mnist-r1", role="Worker", index=index, node_rank=index, manifest=manifest
    )


def limit_range(item: Obj) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "gpu-limits", "namespace": "training"},
        "spec": {"limits": [{"type": "Container", **item}]},
    }


def quota(name: str, hard: dict[str, str]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": "training"},
        "spec": {"hard": hard},
    }


def namespace(*objects: Obj, level: str = R) -> Namespace:
    return Namespace(
        name="training",
        level=level,
        limit_ranges=tuple(o for o in objects if o["kind"] == "LimitRange"),
        quotas=tuple(o for o in objects if o["kind"] == "ResourceQuota"),
    )


def _resources(pod: EffectivePod, container: str) -> Obj:
    return _container(pod.manifest, container)["resources"]


def test_limit_range_item_defaulting() -> None:
    assert resources.defaulted_item({"type": "Container", "max": {"nvidia.com/gpu": "1"}}) == {
        "type": "Container",
        "max": {"nvidia.com/gpu": "1"},
        "default": {"nvidia.com/gpu": "1"},
        "defaultRequest": {"nvidia.com/gpu": "1"},
    }
    assert resources.defaulted_item(
        {
            "type": "Container",
            "max": {"cpu": "4"},
            "default": {"cpu": "2"},
            "min": {"cpu": "500m", "memory": "1Gi"},
        }
    ) == {
        "type": "Container",
        "max": {"cpu": "4"},
        "min": {"cpu": "500m", "memory": "1Gi"},
        "default": {"cpu": "2"},
        "defaultRequest": {"cpu": "2", "memory": "1Gi"},
    }


def test_limit_range_max_defaults_limit_and_request() -> None:
    pod = gpu_pod(NAME)
    result = admit([pod], namespace(limit_range({"max": {"nvidia.com/gpu": "1"}})))
    assert result.refusals == []
    assert result.admitted
    (admitted,) = result.pods
    assert _resources(admitted, "pytorch") == {
        "limits": {"nvidia.com/gpu": "1"},
        "requests": {"nvidia.com/gpu": "1"},
    }
    # LimitRanger mutates init containers too.
    assert _resources(admitted, "init-pytorch") == {
        "limits": {"nvidia.com/gpu": "1"},
        "requests": {"nvidia.com/gpu": "1"},
    }
    # The caller's manifest is left as it was.
    assert _resources(pod, "pytorch") == {}


def test_limit_range_keeps_explicit_values() -> None:
    pod = gpu_pod(NAME, {"limits": {"nvidia.com/gpu": "1", "cpu": "4"}})
    result = admit([pod], namespace(limit_range({"max": {"nvidia.com/gpu": "1"}, "default": {"cpu": "2"}})))
    assert result.refusals == []
    # Requests come from the pod's own limits (API defaulting runs before LimitRanger).
    assert _resources(result.pods[0], "pytorch") == {
        "limits": {"nvidia.com/gpu": "1", "cpu": "4"},
        "requests": {"nvidia.com/gpu": "1", "cpu": "4"},
    }


def test_limit_range_max_refuses_larger_limit() -> None:
    pod = gpu_pod(NAME, {"limits": {"nvidia.com/gpu": "2"}})
    result = admit([pod], namespace(limit_range({"max": {"nvidia.com/gpu": "1"}})))
    assert result.refusals == [
        'pods "mnist-r1-worker-0" is forbidden: maximum nvidia.com/gpu usage per Container is 1, but limit is 2'  # noqa: E501
    ]
    assert not result.admitted


def test_limit_range_refusal_comes_before_pod_security() -> None:
    manifest_pod = gpu_pod(NAME, {"limits": {"nvidia.com/gpu": "2"}})
    _container(manifest_pod.manifest, "pytorch")["securityContext"]["privileged"] = True
    result = admit([manifest_pod], namespace(limit_range({"max": {"nvidia.com/gpu": "1"}})))
    assert result.refusals == [
        'pods "mnist-r1-worker-0" is forbidden: maximum nvidia.com/gpu usage per Container is 1, but limit is 2'  # noqa: E501
    ]


def test_pod_security_refusal_through_admit() -> None:
    pod = gpu_pod(NAME, {"limits": {"nvidia.com/gpu": "1"}})
    _container(pod.manifest, "pytorch")["securityContext"]["privileged"] = True
    ns = namespace(quota("gpu-quota", {"requests.nvidia.com/gpu": "1"}), level=B)
    result = admit([pod, gpu_pod("mnist-r1-worker-1", {"limits": {"nvidia.com/gpu": "1"}}, index=1)], ns)
    # The refused pod is not charged: the second pod still fits the quota of 1.
    assert result.refusals == [
        'pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "baseline:latest": privileged (container "pytorch" must not set securityContext.privileged=true)',  # noqa: E501
    ]


def test_quota_exceeded_on_third_pod() -> None:
    names = ["mnist-r1-master-0", "mnist-r1-worker-0", "mnist-r1-worker-1", "mnist-r1-worker-2"]
    pods = [gpu_pod(n, {"limits": {"nvidia.com/gpu": "2"}}, index=i) for i, n in enumerate(names)]
    result = admit(pods, namespace(quota("gpu-quota", {"requests.nvidia.com/gpu": "4"})))
    assert len(result.pods) == 4
    # Refused pods are not charged, so the fourth sees the same usage as the third.
    assert result.refusals == [
        'pods "mnist-r1-worker-1" is forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=2, used: requests.nvidia.com/gpu=4, limited: requests.nvidia.com/gpu=4',  # noqa: E501
        'pods "mnist-r1-worker-2" is forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=2, used: requests.nvidia.com/gpu=4, limited: requests.nvidia.com/gpu=4',  # noqa: E501
    ]


def test_quota_two_pods_fit_exactly() -> None:
    pods = [gpu_pod(f"mnist-r1-worker-{i}", {"limits": {"nvidia.com/gpu": "2"}}, index=i) for i in range(2)]
    assert admit(pods, namespace(quota("gpu-quota", {"requests.nvidia.com/gpu": "4"}))).refusals == []


def test_quota_on_extended_resource_needs_no_explicit_request() -> None:
    result = admit([gpu_pod(NAME)], namespace(quota("gpu-quota", {"requests.nvidia.com/gpu": "4"})))
    assert result.refusals == []


def test_quota_must_specify_cpu_request() -> None:
    pod = gpu_pod(NAME, {"limits": {"nvidia.com/gpu": "1"}}, {"requests": {"cpu": "1"}})
    result = admit([pod], namespace(quota("compute", {"requests.cpu": "8"})))
    assert result.refusals == [
        'pods "mnist-r1-worker-0" is forbidden: failed quota: compute: must specify requests.cpu for: pytorch'
    ]


def test_quota_must_specify_several_keys_sorted() -> None:
    pod = gpu_pod(NAME, {}, {"requests": {"cpu": "1"}})
    result = admit([pod], namespace(quota("compute", {"requests.cpu": "8", "limits.memory": "16Gi"})))
    assert result.refusals == [
        'pods "mnist-r1-worker-0" is forbidden: failed quota: compute: must specify limits.memory for: init-pytorch,pytorch; requests.cpu for: pytorch',  # noqa: E501
    ]


def test_quota_requests_default_from_limits() -> None:
    pods = [
        gpu_pod(f"mnist-r1-worker-{i}", {"limits": {"cpu": "1"}}, {"limits": {"cpu": "1"}}, index=i)
        for i in range(2)
    ]
    result = admit(pods, namespace(quota("compute", {"requests.cpu": "1"})))
    assert _resources(result.pods[0], "pytorch")["requests"] == {"cpu": "1"}
    assert result.refusals == [
        'pods "mnist-r1-worker-1" is forbidden: exceeded quota: compute, requested: requests.cpu=1, used: requests.cpu=1, limited: requests.cpu=1',  # noqa: E501
    ]


def test_quota_quantities_printed_canonically() -> None:
    pods = [
        gpu_pod(
            f"mnist-r1-worker-{i}",
            {"requests": {"cpu": "500m", "memory": "3Gi"}},
            {"requests": {"cpu": "100m", "memory": "1Gi"}},
            index=i,
        )
        for i in range(3)
    ]
    result = admit(pods, namespace(quota("compute", {"requests.cpu": "1", "requests.memory": "12Gi"})))
    assert result.refusals == [
        'pods "mnist-r1-worker-2" is forbidden: exceeded quota: compute, requested: requests.cpu=500m, used: requests.cpu=1, limited: requests.cpu=1',  # noqa: E501
    ]


def test_quota_init_containers_count_as_max() -> None:
    def pod(name: str, containers: list[str], inits: list[str], index: int = 0) -> EffectivePod:
        effective = gpu_pod(name, index=index)
        spec_ = effective.manifest["spec"]
        template = spec_["containers"][0]
        spec_["containers"] = [
            {**copy.deepcopy(template), "name": f"c{i}", "resources": {"limits": {"nvidia.com/gpu": g}}}
            for i, g in enumerate(containers)
        ]
        spec_["initContainers"] = [
            {**copy.deepcopy(template), "name": f"i{i}", "resources": {"limits": {"nvidia.com/gpu": g}}}
            for i, g in enumerate(inits)
        ]
        return effective

    # max(1 + 1, max(3, 1)) = 3: fits a quota of 3 (a sum over all containers, 6, would not).
    init_heavy = pod(NAME, ["1", "1"], ["3", "1"])
    assert admit([init_heavy], namespace(quota("gpu-quota", {"requests.nvidia.com/gpu": "3"}))).refusals == []
    assert admit([init_heavy], namespace(quota("gpu-quota", {"requests.nvidia.com/gpu": "2"}))).refusals == [
        'pods "mnist-r1-worker-0" is forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=3, used: requests.nvidia.com/gpu=0, limited: requests.nvidia.com/gpu=2',  # noqa: E501
    ]
    # max(2 + 2, 3) = 4.
    sum_heavy = pod(NAME, ["2", "2"], ["3"])
    assert admit([sum_heavy], namespace(quota("gpu-quota", {"requests.nvidia.com/gpu": "3"}))).refusals == [
        'pods "mnist-r1-worker-0" is forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=4, used: requests.nvidia.com/gpu=0, limited: requests.nvidia.com/gpu=3',  # noqa: E501
    ]
    # Two init-heavy pods charge 3 each.
    pods = [pod(f"mnist-r1-worker-{i}", ["1", "1"], ["3"], index=i) for i in range(3)]
    assert admit(pods, namespace(quota("gpu-quota", {"requests.nvidia.com/gpu": "6"}))).refusals == [
        'pods "mnist-r1-worker-2" is forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=3, used: requests.nvidia.com/gpu=6, limited: requests.nvidia.com/gpu=6',  # noqa: E501
    ]
    usage = resources.pod_usage(
        {
            "spec": {
                "containers": [
                    {"resources": {"requests": {"cpu": "1"}}},
                    {"resources": {"requests": {"cpu": "1"}}},
                ],
                "initContainers": [{"resources": {"requests": {"cpu": "3"}}}],
            }
        }
    )
    assert usage["requests.cpu"][0] == Decimal(3)
    assert usage["cpu"][0] == Decimal(3)


def test_limit_range_message_uses_canonical_quantities() -> None:
    """Upstream prints both quantities with Quantity.String(), the canonical form (1.5 -> 1500m)."""
    pod = gpu_pod(NAME, {"limits": {"cpu": "2000m"}})
    result = admit([pod], namespace(limit_range({"max": {"cpu": "1.5"}})))
    assert result.refusals == [
        'pods "mnist-r1-worker-0" is forbidden: maximum cpu usage per Container is 1500m, but limit is 2'
    ]
