"""Team namespaces: a platform stack creates each job stack's namespace, a namespaced deployer Role bound to
that team's identities, the StorageClasses, and the Pod Security label guard; a job stack deploying there
holds no cluster-wide write right. (What the API server does with the guard and the Role is proven in
tests/e2e_local/test_tenancy.py.)"""

from __future__ import annotations

import re
from typing import Any

import pytest

from infra.program.checks import ConfigError
from infra.program.common import platform_facts as platform
from infra.program.common.platform_facts import PlatformMismatch
from infra.program.platform.tenancy import DEPLOYER_ROLE, JOB_DEPLOYER_RULES, LABEL_GUARD, READER_ROLE
from infra.stackconfig import load_stack, stack_names
from tests.docs.test_docs_match_code import resource_name
from tests.infra.conftest import BASE, by_kind, render_config, shipped
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
        job = shipped(name)
        platform_rendering = shipped(job.settings.platform_stack)
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
    eks = shipped("eks-gpu")
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
    from infra.program.platform.service_guard import SERVICE_GUARD

    rendering = render_config(
        {**PLATFORM, "teamNamespaces": ["team-b", "team-a"], "podSecurityLabelGuard": False}
    )
    policy = named(rendering, "ValidatingAdmissionPolicy")[SERVICE_GUARD]
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
    binding = named(rendering, "ValidatingAdmissionPolicyBinding")[SERVICE_GUARD]
    assert binding["spec"] == {"policyName": SERVICE_GUARD, "validationActions": ["Deny"]}
    # Without team namespaces there is nothing to guard.
    assert (
        by_kind(render_config({**PLATFORM, "podSecurityLabelGuard": False}), "ValidatingAdmissionPolicy")
        == []
    )


BOUNDED = {
    **PLATFORM,
    "priorityClasses": ["team-low=100", "team-mid=1000", "team-high=100000"],
    "teamNamespaces": ["team-a", "team-b"],
    "teamQuota": ["requests.cpu=64", "requests.nvidia.com/gpu=8", "persistentvolumeclaims=20"],
    "teamPriorityClasses": ["team-a=team-mid"],
}


def test_each_team_namespace_holds_the_platforms_default_deny_quota_and_priority_quota():
    from infra.program.platform.team_boundary import (
        OWNER_LABEL,
        PLATFORM_DEFAULT_DENY,
        PRIORITY_QUOTA,
        TEAM_QUOTA,
    )

    rendering = render_config(BOUNDED)
    refused = {}
    for namespace in ("team-a", "team-b"):
        (deny,) = named(rendering, "NetworkPolicy", namespace).values()
        assert deny["metadata"]["name"] == PLATFORM_DEFAULT_DENY
        assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
        quotas = named(rendering, "ResourceQuota", namespace)
        assert quotas[TEAM_QUOTA]["spec"] == {
            "hard": {"requests.cpu": "64", "requests.nvidia.com/gpu": "8", "persistentvolumeclaims": "20"}
        }
        priority = quotas[PRIORITY_QUOTA]["spec"]
        assert priority["hard"] == {"pods": "0"}
        (selector,) = priority["scopeSelector"]["matchExpressions"]
        assert (selector["scopeName"], selector["operator"]) == ("PriorityClass", "In")
        refused[namespace] = selector["values"]
        for owned in (deny, *quotas.values()):
            assert owned["metadata"]["labels"][OWNER_LABEL] == "platform"
    system = ["system-cluster-critical", "system-node-critical"]
    # team-a may name team-mid and below; team-b, without an entry, every class of the stack.
    assert refused == {"team-a": [*system, "team-high"], "team-b": system}
    assert rendering.outputs["platform"]["teamPriorityClasses"] == {
        "team-a": ["team-low", "team-mid"],
        "team-b": ["team-high", "team-low", "team-mid"],
    }
    # No teamQuota: no budget quota, the priority quota still.
    plain = render_config({**PLATFORM, "teamNamespaces": ["team-a"]})
    assert set(named(plain, "ResourceQuota", "team-a")) == {PRIORITY_QUOTA}


