"""Team namespaces: a platform stack creates each job stack's namespace, a namespaced deployer Role bound to
that team's identities, the StorageClasses, and the Pod Security label guard; a job stack deploying there
holds no cluster-wide write right. (What the API server does with the guard and the Role is proven in
tests/e2e_local/test_tenancy.py.)"""

from __future__ import annotations

import re
from typing import Any

import pytest

from infra.offline.manifest import render
from infra.offline.stackconfig import load_stack, stack_names
from infra.program import platform
from infra.program.checks import ConfigError
from infra.program.platform import PlatformMismatch
from infra.program.tenancy import DEPLOYER_ROLE, JOB_DEPLOYER_RULES, LABEL_GUARD, READER_ROLE
from tests.docs.test_docs_match_code import resource_name
from tests.infra.conftest import BASE, by_kind, render_config
from tests.infra.test_platform_stack import JOB, settings_of, take

PLATFORM = {"stackRole": "platform", "operatorInstall": False, "priorityClasses": ["team-high=1000"]}
TEAMS = {
    **PLATFORM,
    "teamNamespaces": ["team-a", "team-b=baseline"],
    "teamDeployers": [
        "team-a=User:alice@example.com",
        "team-a=ServiceAccount:ci/deployer",
        "team-b=Group:team-b-deployers",
    ],
}


def named(rendering: Any, kind: str, namespace: str | None = None) -> dict[str, dict[str, Any]]:
    return {
        o["metadata"]["name"]: o
        for o in by_kind(rendering, kind)
        if namespace is None or o["metadata"].get("namespace") == namespace
    }


def test_each_team_namespace_enforces_its_level_and_outlives_a_platform_destroy():
    rendering = render_config(TEAMS)
    namespaces = named(rendering, "Namespace")
    for name, level in (("team-a", "restricted"), ("team-b", "baseline")):
        labels = namespaces[name]["metadata"]["labels"]
        assert {labels[f"pod-security.kubernetes.io/{m}"] for m in ("enforce", "warn", "audit")} == {level}
    kept = {
        r.name
        for r in rendering.registrations
        if r.type == "kubernetes:core/v1:Namespace" and r.retain_on_delete
    }
    assert kept >= {"tenancy-team-a", "tenancy-team-b"}
    assert rendering.outputs["platform"]["teamNamespaces"] == {"team-a": "restricted", "team-b": "baseline"}


def test_deployers_get_the_namespaced_role_in_their_namespace_only_and_get_on_storage_classes():
    rendering = render_config(TEAMS)
    for namespace, subjects in (
        ("team-a", [("User", "alice@example.com", None), ("ServiceAccount", "deployer", "ci")]),
        ("team-b", [("Group", "team-b-deployers", None)]),
    ):
        role = named(rendering, "Role", namespace)[DEPLOYER_ROLE]
        assert {r["apiGroups"][0] for r in role["rules"]} == {g for g, _, _ in JOB_DEPLOYER_RULES}
        binding = named(rendering, "RoleBinding", namespace)[DEPLOYER_ROLE]
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": DEPLOYER_ROLE,
        }
        assert [(s["kind"], s["name"], s.get("namespace")) for s in binding["subjects"]] == subjects
    reader = named(rendering, "ClusterRole")[READER_ROLE]
    assert reader["rules"] == [
        {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["get"]}
    ]
    (reader_binding,) = [
        b for b in by_kind(rendering, "ClusterRoleBinding") if b["metadata"]["name"] == READER_ROLE
    ]
    assert len(reader_binding["subjects"]) == 3
    # Nothing cluster-wide lets a deployer write: the only ClusterRoles are the reader and the guard's.
    writes = {"create", "update", "patch", "delete", "*"}
    for cluster_role in by_kind(rendering, "ClusterRole"):
        if cluster_role["metadata"]["name"] == READER_ROLE:
            assert not writes & {v for r in cluster_role["rules"] for v in r["verbs"]}


