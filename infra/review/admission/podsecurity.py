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

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Obj = Mapping[str, Any]
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


def join_quote(items: Sequence[str]) -> str:
    return '"' + '", "'.join(items) + '"' if items else ""


def pluralize(singular: str, plural: str, count: int) -> str:
    return singular if count == 1 else plural


def _containers_phrase(names: Sequence[str]) -> str:
    return f"{pluralize('container', 'containers', len(names))} {join_quote(names)}"


def _containers(spec: Obj) -> Iterator[Obj]:
    """Init containers, then containers, then ephemeral containers (upstream's visitContainers)."""
    for field in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(field) or []


def _sc(obj: Obj) -> Obj:
    return obj.get("securityContext") or {}


def _windows(spec: Obj) -> bool:
    return (spec.get("os") or {}).get("name") == "windows"


def _go_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


# --- baseline ------------------------------------------------------------------------------------

APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
# check_capabilities_baseline.go's default set. The program's preview check of jobAddCapabilities
# keeps the same set (infra/program/checks/interconnect.py; a test holds them equal): this module stays
# free of the program's imports, since the policy pack's environment loads it without them.
DEFAULT_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
}  # fmt: skip
SECCOMP_TYPES = ("RuntimeDefault", "Localhost")
Result = tuple[str, str] | None  # (reason, detail) when the check fails


def check_app_armor_profile(spec: Obj, meta: Obj) -> Result:
    setters, values = [], set()
    pod_type = (
        (_sc(spec).get("appArmorProfile") or {}).get("type") if _sc(spec).get("appArmorProfile") else None
    )
    if _sc(spec).get("appArmorProfile") is not None and pod_type not in ("RuntimeDefault", "Localhost"):
        setters.append("pod")
        values.add(str(pod_type or ""))
    bad = []
    for c in _containers(spec):
        profile = _sc(c).get("appArmorProfile")
        if profile is not None and profile.get("type") not in ("RuntimeDefault", "Localhost"):
            bad.append(c.get("name", ""))
            values.add(str(profile.get("type") or ""))
    if bad:
        setters.append(_containers_phrase(bad))
    annotations = sorted(
        f"{k}={_go_quote(str(v))}"
        for k, v in (meta.get("annotations") or {}).items()
        if k.startswith(APPARMOR_ANNOTATION)
        and not (v in ("", "runtime/default") or str(v).startswith("localhost/"))
    )
    if annotations:
        setters.append(pluralize("annotation", "annotations", len(annotations)))
    if not setters:
        return None
    listed = [*sorted(values), *annotations]
    return (
        pluralize("forbidden AppArmor profile", "forbidden AppArmor profiles", len(listed)),
        f"{' and '.join(setters)} must not set AppArmor profile type to {join_quote(listed)}",
    )


def check_capabilities_baseline(spec: Obj, _: Obj) -> Result:
    bad, caps = [], set()
    for c in _containers(spec):
        extra = [
            cap
            for cap in (_sc(c).get("capabilities") or {}).get("add") or []
            if cap not in DEFAULT_CAPABILITIES
        ]
        if extra:
            bad.append(c.get("name", ""))
            caps.update(extra)
    if not bad:
        return None
    return (
        "non-default capabilities",
        f"{_containers_phrase(bad)} must not include {join_quote(sorted(caps))} in securityContext.capabilities.add",
    )


def check_host_namespaces(spec: Obj, _: Obj) -> Result:
    found = [f"{field}=true" for field in ("hostNetwork", "hostPID", "hostIPC") if spec.get(field)]
    return ("host namespaces", ", ".join(found)) if found else None


def check_host_path_volumes(spec: Obj, _: Obj) -> Result:
    names = [v.get("name", "") for v in spec.get("volumes") or [] if v.get("hostPath") is not None]
    if not names:
        return None
    return "hostPath volumes", f"{pluralize('volume', 'volumes', len(names))} {join_quote(names)}"


def check_host_ports(spec: Obj, _: Obj) -> Result:
    bad, ports = [], set()
    for c in _containers(spec):
        used = [str(int(p["hostPort"])) for p in c.get("ports") or [] if p.get("hostPort")]
        if used:
            bad.append(c.get("name", ""))
            ports.update(used)
    if not bad:
        return None
    return "hostPort", (
        f"{_containers_phrase(bad)} {pluralize('uses', 'use', len(bad))} "
        f"{pluralize('hostPort', 'hostPorts', len(ports))} {', '.join(sorted(ports))}"
    )


