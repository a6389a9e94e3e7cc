"""Pod Security admission as the API server applies it to a Pod create, in its own wording.

A re-statement of `k8s.io/pod-security-admission` v0.33 (Kubernetes 1.33; `policy/check_*.go`,
`policy/registry.go`, `admission/admission.go`): every baseline and restricted check at version
"latest" (the v1.32 rules), in the registry's order (baseline IDs sorted bytewise, then restricted IDs),
each returning upstream's `ForbiddenReason` and `ForbiddenDetail`. Restricted runs every baseline check
except the three it replaces with stricter ones (hostPathVolumes, capabilities_baseline,
seccompProfile_baseline). The API server joins all failed checks into one message; `refusals` gives
one line per failed check, each in that message's exact shape:

    pods "NAME" is forbidden: violates PodSecurity "restricted:latest": REASON (DETAIL)

Pure Python over plain dicts (no dependencies), so the policy pack can share it.
Not modelled: user-namespace relaxations (feature gate UserNamespacesPodSecurityStandards, off by
default in 1.33), exemptions configured on the API server, and the pre-1.19 seccomp annotations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from infra.review.admission.podsecurity.baseline import (
    check_app_armor_profile,
    check_capabilities_baseline,
    check_host_namespaces,
    check_host_path_volumes,
    check_host_ports,
    check_privileged,
    check_proc_mount,
    check_se_linux_options,
    check_seccomp_profile_baseline,
    check_sysctls,
    check_windows_host_process,
)
from infra.review.admission.podsecurity.restricted import (
    check_allow_privilege_escalation,
    check_capabilities_restricted,
    check_restricted_volumes,
    check_run_as_non_root,
    check_run_as_user,
    check_seccomp_profile_restricted,
)
from infra.review.admission.podsecurity.shared import Obj, Result

LEVELS = ("privileged", "baseline", "restricted")


@dataclass(frozen=True)
class Violation:
    """One failed check: upstream's check ID, reason and detail."""

    check: str
    reason: str
    detail: str

    def message(self, pod: str, level: str) -> str:
        detail = f" ({self.detail})" if self.detail else ""
        return f'pods "{pod}" is forbidden: violates PodSecurity "{level}:latest": {self.reason}{detail}'


Check = Callable[[Obj, Obj], Result]
# Upstream's check IDs; each dict is in the registry's order (IDs sorted bytewise).
BASELINE: dict[str, Check] = {
    "appArmorProfile": check_app_armor_profile,
    "capabilities_baseline": check_capabilities_baseline,
    "hostNamespaces": check_host_namespaces,
    "hostPathVolumes": check_host_path_volumes,
    "hostPorts": check_host_ports,
    "privileged": check_privileged,
    "procMount": check_proc_mount,
    "seLinuxOptions": check_se_linux_options,
    "seccompProfile_baseline": check_seccomp_profile_baseline,
    "sysctls": check_sysctls,
    "windowsHostProcess": check_windows_host_process,
}
RESTRICTED: dict[str, Check] = {
    "allowPrivilegeEscalation": check_allow_privilege_escalation,
    "capabilities_restricted": check_capabilities_restricted,
    "restrictedVolumes": check_restricted_volumes,
    "runAsNonRoot": check_run_as_non_root,
    "runAsUser": check_run_as_user,
    "seccompProfile_restricted": check_seccomp_profile_restricted,
}
OVERRIDDEN_BY_RESTRICTED = {"hostPathVolumes", "capabilities_baseline", "seccompProfile_baseline"}


def checks(level: str) -> dict[str, Check]:
    """The checks a namespace enforcing `level` runs, in upstream's order."""
    if level not in LEVELS:
        raise ValueError(f"unknown Pod Security level {level!r} (one of {', '.join(LEVELS)})")
    if level == "privileged":
        return {}
    if level == "baseline":
        return dict(BASELINE)
    return {
        **{k: v for k, v in BASELINE.items() if k not in OVERRIDDEN_BY_RESTRICTED},
        **RESTRICTED,
    }


def violations(pod: Obj, level: str) -> list[Violation]:
    """What Pod Security at `level` finds wrong with a Pod object (metadata + spec)."""
    spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
    found = []
    for check_id, check in checks(level).items():
        result = check(spec, meta)
        if result is not None:
            found.append(Violation(check_id, *result))
    return found


def refusals(pod: Obj, level: str) -> list[str]:
    """One line per failed check, each in the API server's refusal wording for this pod."""
    meta = pod.get("metadata") or {}
    # A generated name is the prefix plus 5 random characters, shown as `xxxxx` (as EffectivePod does).
    name = meta.get("name") or f"{meta.get('generateName', '')}xxxxx"
    return [v.message(name, level) for v in violations(pod, level)]