def test_the_deployer_role_grants_no_namespace_quota_role_or_binding():
    role = named(render_config(TEAMS), "Role", "team-a")[DEPLOYER_ROLE]
    writable = {
        (group, resource)
        for rule in role["rules"]
        if "create" in rule["verbs"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    for forbidden in (
        ("", "namespaces"),
        ("", "resourcequotas"),
        ("", "limitranges"),
        ("rbac.authorization.k8s.io", "roles"),
        ("rbac.authorization.k8s.io", "rolebindings"),
        ("", "pods"),
    ):
        assert forbidden not in writable


def test_the_label_guard_is_on_by_default_and_lists_the_allowed_privileged_namespaces():
    rendering = render_config({**PLATFORM, "podSecurityPrivilegedNamespaces": ["nfs-system"]})
    (policy,) = by_kind(rendering, "ValidatingAdmissionPolicy")
    assert policy["metadata"]["name"] == LABEL_GUARD
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == ["namespaces"]
    relabel, privileged = policy["spec"]["validations"]
    assert "check('update').allowed()" in relabel["expression"]
    assert privileged["expression"].endswith('object.metadata.name in ["nfs-system"]')
    (binding,) = by_kind(rendering, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {"policyName": LABEL_GUARD, "validationActions": ["Deny"]}
    off = render_config({**PLATFORM, "podSecurityLabelGuard": False})
    assert by_kind(off, "ValidatingAdmissionPolicy") == []
    # A job or an all stack installs no guard: it is the platform's.
    assert by_kind(render_config({}), "ValidatingAdmissionPolicy") == []


def test_the_platform_creates_the_storage_classes_job_stacks_then_use_as_existing():
    created = render_config({**PLATFORM, "platformStorageClasses": True, "storageClassName": "team-rwx"})
    classes = named(created, "StorageClass")
    assert {n: c["reclaimPolicy"] for n, c in classes.items()} == {
        "team-rwx": "Retain",
        "team-rwx-data": "Delete",
    }
    assert created.outputs["platform"]["storageClasses"] == {
        "team-rwx": "Immediate",
        "team-rwx-data": "Immediate",
    }
    job = render_config(
        {
            **JOB,
            "operatorInitContainerRestricted": True,
            "createNamespace": False,
            "storageProvider": "existing",
            "storageClassName": "team-rwx",
            "dataStorageClassName": "team-rwx-data",
        }
    )
    claims = {
        c["metadata"]["name"]: c["spec"]["storageClassName"] for c in by_kind(job, "PersistentVolumeClaim")
    }
    assert claims == {"ddp-mnist-data": "team-rwx-data", "ddp-mnist-checkpoints": "team-rwx"}
    assert by_kind(job, "StorageClass") == [] and by_kind(job, "Namespace") == []


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {**TEAMS, "teamDeployers": ["team-c=User:carol"]},
            "teamDeployers=team-c=User:carol is invalid: must be an entry for a namespace teamNamespaces "
            "names (team-a, team-b)",
        ),
        (
            {**PLATFORM, "teamNamespaces": ["team-a=privileged"]},
            "teamNamespaces=team-a=privileged is invalid: must be restricted or baseline, or privileged with "
            "team-a in podSecurityPrivilegedNamespaces",
        ),
        (
            {**PLATFORM, "teamNamespaces": ["team-a=open"]},
            "teamNamespaces=[\"team-a=open\"] is invalid: must be 'name' or 'name=level' entries",
        ),
        (
            {**PLATFORM, "teamNamespaces": ["team-a"], "teamDeployers": ["team-a=Robot:r2"]},
            "teamDeployers=[\"team-a=Robot:r2\"] is invalid: must be subjects written 'User:name'",
        ),
        (
            {**JOB, "operatorInitContainerRestricted": True, "teamNamespaces": ["team-a"]},
            'teamNamespaces=["team-a"] is invalid: must be unset with stackRole job '
            "(a platform stack's key)",
        ),
        (
            {**PLATFORM, "platformStorageClasses": True, "storageProvider": "existing"},
            "platformStorageClasses=true is invalid: must be false with storageProvider existing",
        ),
        (
            {"dataStorageClassName": "rwx-data"},
            "dataStorageClassName=rwx-data is invalid: must be empty with storageProvider nfs-csi",
        ),
    ],
)
def test_bad_tenancy_config_fails_with_the_key_and_what_is_allowed(values, message):
    with pytest.raises(ConfigError) as raised:
        settings_of({**BASE, **values})
    assert message in str(raised.value)


def test_a_job_stack_may_not_create_its_platforms_team_namespace_and_takes_its_level():
    found = platform.facts(settings_of({**TEAMS, "operatorInstall": True})[0])
    assert found is not None
    with pytest.raises(PlatformMismatch) as refused:
        take({"namespace": "team-a"}, found)
    assert str(refused.value) == (
        "stack team-a creates namespace team-a (createNamespace true), but platform stack "
        "acme/ddp-mnist/plat owns it (teamNamespaces): set createNamespace false to deploy into it"
    )
    taken = take({"namespace": "team-b", "createNamespace": False}, found)
    assert taken.namespace_pod_security == "baseline"
    with pytest.raises(PlatformMismatch, match="declares namespacePodSecurity=privileged, but its platform"):
        take({"namespace": "team-b", "createNamespace": False, "namespacePodSecurity": "privileged"}, found)