def check_privileged(spec: Obj, _: Obj) -> Result:
    bad = [c.get("name", "") for c in _containers(spec) if _sc(c).get("privileged") is True]
    if not bad:
        return None
    return "privileged", f"{_containers_phrase(bad)} must not set securityContext.privileged=true"


def check_proc_mount(spec: Obj, _: Obj) -> Result:
    bad, kinds = [], set()
    for c in _containers(spec):
        mount = _sc(c).get("procMount")
        if mount is not None and mount != "Default":
            bad.append(c.get("name", ""))
            kinds.add(str(mount))
    if not bad:
        return None
    return "procMount", (
        f"{_containers_phrase(bad)} must not set securityContext.procMount to {join_quote(sorted(kinds))}"
    )


def check_se_linux_options(spec: Obj, _: Obj) -> Result:
    setters, types = [], set()
    set_user = set_role = False

    def invalid(options: Obj) -> bool:
        nonlocal set_user, set_role
        bad = False
        if options.get("type", "") not in SELINUX_TYPES:
            types.add(options["type"])
            bad = True
        if options.get("user", ""):
            set_user = bad = True
        if options.get("role", ""):
            set_role = bad = True
        return bad

    if _sc(spec).get("seLinuxOptions") is not None and invalid(_sc(spec)["seLinuxOptions"]):
        setters.append("pod")
    bad = [
        c.get("name", "")
        for c in _containers(spec)
        if _sc(c).get("seLinuxOptions") is not None and invalid(_sc(c)["seLinuxOptions"])
    ]
    if bad:
        setters.append(_containers_phrase(bad))
    if not setters:
        return None
    data = [f"{pluralize('type', 'types', len(types))} {join_quote(sorted(types))}"] if types else []
    data += ["user may not be set"] if set_user else []
    data += ["role may not be set"] if set_role else []
    return "seLinuxOptions", (
        f"{' and '.join(setters)} set forbidden securityContext.seLinuxOptions: {'; '.join(data)}"
    )


def check_seccomp_profile_baseline(spec: Obj, _: Obj) -> Result:
    setters, values = [], set()
    pod = _sc(spec).get("seccompProfile")
    if pod is not None and pod.get("type") not in SECCOMP_TYPES:
        setters.append("pod")
        values.add(str(pod.get("type") or ""))
    bad = []
    for c in _containers(spec):
        profile = _sc(c).get("seccompProfile")
        if profile is not None and profile.get("type") not in SECCOMP_TYPES:
            bad.append(c.get("name", ""))
            values.add(str(profile.get("type") or ""))
    if bad:
        setters.append(_containers_phrase(bad))
    if not setters:
        return None
    return "seccompProfile", (
        f"{' and '.join(setters)} must not set securityContext.seccompProfile.type to {join_quote(sorted(values))}"
    )


def check_sysctls(spec: Obj, _: Obj) -> Result:
    names = [s.get("name", "") for s in _sc(spec).get("sysctls") or [] if s.get("name") not in SAFE_SYSCTLS]
    return ("forbidden sysctls", ", ".join(names)) if names else None


def check_windows_host_process(spec: Obj, _: Obj) -> Result:
    setters = ["pod"] if (_sc(spec).get("windowsOptions") or {}).get("hostProcess") is True else []
    bad = [
        c.get("name", "")
        for c in _containers(spec)
        if (_sc(c).get("windowsOptions") or {}).get("hostProcess") is True
    ]
    if bad:
        setters.append(_containers_phrase(bad))
    if not setters:
        return None
    return "hostProcess", (
        f"{' and '.join(setters)} must not set securityContext.windowsOptions.hostProcess=true"
    )


# --- restricted ----------------------------------------------------------------------------------

RESTRICTED_VOLUME_SOURCES = (
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image", "persistentVolumeClaim",
    "projected", "secret",
)  # fmt: skip
NAMED_VOLUME_TYPES = (
    "hostPath", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "nfs", "iscsi", "glusterfs", "rbd",
    "flexVolume", "cinder", "cephfs", "flocker", "fc", "azureFile", "vsphereVolume", "quobyte", "azureDisk",
    "photonPersistentDisk", "portworxVolume", "scaleIO", "storageos",
)  # fmt: skip


