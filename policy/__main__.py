"""The policy pack the Pulumi CLI runs: `pulumi preview --policy-pack policy` (from the repository root).

Constructing `PolicyPack` starts the analyzer server the engine talks to, so it happens only here;
the policies themselves are built (and tested) without an engine in `crossguard.py`.
"""

import sys
from pathlib import Path

# The Pod Security checks are shared with the project's offline admission model (pure Python, no
# dependencies): make the repository root importable, as running from the root would.
sys.path.append(str(Path(__file__).resolve().parent.parent))

from conversions import share_conversions  # noqa: E402
from crossguard import PACK_NAME, policies  # noqa: E402
from pulumi_policy import EnforcementLevel, PolicyPack  # noqa: E402

share_conversions()  # each request's properties converted once for all the policies, not once each

PolicyPack(
    name=PACK_NAME,
    policies=policies(),
    enforcement_level=EnforcementLevel.MANDATORY,
    description="Platform guardrails for distributed PyTorch training on Kubernetes.",
)
