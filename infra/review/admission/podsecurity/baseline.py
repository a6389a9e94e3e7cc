"""Pod Security's baseline checks (`k8s.io/pod-security-admission` v0.33 `policy/check_*.go`)."""

from __future__ import annotations

from infra.review.admission.podsecurity.shared import (
    Obj,
    Result,
    _containers,
    _containers_phrase,
    _go_quote,
    _sc,
    join_quote,
    pluralize,
)

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
