"""The policy pack the Pulumi CLI runs: `pulumi preview --policy-pack policy` (from the repository root).

Constructing `PolicyPack` starts the analyzer server the engine talks to, so it happens only here;
the policies themselves are built (and tested) without an engine in `crossguard.py`.
"""

from crossguard import PACK_NAME, policies
from pulumi_policy import EnforcementLevel, PolicyPack

PolicyPack(
    name=PACK_NAME,
    policies=policies(),
    enforcement_level=EnforcementLevel.MANDATORY,
    description="Platform guardrails for distributed PyTorch training on Kubernetes.",
)
