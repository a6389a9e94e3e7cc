"""Least-privilege job stacks and the Pod Security label guard, against the real engine, API server, RBAC
authorizer and admission (ValidatingAdmissionPolicy with CEL's `authorizer`):

22. the platform stack makes a team namespace, its deployer Role bound to one user, and the StorageClasses;
    a job stack deployed by that user alone (a client certificate the cluster's CA signed: no group, no
    right but what the platform bound) seeds, trains and passes its waits, and its `up` aimed at another
    namespace is refused naming that user; the same user cannot create
    a namespace, read another namespace's Secrets, or relabel its own namespace (RBAC), and its NodePort
    Service is refused by the Service guard while a ClusterIP passes. Given the right to
    patch namespaces, its relabel is refused by the label guard, while a label other than Pod Security's
    passes; bound to ddp-mnist-pod-security-admin, its relabel passes. Not even the cluster admin may make
    a namespace enforce privileged outside podSecurityPrivilegedNamespaces.
    The team namespace holds the platform's default-deny and quotas: the job stack runs under a quota on
    CPU, memory, claims and storage (every pod it makes states its requests); the deployer's delete or
    relabel of the platform's policy, and a policy of its own claiming the platform's label, are refused
    by the platform objects' guard while a policy of its own passes; its delete of a quota is refused by
    RBAC; a pod naming a system class or a class above the namespace's is refused by the priority quota,
    one naming the namespace's class is admitted.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from pulumi import automation as auto

from infra.localcluster import components, pki
from infra.localcluster.cluster import State
from infra.stackconfig import load_stack
from tests.e2e import live
from tests.e2e.project import Backend
from tests.e2e.stacks import job_config
from tests.e2e_local import scenario
from tests.e2e_local.conftest import KEEP

pytestmark = pytest.mark.e2e_local

TEAM = "ddp-mnist-local-team"
DEPLOYER = "ddp-mnist-team-deployer"
CLASS = "ddp-mnist-nfs-team"
ENFORCE = "pod-security.kubernetes.io/enforce"
GUARD = "ddp-mnist-pod-security-labels"
SERVICES = "ddp-mnist-team-services"
GRANT = "test-namespace-patcher"  # what scenario 22 gives the deployer on top, then takes back
OBJECTS = "ddp-mnist-platform-objects"
PLATFORM_DENY = "ddp-mnist-platform-default-deny"
LOW_CLASS = "training-low"


def as_user(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture(scope="module")
def team(
    backend: Backend, platform: dict, local_cluster: State, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict]:
    dev = load_stack("dev").values
    scenario.update_platform(
        platform,
        {
            "ddp-mnist:teamNamespaces": json.dumps([TEAM]),
            "ddp-mnist:teamDeployers": json.dumps([f"{TEAM}=User:{DEPLOYER}"]),
            "ddp-mnist:platformStorageClasses": "true",
            "ddp-mnist:storageProvider": "nfs-csi",
            "ddp-mnist:nfsServer": dev["ddp-mnist:nfsServer"],
            "ddp-mnist:nfsShare": dev["ddp-mnist:nfsShare"],
            "ddp-mnist:storageClassName": CLASS,
            "ddp-mnist:podSecurityPrivilegedNamespaces": json.dumps(["nfs-system"]),
            "ddp-mnist:priorityClasses": json.dumps(
                [f"{scenario.PRIORITY_CLASS}={scenario.PRIORITY}", f"{LOW_CLASS}=1000"]
            ),
            "ddp-mnist:teamPriorityClasses": json.dumps([f"{TEAM}={LOW_CLASS}"]),
            "ddp-mnist:teamQuota": json.dumps(
                [
                    "requests.cpu=16",
                    "requests.memory=32Gi",
                    "persistentvolumeclaims=4",
                    "requests.storage=100Gi",
                ]
            ),
        },
    )
    certificate = pki.client_certificate(local_cluster.pki, DEPLOYER)
    kubeconfig = tmp_path_factory.mktemp("deployer") / "kubeconfig"
    server = local_cluster.read()["server"]
    kubeconfig.write_text(yaml.safe_dump(components.kubeconfig(server, local_cluster.pki, certificate)))
    config = job_config(
        scenario.IMAGE,
        *scenario.KEYS,
        namespace=TEAM,
        createNamespace="false",
        storageProvider="existing",
        storageClassName=CLASS,
        dataStorageClassName=f"{CLASS}-data",
    )
    config["kubernetes:kubeconfig"] = str(kubeconfig)
    stack = scenario.stack(backend, "local-team", config)
    yield {"stack": stack, "kubeconfig": kubeconfig, "config": config, "backend": backend}
    live.kubectl("delete", "clusterrolebinding", GRANT, "--ignore-not-found")
    live.kubectl("delete", "clusterrole", GRANT, "--ignore-not-found")
    if not KEEP:
        stack.destroy(on_output=print)


def test_22_a_job_stack_deploys_with_its_team_role_alone_and_cannot_relabel_its_namespace(team: dict) -> None:
    namespace = live.get("namespace", TEAM)
    assert namespace["metadata"]["labels"][ENFORCE] == "restricted"
    kubeconfig = team["kubeconfig"]

    # The job stack's `up` as the deployer: the provider's calls and the program's waits, RBAC judging each.
    outputs = scenario.outputs(team["stack"].up(on_output=print, show_secrets=False))
    assert outputs["seedOutcome"] == "Complete"
    assert outputs["jobOutcome"] == "Succeeded"
    assert {c["spec"]["storageClassName"] for c in live.items("pvc", TEAM)} == {CLASS, f"{CLASS}-data"}

    # The provider and the program act as that user (kubernetes:kubeconfig): the same stack's config
    # aimed at another namespace is refused by RBAC, naming the user, and creates nothing there.
    escape = scenario.stack(
        team["backend"], "local-team-escape", {**team["config"], "ddp-mnist:namespace": "ddp-mnist-smoke"}
    )
    try:
        with pytest.raises(auto.CommandError) as refused_up:
            escape.up(on_output=print)
        said = str(refused_up.value)
        # The provider creates by server-side apply: a patch. Which of the stack's first objects the
        # engine sends before it stops on the refusals varies from run to run; each one sent is refused.
        refusal = rf'User "{DEPLOYER}" cannot patch resource "([a-z]+)" in API group "[^"]*" '
        refused_kinds = set(re.findall(refusal + 'in the namespace "ddp-mnist-smoke"', said))
        assert refused_kinds, said[-3000:]
        assert not re.findall(refusal + 'in the namespace "(?!ddp-mnist-smoke")', said), said[-3000:]
        assert live.items("pvc", "ddp-mnist-smoke") == []
    finally:
        escape.destroy(on_output=print)
        escape.workspace.remove_stack("local-team-escape", force=True)

    # Nothing outside its namespace, and not its namespace's labels.
    refused = {
        "create a namespace": as_user(kubeconfig, "create", "namespace", "ddp-mnist-team-escape"),
        "read the smoke namespace's Secrets": as_user(kubeconfig, "get", "secrets", "-n", "ddp-mnist-smoke"),
        "relabel its namespace": as_user(
            kubeconfig, "label", "namespace", TEAM, f"{ENFORCE}=privileged", "--overwrite"
        ),
    }
    for what, done in refused.items():
        assert done.returncode != 0 and "Forbidden" in done.stderr, (what, done.stderr)

    # Services stay inside the cluster: a NodePort is refused by the Service guard, a ClusterIP passes.
    nodeport = as_user(kubeconfig, "create", "service", "nodeport", "escape", "--tcp=80:8080", "-n", TEAM)
    assert nodeport.returncode != 0, nodeport.stdout
    assert (
        f"ValidatingAdmissionPolicy '{SERVICES}' with binding '{SERVICES}' denied request" in nodeport.stderr
    )
    assert f"Service {TEAM}/escape: type NodePort puts the namespace on addresses outside" in nodeport.stderr
    inside = as_user(kubeconfig, "create", "service", "clusterip", "inside", "--tcp=80:8080", "-n", TEAM)
    assert inside.returncode == 0, inside.stderr
    assert as_user(kubeconfig, "delete", "service", "inside", "-n", TEAM).returncode == 0

    # Given the right to patch namespaces, the label guard refuses the relabel; other labels pass.
    live.kubectl("create", "clusterrole", GRANT, "--verb=get,patch,update", "--resource=namespaces")
    live.kubectl("create", "clusterrolebinding", GRANT, f"--clusterrole={GRANT}", f"--user={DEPLOYER}")
    relabel = as_user(kubeconfig, "label", "namespace", TEAM, f"{ENFORCE}=privileged", "--overwrite")
    assert relabel.returncode != 0, relabel.stdout
    assert f"ValidatingAdmissionPolicy '{GUARD}' with binding '{GUARD}' denied request" in relabel.stderr
    assert f"{DEPLOYER} may not set, change or remove pod-security.kubernetes.io/ labels" in relabel.stderr
    removal = as_user(kubeconfig, "label", "namespace", TEAM, "pod-security.kubernetes.io/warn-")
    assert removal.returncode != 0 and GUARD in removal.stderr, removal.stderr
    other = as_user(kubeconfig, "label", "namespace", TEAM, "team=ml", "--overwrite")
    assert other.returncode == 0, other.stderr
    assert live.get("namespace", TEAM)["metadata"]["labels"][ENFORCE] == "restricted"

    # Not even the cluster admin may make a namespace privileged outside the platform's list...
    admin = subprocess.run(
        ["kubectl", "label", "namespace", TEAM, f"{ENFORCE}=privileged", "--overwrite"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert admin.returncode != 0, admin.stdout
    assert "enforcing Pod Security privileged is allowed only in nfs-system" in admin.stderr, admin.stderr
    # ...and the identities bound to ddp-mnist-pod-security-admin may relabel, as the authorizer says.
    live.kubectl(
        "create",
        "clusterrolebinding",
        "test-pod-security-admin",
        "--clusterrole=ddp-mnist-pod-security-admin",
        f"--user={DEPLOYER}",
    )
    try:
        baseline = as_user(kubeconfig, "label", "namespace", TEAM, f"{ENFORCE}=baseline", "--overwrite")
        assert baseline.returncode == 0, baseline.stderr
    finally:
        live.kubectl("delete", "clusterrolebinding", "test-pod-security-admin")
        live.kubectl("label", "namespace", TEAM, f"{ENFORCE}=restricted", "team-", "--overwrite")
    assert live.get("namespace", TEAM)["metadata"]["labels"][ENFORCE] == "restricted"


def pod(name: str, priority_class: str) -> dict:
    """A pod Pod Security "restricted" admits, with the requests the team quota asks for."""
    manifest = live.reader_pod(TEAM, scenario.IMAGE, {})
    manifest["metadata"] = {"name": name, "namespace": TEAM}
    manifest["spec"]["priorityClassName"] = priority_class
    manifest["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "100m"
    return manifest


def network_policy(name: str, labels: dict[str, str]) -> str:
    return json.dumps(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": TEAM, "labels": labels},
            "spec": {"podSelector": {"matchLabels": {"app": name}}, "policyTypes": ["Ingress"]},
        }
    )


def as_user_applying(kubeconfig: Path, manifest: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "apply", "-f", "-"],
        input=manifest,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_22_the_team_namespace_holds_the_platforms_policy_and_quotas_which_its_deployer_cannot_change(
    team: dict,
) -> None:
    kubeconfig = team["kubeconfig"]
    deny = live.get("networkpolicy", PLATFORM_DENY, TEAM)
    assert deny["metadata"]["labels"]["ddp-mnist.io/owner"] == "platform"
    quota = live.get("resourcequota", "ddp-mnist-team-quota", TEAM)
    assert quota["spec"]["hard"]["requests.cpu"] == "16"
    # The job stack ran under that quota (the previous test's `up`): the API server counted its claims.
    used = quota["status"].get("used", {})
    assert used.get("persistentvolumeclaims") == "2", quota["status"]

    # The platform's policy: neither deleted nor relabelled by the deployer (the guard, not RBAC: the
    # deployer writes NetworkPolicies), nor imitated by a policy of its own; a policy of its own passes.
    refused = {
        "delete": as_user(kubeconfig, "delete", "networkpolicy", PLATFORM_DENY, "-n", TEAM),
        "relabel": as_user(
            kubeconfig, "label", "networkpolicy", PLATFORM_DENY, "-n", TEAM, "ddp-mnist.io/owner-"
        ),
        "imitate": as_user_applying(
            kubeconfig, network_policy("imitation", {"ddp-mnist.io/owner": "platform"})
        ),
    }
    for what, done in refused.items():
        assert done.returncode != 0, (what, done.stdout)
        assert (
            f"ValidatingAdmissionPolicy '{OBJECTS}' with binding '{OBJECTS}' denied request" in done.stderr
        ), (
            what,
            done.stderr,
        )
        assert f"{DEPLOYER} may not create, change or delete an object the platform owns" in done.stderr
    assert live.exists("networkpolicy", PLATFORM_DENY, TEAM)
    own = as_user_applying(kubeconfig, network_policy("own", {"team": "ml"}))
    assert own.returncode == 0, own.stderr
    assert as_user(kubeconfig, "delete", "networkpolicy", "own", "-n", TEAM).returncode == 0
    quota_delete = as_user(kubeconfig, "delete", "resourcequota", "ddp-mnist-team-quota", "-n", TEAM)
    assert quota_delete.returncode != 0 and "Forbidden" in quota_delete.stderr, quota_delete.stderr

    # PriorityClasses: the system classes and the class above the namespace's are refused by the
    # quota admission plugin (whoever creates the pod); the namespace's own class is admitted.
    for name, priority_class in (
        ("system-class", "system-node-critical"),
        ("above-its-class", scenario.PRIORITY_CLASS),
    ):
        created = subprocess.run(
            ["kubectl", "apply", "-f", "-"],
            input=json.dumps(pod(name, priority_class)),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert created.returncode != 0, (name, created.stdout)
        assert "exceeded quota: ddp-mnist-team-priority" in created.stderr, created.stderr
    live.kubectl("apply", "-f", "-", stdin=json.dumps(pod("its-class", LOW_CLASS)))
    live.kubectl("delete", "pod", "its-class", "-n", TEAM, "--wait=false")