def check_allow_privilege_escalation(spec: Obj, _: Obj) -> Result:
    if _windows(spec):
        return None
    bad = [
        c.get("name", "") for c in _containers(spec) if _sc(c).get("allowPrivilegeEscalation") is not False
    ]
    if not bad:
        return None
    return "allowPrivilegeEscalation != false", (
        f"{_containers_phrase(bad)} must set securityContext.allowPrivilegeEscalation=false"
    )


def check_capabilities_restricted(spec: Obj, _: Obj) -> Result:
    if _windows(spec):
        return None
    missing_drop, adding, caps = [], [], set()
    for c in _containers(spec):
        capabilities = _sc(c).get("capabilities")
        if capabilities is None:
            missing_drop.append(c.get("name", ""))
            continue
        if "ALL" not in (capabilities.get("drop") or []):
            missing_drop.append(c.get("name", ""))
        extra = [cap for cap in capabilities.get("add") or [] if cap != "NET_BIND_SERVICE"]
        if extra:
            adding.append(c.get("name", ""))
            caps.update(extra)
    details = []
    if missing_drop:
        details.append(
            f'{_containers_phrase(missing_drop)} must set securityContext.capabilities.drop=["ALL"]'
        )
    if adding:
        details.append(
            f"{_containers_phrase(adding)} must not include {join_quote(sorted(caps))} "
            "in securityContext.capabilities.add"
        )
    return ("unrestricted capabilities", "; ".join(details)) if details else None


def check_restricted_volumes(spec: Obj, _: Obj) -> Result:
    names, kinds = [], set()
    for volume in spec.get("volumes") or []:
        if any(volume.get(source) is not None for source in RESTRICTED_VOLUME_SOURCES):
            continue
        names.append(volume.get("name", ""))
        kinds.add(next((t for t in NAMED_VOLUME_TYPES if volume.get(t) is not None), "unknown"))
    if not names:
        return None
    return "restricted volume types", (
        f"{pluralize('volume', 'volumes', len(names))} {join_quote(names)} {pluralize('uses', 'use', len(names))} "
        f"{pluralize('restricted volume type', 'restricted volume types', len(kinds))} {join_quote(sorted(kinds))}"
    )


def check_run_as_non_root(spec: Obj, _: Obj) -> Result:
    pod = _sc(spec).get("runAsNonRoot")
    setters = ["pod"] if pod is False else []
    explicit, implicit = [], []
    for c in _containers(spec):
        value = _sc(c).get("runAsNonRoot")
        if value is False:
            explicit.append(c.get("name", ""))
        elif value is None and pod is not True:
            implicit.append(c.get("name", ""))
    if explicit:
        setters.append(_containers_phrase(explicit))
    if setters:
        return (
            "runAsNonRoot != true",
            f"{' and '.join(setters)} must not set securityContext.runAsNonRoot=false",
        )
    if implicit:
        return (
            "runAsNonRoot != true",
            f"pod or {_containers_phrase(implicit)} must set securityContext.runAsNonRoot=true",
        )
    return None


def check_run_as_user(spec: Obj, _: Obj) -> Result:
    setters = ["pod"] if _sc(spec).get("runAsUser") == 0 else []
    bad = [c.get("name", "") for c in _containers(spec) if _sc(c).get("runAsUser") == 0]
    if bad:
        setters.append(_containers_phrase(bad))
    return ("runAsUser=0", f"{' and '.join(setters)} must not set runAsUser=0") if setters else None


def check_seccomp_profile_restricted(spec: Obj, _: Obj) -> Result:
    if _windows(spec):
        return None
    setters, values = [], set()
    pod = _sc(spec).get("seccompProfile")
    pod_set = pod is not None and pod.get("type") in SECCOMP_TYPES
    if pod is not None and not pod_set:
        setters.append("pod")
        values.add(str(pod.get("type") or ""))
    explicit, implicit = [], []
    for c in _containers(spec):
        profile = _sc(c).get("seccompProfile")
        if profile is not None and profile.get("type") not in SECCOMP_TYPES:
            explicit.append(c.get("name", ""))
            values.add(str(profile.get("type") or ""))
        elif profile is None and not pod_set:
            implicit.append(c.get("name", ""))
    if explicit:
        setters.append(_containers_phrase(explicit))
    if setters:
        return "seccompProfile", (
            f"{' and '.join(setters)} must not set securityContext.seccompProfile.type to {join_quote(sorted(values))}"
        )
    if implicit:
        return "seccompProfile", (
            f'pod or {_containers_phrase(implicit)} must set securityContext.seccompProfile.type to "RuntimeDefault" '
            'or "Localhost"'
        )
    return None


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