def test_the_platform_objects_guard_covers_policies_and_quotas_in_team_namespaces_on_every_write():
    from infra.program.platform.team_boundary import OBJECTS_GUARD, OWNER_LABEL

    rendering = render_config({**BOUNDED, "podSecurityLabelGuard": False})
    policy = named(rendering, "ValidatingAdmissionPolicy")[OBJECTS_GUARD]
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    rules = {
        (r["apiGroups"][0], resource): r["operations"]
        for r in spec["matchConstraints"]["resourceRules"]
        for resource in r["resources"]
    }
    assert rules == {
        ("", "resourcequotas"): ["CREATE", "UPDATE", "DELETE"],
        ("", "limitranges"): ["CREATE", "UPDATE", "DELETE"],
        ("networking.k8s.io", "networkpolicies"): ["CREATE", "UPDATE", "DELETE"],
    }
    assert spec["matchConstraints"]["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "team-a",
        "team-b",
    ]
    (owned,) = spec["variables"]
    # Labelled before (UPDATE, DELETE: oldObject) or after (CREATE, UPDATE: object), each null-guarded.
    for side in ("oldObject", "object"):
        assert f"{side} != null && has({side}.metadata.labels) && '{OWNER_LABEL}' in" in owned["expression"]
    (rule,) = spec["validations"]
    assert rule["expression"] == (
        "!variables.owned || authorizer.group('ddp-mnist.io').resource('platformobjects')"
        ".namespace(request.namespace).check('update').allowed()"
    )
    assert MESSAGE_EXPRESSION.fullmatch(rule["messageExpression"]), rule["messageExpression"]
    binding = named(rendering, "ValidatingAdmissionPolicyBinding")[OBJECTS_GUARD]
    assert binding["spec"] == {"policyName": OBJECTS_GUARD, "validationActions": ["Deny"]}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {**BOUNDED, "teamQuota": ["requests.cpu"]},
            "teamQuota=[\"requests.cpu\"] is invalid: must be 'resource=quantity' entries",
        ),
        (
            {**BOUNDED, "teamQuota": ["pods=-1"]},
            "teamQuota=[\"pods=-1\"] is invalid: must be 'resource=quantity' entries",
        ),
        (
            {**BOUNDED, "teamQuota": ["pods=1", "pods=2"]},
            "must be entries with distinct resource names",
        ),
        (
            {**BOUNDED, "teamPriorityClasses": ["team-c=team-low"]},
            "teamPriorityClasses=team-c=team-low is invalid: must be an entry for a namespace "
            "teamNamespaces names (team-a, team-b)",
        ),
        (
            {**BOUNDED, "teamPriorityClasses": ["team-a=urgent"]},
            "teamPriorityClasses=team-a=urgent is invalid: must be an entry naming one of priorityClasses "
            "(team-low, team-mid, team-high)",
        ),
        (
            {**BOUNDED, "teamPriorityClasses": ["team-a"]},
            "must be 'namespace=class' entries",
        ),
        (
            {**JOB, "operatorInitContainerRestricted": True, "teamQuota": ["pods=1"]},
            'teamQuota=["pods=1"] is invalid: must be unset with stackRole job',
        ),
    ],
)
def test_bad_team_budget_config_fails_with_the_key_and_what_is_allowed(values, message):
    with pytest.raises(ConfigError) as raised:
        settings_of({**BASE, **values})
    assert message in str(raised.value)


def test_a_job_stack_in_a_team_namespace_may_not_name_a_class_above_its_own_or_drop_its_policies():
    found = platform.facts(settings_of({**BOUNDED, "operatorInstall": True})[0])
    assert found is not None
    team_a = {"namespace": "team-a", "createNamespace": False}
    with pytest.raises(PlatformMismatch) as refused:
        take({**team_a, "jobPriorityClassName": "team-high"}, found)
    assert str(refused.value) == (
        "stack team-a sets jobPriorityClassName team-high, but platform stack acme/ddp-mnist/plat refuses "
        "it in team namespace team-a (teamPriorityClasses; it allows: team-low, team-mid)"
    )
    assert take({**team_a, "jobPriorityClassName": "team-mid"}, found).job_priority_class_name == "team-mid"
    take({"namespace": "team-b", "createNamespace": False, "jobPriorityClassName": "team-high"}, found)
    with pytest.raises(PlatformMismatch, match="sets jobNetworkPolicy false, but platform stack"):
        take({**team_a, "jobNetworkPolicy": False}, found)


def test_every_shipped_job_stack_fits_the_team_quota_its_platform_sets():
    """Each workload of a shipped job stack (they run one after another) is admitted under its platform's
    ddp-mnist-team-quota by the quota model (`infra/review/admission`), and its claims fit the quota's
    claim count and storage: a platform stack's budget never refuses the job stack shipped beside it."""
    from infra.program.platform.team_boundary import TEAM_QUOTA
    from infra.review.admission import Namespace, admit, resources
    from infra.review.cluster import cluster_view

    checked = 0
    for name in stack_names():
        stack = load_stack(name)
        if stack.values.get("ddp-mnist:stackRole") != "job":
            continue
        job = shipped(name)
        namespace = job.settings.namespace
        platform_rendering = shipped(job.settings.platform_stack)
        quota = named(platform_rendering, "ResourceQuota", namespace)[TEAM_QUOTA]
        hard = quota["spec"]["hard"]
        assert "requests.nvidia.com/gpu" in hard, name  # the GPUs, the budget that matters most
        view = cluster_view(job.objects, job.settings)
        budgeted = Namespace(namespace, view.namespace.level, quotas=(quota,))
        pods = [
            p
            for p in view.effective.pods
            if (p.manifest["metadata"].get("namespace") or namespace) == namespace
        ]
        for owner in dict.fromkeys(p.owner for p in pods):
            assert admit([p for p in pods if p.owner == owner], budgeted).refusals == [], (name, owner)
        claims = [
            c["spec"]["resources"]["requests"]["storage"] for c in by_kind(job, "PersistentVolumeClaim")
        ]
        assert len(claims) <= int(hard["persistentvolumeclaims"]), name
        assert sum(map(resources.quantity, claims)) <= resources.quantity(hard["requests.storage"]), name
        checked += 1
    assert checked == 4


def test_the_quota_model_refuses_a_job_over_its_team_quota():
    """The fit test above can fail: a GPU budget below the job's refuses its pods."""
    from infra.program.platform.team_boundary import TEAM_QUOTA
    from infra.review.admission import Namespace, admit
    from infra.review.cluster import cluster_view

    job = shipped("eks-gpu")
    platform_rendering = shipped("eks-platform")
    quota = named(platform_rendering, "ResourceQuota", job.settings.namespace)[TEAM_QUOTA]
    short = {**quota, "spec": {"hard": {**quota["spec"]["hard"], "requests.nvidia.com/gpu": "4"}}}
    view = cluster_view(job.objects, job.settings)
    trainers = [
        p
        for p in view.effective.pods
        if p.manifest["spec"]["containers"][0]["resources"]["requests"].get("nvidia.com/gpu")
    ]
    refusals = admit(trainers, Namespace(job.settings.namespace, "restricted", quotas=(short,))).refusals
    assert refusals and "exceeded quota: ddp-mnist-team-quota" in refusals[0]
