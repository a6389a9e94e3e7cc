"""Pod Security's restricted checks (`k8s.io/pod-security-admission` v0.33 `policy/check_*.go`)."""

from __future__ import annotations

from infra.review.admission.podsecurity.baseline import SECCOMP_TYPES
from infra.review.admission.podsecurity.shared import (
    Obj,
    Result,
    _containers,
    _containers_phrase,
    _sc,
    _windows,
    join_quote,
    pluralize,
)

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