def test_every_shipped_job_stack_deploys_into_a_team_namespace_its_platform_role_covers():
    """What each job stack renders lies in a namespace its platform stack creates, is of a kind the
    platform's deployer Role lets it create there, and uses StorageClasses the platform creates."""
    checked = 0
    for name in stack_names():
        stack = load_stack(name)
        if stack.values.get("ddp-mnist:stackRole") != "job":
            continue
        job = render(stack)
        platform_rendering = render(load_stack(job.settings.platform_stack))
        namespace = job.settings.namespace
        assert namespace in named(platform_rendering, "Namespace"), name
        role = named(platform_rendering, "Role", namespace)[DEPLOYER_ROLE]
        creatable = {
            f"{resource}.{group}" if group else resource
            for rule in role["rules"]
            if {"create", "update", "patch", "delete", "get"} <= set(rule["verbs"])
            for group in rule["apiGroups"]
            for resource in rule["resources"]
        }
        assert {resource_name(o) for o in job.objects} <= creatable, name
        assert named(platform_rendering, "RoleBinding", namespace)[DEPLOYER_ROLE]["subjects"], name
        classes = set(named(platform_rendering, "StorageClass"))
        used = {c["spec"]["storageClassName"] for c in by_kind(job, "PersistentVolumeClaim")}
        assert used <= classes, name
        checked += 1
    assert checked == 4


def test_a_job_on_a_platforms_cloud_classes_seeds_on_its_own_nodes_as_with_its_own_classes():
    """A WaitForFirstConsumer class creates the data volume in its first pod's zone: the seed runs on the
    job's nodes whether the job stack makes the class or takes its platform's (storageVolumeBindingMode)."""
    found = platform.facts(
        settings_of(
            {
                **PLATFORM,
                "operatorInstall": True,
                "teamNamespaces": ["team-a"],
                "platformStorageClasses": True,
                "storageProvider": "aws-efs",
                "efsFileSystemId": "fs-0123456789abcdef0",
            }
        )[0]
    )
    assert found is not None and found["storageClasses"]["ddp-mnist-rwx"] == "WaitForFirstConsumer"
    job = {"namespace": "team-a", "createNamespace": False, "storageProvider": "existing"}
    assert take(job, found).storage_volume_binding_mode == "WaitForFirstConsumer"
    # eks-gpu takes eks-platform's EFS classes: its seed Job runs where its job runs.
    eks = render(load_stack("eks-gpu"))
    (seed,) = [j for j in by_kind(eks, "Job") if j["metadata"]["name"] == "ddp-mnist-seed"]
    assert seed["spec"]["template"]["spec"]["nodeSelector"] == {
        "node.kubernetes.io/instance-type": "g5.12xlarge"
    }


# The guard's messages are CEL string concatenations: quoted literals (no quote inside) and fields.
MESSAGE_EXPRESSION = re.compile(r"('[^'\\]*'|[A-Za-z_][\w.]*)( \+ ('[^'\\]*'|[A-Za-z_][\w.]*))*")


def test_the_guards_messages_are_concatenations_cel_can_parse():
    (policy,) = by_kind(
        render_config({**PLATFORM, "podSecurityPrivilegedNamespaces": ["a", "b"]}),
        "ValidatingAdmissionPolicy",
    )
    for validation in policy["spec"]["validations"]:
        assert MESSAGE_EXPRESSION.fullmatch(validation["messageExpression"]), validation["messageExpression"]


def test_team_namespaces_get_the_service_guard_clusterip_only_unless_the_platform_grants_more():
    from infra.program.service_guard import SERVICE_GUARD

    rendering = render_config(
        {**PLATFORM, "teamNamespaces": ["team-b", "team-a"], "podSecurityLabelGuard": False}
    )
    (policy,) = by_kind(rendering, "ValidatingAdmissionPolicy")
    assert policy["metadata"]["name"] == SERVICE_GUARD
    constraints = policy["spec"]["matchConstraints"]
    assert constraints["resourceRules"][0]["resources"] == ["services"]
    assert constraints["namespaceSelector"] == {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a", "team-b"]}
        ]
    }
    (rule,) = policy["spec"]["validations"]
    assert rule["expression"].startswith("!has(object.spec.type) || object.spec.type == 'ClusterIP' || ")
    assert "resource('externalservices')" in rule["expression"] and rule["reason"] == "Forbidden"
    (binding,) = by_kind(rendering, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {"policyName": SERVICE_GUARD, "validationActions": ["Deny"]}
    # Without team namespaces there is nothing to guard.
    assert (
        by_kind(render_config({**PLATFORM, "podSecurityLabelGuard": False}), "ValidatingAdmissionPolicy")
        == []
    )
