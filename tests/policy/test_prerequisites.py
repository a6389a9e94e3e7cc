"""The policy pack over the prerequisites stack: everything passes with the pack's defaults; the NFS
server's privileged pod passes only because its namespace is named in `privilegedNamespaces`."""

from __future__ import annotations

import guardrails as g
import pytest

from tests.infra.conftest import PREREQUISITE_STACKS
from tests.policy.conftest import stack_objects

pytest.importorskip("pulumi_policy")

import crossguard  # noqa: E402
from pulumi_policy import ResourceValidationPolicy  # noqa: E402

from tests.policy.feeding import violations_of  # noqa: E402


def _server(objects):
    (server,) = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "nfs-server"]
    return server


@pytest.mark.parametrize("stack", PREREQUISITE_STACKS)
def test_every_object_passes_every_policy_with_the_packs_defaults(stack):
    objects = stack_objects(stack)
    policies = [p for p in crossguard.policies() if isinstance(p, ResourceValidationPolicy)]
    for obj in objects:
        for policy in policies:
            assert violations_of(policy, obj, stack=stack) == [], (
                policy.name,
                obj["kind"],
                obj["metadata"]["name"],
            )
    assert g.shared_claims_read_write_many(objects) == []


@pytest.mark.parametrize("stack", PREREQUISITE_STACKS)
def test_only_the_nfs_server_needs_the_exemption_and_only_for_privileged(stack):
    objects = stack_objects(stack)
    pod_security = next(p for p in crossguard.policies() if p.name == "pod-security-restricted")
    reported = violations_of(pod_security, _server(objects), {"privilegedNamespaces": []}, stack=stack)
    assert reported[0] == (
        'Deployment nfs-server: privileged (container "nfs-server" must not set '
        "securityContext.privileged=true) (restricted: privileged)"
    )
    assert {m.rsplit("(restricted: ", 1)[1].rstrip(")") for m in reported} == {
        "privileged",
        "allowPrivilegeEscalation",
        "capabilities_restricted",
        "runAsNonRoot",
        "seccompProfile_restricted",
    }
    assert violations_of(pod_security, _server(objects), stack=stack) == []
    # The pair is the stack's: a namespace of that name in any other stack gets no exemption.
    assert violations_of(pod_security, _server(objects), stack="team-a") == reported
    # Every other pod template meets 'restricted' with no exemption at all.
    others = [o for o in objects if g.pod_templates(o) and o is not _server(objects)]
    assert {o["metadata"]["name"] for o in others} == {"minio", "minio-mnist"}
    assert all(g.pod_security_restricted(o) == [] for o in others)
    # The exemption is the namespace's, which enforces 'privileged' and says why.
    (namespace,) = [o for o in objects if o["kind"] == "Namespace" and o["metadata"]["name"] == "nfs-system"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert namespace["metadata"]["annotations"]["ddp-mnist.io/pod-security-reason"]
